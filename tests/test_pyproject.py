"""What pyproject.toml promises a learner's machine: its requirements read with tomllib and
evaluated with `packaging` (the library pip uses for markers) for each platform."""

from __future__ import annotations

import sys

import pytest

from felab.paths import KIT_ROOT

if sys.version_info < (3, 11):
    pytest.skip("tomllib is in the standard library from Python 3.11", allow_module_level=True)

import tomllib
from packaging.requirements import Requirement

PROJECT = tomllib.loads((KIT_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

APPLE_SILICON = {"sys_platform": "darwin", "platform_machine": "arm64"}
INTEL_MAC = {"sys_platform": "darwin", "platform_machine": "x86_64"}
LINUX = {"sys_platform": "linux", "platform_machine": "x86_64"}


def core(name: str) -> Requirement:
    found = [r for r in map(Requirement, PROJECT["dependencies"]) if r.name == name]
    assert len(found) == 1, f"{name} is not among the core dependencies"
    return found[0]


def test_apple_silicon_gets_mlx_lm_with_the_kit_and_linux_does_not() -> None:
    # The MLX step of lesson 06 needs nothing more on Apple silicon; on Linux it stays `make engines`.
    mlx = core("mlx-lm")
    assert mlx.marker is not None
    assert mlx.marker.evaluate(APPLE_SILICON)
    assert not mlx.marker.evaluate(INTEL_MAC) and not mlx.marker.evaluate(LINUX)


def test_linux_gets_mlx_from_the_engines_extra() -> None:
    engines = [Requirement(r) for r in PROJECT["optional-dependencies"]["engines"]]
    names = {r.name for r in engines if r.marker is None or r.marker.evaluate(LINUX)}
    assert {"mlx", "mlx-lm"} <= names


def test_uvloop_only_where_it_builds() -> None:
    # uvicorn takes uvloop when it can import it (loop="auto"); Windows and PyPy run asyncio's loop.
    uvloop = core("uvloop")
    assert uvloop.marker is not None
    assert uvloop.marker.evaluate(LINUX) and uvloop.marker.evaluate(APPLE_SILICON)
    assert not uvloop.marker.evaluate({"sys_platform": "win32", "platform_machine": "AMD64"})
    assert not uvloop.marker.evaluate({**LINUX, "platform_python_implementation": "PyPy"})
