"""Profiles, files and processes fail closed (issues 29 and 31): what a learner types or a file
holds is checked before it is used, and what the kit starts it also stops."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KIT

LABS = KIT / "03-labs"


def make(folder: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`make ARGS` typed in `folder`, with this test's Python and a stamp that says the kit is
    installed (nothing is built or installed into the checkout)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["PWD"] = str(folder)
    stamp = tmp_path / "installed.stamp"
    stamp.touch()
    made = ["make", "-s", *args, f"PY={sys.executable}", f"STAMP={stamp}"]
    return subprocess.run(made, cwd=folder, env=env, capture_output=True, text=True, timeout=60)


# ── make new-lesson: NAME and N are arguments, never shell text (31.10) ─────────


@pytest.mark.parametrize("folder", [KIT, LABS], ids=["kit", "03-labs"])
@pytest.mark.parametrize(
    ("n", "name"),
    [
        ("07", "$(touch x)"),
        ("07", "`touch x`"),
        ("07", 'a";touch x;"'),
        ("07", "a'; touch x; '"),
        ("$(touch x)", "ok"),
    ],
)
def test_new_lesson_runs_nothing_a_name_holds(tmp_path: Path, folder: Path, n: str, name: str) -> None:
    os.chdir(tmp_path)  # a relative `touch x` would land here, or in the folder make runs in
    before = sorted(p.name for p in (KIT / "lessons").iterdir())
    out = make(folder, tmp_path, "new-lesson", f"N={n}", f"NAME={name}")
    assert out.returncode != 0
    said = out.stdout + out.stderr
    assert "must be" in said and repr(name if n == "07" else n) in said  # the value, as typed
    assert "Traceback" not in said
    for where in (tmp_path, folder, KIT):
        assert not (where / "x").exists()
    assert sorted(p.name for p in (KIT / "lessons").iterdir()) == before
