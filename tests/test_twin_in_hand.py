"""Issue 29, the twin in a learner's hands: `python -m felab` without the kit's environment,
03-labs/ seeing what the page names, a twin's advice and its numbers.

Each test types what the learner types (a fresh Python, a folder, a make target) and, where a
message gives advice, follows it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KIT

LABS = KIT / "03-labs"


def backticked(text: str) -> list[str]:
    """The commands a message shows, in `backticks`, with its line breaks undone."""
    return re.findall(r"`([^`]+)`", " ".join(text.split()))


# ── `python -m felab` in a Python without the kit (issue 29, point 8) ─────────


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python with no packages at all: a new terminal's `python3`, the kit's environment not active."""
    venv = tmp_path_factory.mktemp("no-kit") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return str(venv / "bin" / "python")


def subcommands() -> list[str]:
    from felab.cli import cli

    return sorted(cli.commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("folder", [KIT, LABS], ids=["kit root", "03-labs"])
def test_python_m_felab_without_the_kit_says_which_python_for_every_subcommand(
    folder: Path, bare_python: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    python = os.path.relpath(KIT / ".venv" / "bin" / "python", folder)
    for sub in subcommands():
        out = subprocess.run(
            [bare_python, "-m", "felab", sub, "--help"], cwd=folder, env=env, capture_output=True, text=True
        )
        assert out.returncode == 2 and "Traceback" not in out.stderr, (sub, out.stderr)
        said = " ".join(out.stderr.split())
        assert said.startswith(f"error: this Python ({bare_python}) has no click"), said
        commands = backticked(said)
        assert f"{python} -m felab {sub} --help" in commands, commands  # the kit's Python, for this folder
        activate = f"source {os.path.relpath(KIT / '.venv' / 'bin' / 'activate', folder)}"
        assert "make setup" in commands or activate in commands


# ── 03-labs/ sees what the page names (point 5) ───────────────────────────────


@pytest.mark.parametrize("name", ["results", "data", "lessons", ".venv", ".env", "felab"])
def test_the_lab_book_folder_reaches_the_kits_folders_by_their_names(name: str) -> None:
    link = LABS / name
    assert link.is_symlink() and Path(os.readlink(link)) == Path("..") / name
    assert link.resolve() == (KIT / name).resolve()


def test_a_shipped_profile_typed_in_the_lab_book_folder_is_found() -> None:
    """`make mock PROFILE=data/profiles/lesson-mac.toml` in 03-labs/ reads 03-labs/data/...: there."""
    from felab.mock_server.profile import read_settings

    assert read_settings(LABS / "data" / "profiles" / "lesson-mac.toml")["seats"] == 4
