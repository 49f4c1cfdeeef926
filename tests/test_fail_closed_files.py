"""Profiles, files and processes fail closed (issues 29 and 31): what a learner types or a file
holds is checked before it is used, and what the kit starts it also stops."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import KIT
from fake_fireworks import KEY, FakeFireworks, deployment, fireworks_env

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


# ── fw-check: a page it cannot read for sure, an output it cannot write (31.12) ──

DEPLOYMENTS = "/v1/accounts/learner/deployments"
COULD_NOT = "could not check what is billing on Fireworks"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeFireworks]:
    with fireworks_env(monkeypatch) as running:
        yield running


def fw_check(shell_redirect: str = "") -> subprocess.CompletedProcess[str]:
    """`python -m felab fw-check` as a shell runs it, with `shell_redirect` (`>&-`) after it."""
    cmd = f"exec {shlex.quote(sys.executable)} -m felab fw-check {shell_redirect}"
    out = subprocess.run(["sh", "-c", cmd], cwd=KIT, capture_output=True, text=True, timeout=60)
    assert KEY not in out.stdout + out.stderr and "Traceback" not in out.stderr
    return out


@pytest.mark.parametrize(
    "body",
    [
        # Python's json keeps the last value (0 replicas: all clear); another parser, the first
        b'{"deployments": [{"name": "accounts/learner/deployments/d",'
        b' "replicaCount": 1, "replicaCount": 0}]}',
        b'{"deployments": [], "deployments": []}',
        b'{"deployments": [], "nextPageToken": "p2", "nextPageToken": ""}',
    ],
)
def test_a_page_with_a_key_named_twice_is_could_not_check(fake: FakeFireworks, body: bytes) -> None:
    fake.override[DEPLOYMENTS] = (200, body)
    out = fw_check()
    assert out.returncode == 2, out.stdout + out.stderr
    said = " ".join(out.stderr.split())
    assert COULD_NOT in said and "twice in one object" in said and "Nothing is billing" not in out.stdout


@pytest.mark.parametrize("billing", [False, True])
def test_a_closed_output_exits_2_with_its_message_on_stderr(fake: FakeFireworks, billing: bool) -> None:
    if billing:
        fake.deployments["learner"] = [deployment("bills")]
    out = fw_check(">&-")
    assert out.returncode == 2, out.stderr
    said = " ".join(out.stderr.split())
    assert COULD_NOT in said and "its output was closed (`>&-`)" in said
    assert "AttributeError" not in said
