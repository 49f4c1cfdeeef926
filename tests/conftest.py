"""Shared fixtures: isolated state for every test, and a real practice server.

Every test runs with its own results folder and without the developer's
FELAB_* / FIREWORKS_* variables or .env, so nothing on this machine leaks in.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from felab import paths
from felab.mock_server.launch import practice_server

KIT = paths.KIT_ROOT
LESSON06 = KIT / "lessons" / "06-prefix-caching"
PREFIX_BENCH = LESSON06 / "prefix_bench.py"


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A private results dir, no inherited kit variables, and no .env."""
    for name in list(os.environ):
        if name.startswith(("FELAB_", "FIREWORKS_")):
            monkeypatch.delenv(name)
    monkeypatch.setattr(paths, "ENV_FILE", tmp_path / "no.env")
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
