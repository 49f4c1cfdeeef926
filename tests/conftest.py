"""Shared fixtures: isolated state for every test, and a real practice server.

The suite needs nothing of the machine it runs on, even a learner's in the middle of the
course: every test runs with its own results folder and without the FELAB_* / FIREWORKS_*
variables the learner exported or wrote in .env, for the whole session (so a session's
practice server and every subprocess a test starts inherit none of them, whatever their
`env=`); no test needs port 8765 free or taken (a learner's `make mock` may hold it), or
a .venv in the checkout. A practice server a test starts is stopped however the test
ends (felab/mock_server/launch.py: its own process group, and atexit as a last resort).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_fireworks import FakeFireworks, fireworks_env

from felab import paths
from felab.mock_server.launch import practice_server

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the dev extra's tomli (as felab/mock_server/profile.py)
    import tomli as tomllib

KIT = paths.KIT_ROOT
LESSON06 = KIT / "lessons" / "06-prefix-caching"
PREFIX_BENCH = LESSON06 / "prefix_bench.py"


LEARNERS = ("FELAB_", "FIREWORKS_")
"""Prefixes of the variables a learner exports; none reaches a test."""


def without_learners_variables(mp: pytest.MonkeyPatch, env_file: Path) -> None:
    """Remove the learner's variables from os.environ (subprocesses inherit it) and their .env."""
    for name in list(os.environ):
        if name.startswith(LEARNERS):
            mp.delenv(name)
    mp.setattr(paths, "ENV_FILE", env_file)  # this process
    mp.setenv("FELAB_ENV_FILE", str(env_file))  # the scripts and make targets a test runs


@pytest.fixture(scope="session", autouse=True)
def no_learner_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """For the whole session, before any session or module fixture starts a server or a build."""
    with pytest.MonkeyPatch.context() as mp:
        without_learners_variables(mp, tmp_path_factory.mktemp("env") / "no.env")
        mp.setenv("FELAB_RESULTS_DIR", str(tmp_path_factory.mktemp("session-results")))
        yield


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A private results dir for this test, no inherited kit variables, and no .env."""
    without_learners_variables(monkeypatch, tmp_path / "no.env")
    results = tmp_path / "results"
    monkeypatch.setenv("FELAB_RESULTS_DIR", str(results))
    return results


@pytest.fixture(scope="session")
def mock_url() -> Iterator[str]:
    """One practice server for the session (tests that need a cold cache reset it)."""
    with practice_server() as url:
        yield url


@pytest.fixture
def fresh_mock() -> Iterator[str]:
    """A practice server of this test's own: its cache starts empty."""
    with practice_server() as url:
        yield url


def run_script(script: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a lesson script as a learner does, from its folder, with this test's environment."""
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def run_felab(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `python -m felab ...` as `make` does."""
    return subprocess.run(
        [sys.executable, "-m", "felab", *args],
        cwd=KIT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def run_felab_peak(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    """`run_felab`, and the run's peak memory in MB (its own ru_maxrss, printed on stderr as it ends)."""
    code = (
        f"import resource, runpy, sys; sys.argv = ['felab', *{list(args)!r}]\n"
        "try:\n    runpy.run_module('felab', run_name='__main__')\n"
        "finally:\n"
        "    print('peak_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=KIT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    return out, int(out.stderr.rsplit("peak_kb ", 1)[1].split()[0]) / 1024


def installed_stand_in() -> Path:
    """A stand-in for the kit's .venv, outside the checkout: only the stamps that say the kit and
    each of its extras are installed (newer than pyproject.toml), in this test's own folder."""
    venv = Path(os.environ["FELAB_RESULTS_DIR"]).parent / "venv-stamps"
    venv.mkdir(parents=True, exist_ok=True)
    pyproject = tomllib.loads((KIT / "pyproject.toml").read_text(encoding="utf-8"))
    names = pyproject["project"]["optional-dependencies"]
    for stamp in (".installed", *(f".installed-{name}" for name in names)):
        (venv / stamp).touch()
    return venv


def make_command(folder: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    """`make ARGS` as typed in `folder` (PWD set, not inside another make), and its environment.

    With this test's Python (`PY=`), and a stand-in .venv outside the checkout whose stamps say
    the kit and every extra are installed (`VENV=`, `STAMP=`): a target runs the kit's code as it
    is, and never builds or installs into a .venv in the checkout. Every test that runs make
    runs it through here (tests/test_hermetic.py checks that).
    """
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["PWD"] = str(folder)
    venv = installed_stand_in()
    argv = ["make", *args, f"PY={sys.executable}", f"VENV={venv}", f"STAMP={venv}/.installed"]
    return argv, env


def run_make(folder: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `make ARGS` in `folder` to its end (see `make_command`)."""
    argv, env = make_command(folder, *args)
    return subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeFireworks]:
    """A fake Fireworks (tests/fake_fireworks.py) on loopback, this test's environment pointed at it."""
    with fireworks_env(monkeypatch) as running:
        yield running
