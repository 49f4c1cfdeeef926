"""What pyproject.toml promises a learner's machine: its requirements read with tomllib and
evaluated with `packaging` (the library pip uses for markers) for each platform."""

from __future__ import annotations

import ast
import importlib.metadata
import inspect
import sys

import pytest

from felab.paths import KIT_ROOT

if sys.version_info < (3, 11):
    pytest.skip("tomllib is in the standard library from Python 3.11", allow_module_level=True)

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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


# ── Every import declared; a bound where the kit leans on a library's internals ──


def declared_names() -> set[str]:
    """Every distribution the core or an extra asks for (normalized names)."""
    extras = [r for rs in PROJECT["optional-dependencies"].values() for r in rs]
    return {canonicalize_name(Requirement(r).name) for r in [*PROJECT["dependencies"], *extras]}


NOT_INSTALLED_HERE = {"mlx": "mlx", "mlx_lm": "mlx-lm", "tomli": "tomli"}
"""Modules of distributions this Python may lack (the engines extra, Python 3.10's tomli)."""


def imported_modules() -> dict[str, str]:
    """Top-level module -> a file importing it, over every absolute import in felab/ (lazy ones too)."""
    found: dict[str, str] = {}
    for path in sorted((KIT_ROOT / "felab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(KIT_ROOT)))
    return found


def test_every_import_in_felab_is_declared_in_pyproject() -> None:
    owners = importlib.metadata.packages_distributions()
    declared = declared_names()
    missing = []
    for module, where in imported_modules().items():
        if module in sys.stdlib_module_names or module in ("felab", "__future__"):
            continue
        dists = owners.get(module) or [NOT_INSTALLED_HERE.get(module, module)]
        if not any(canonicalize_name(d) in declared for d in dists):
            missing.append(f"{module} (imported in {where}; distribution {', '.join(dists)})")
    assert missing == [], "declare these in pyproject.toml (core or the extra that uses them)"


def test_the_imports_found_include_the_lazy_ones() -> None:
    # the check above reads imports inside functions too (MkDocs, matplotlib, the engines' packages)
    assert {"yaml", "httpx", "uvicorn", "mkdocs", "matplotlib", "numpy"} <= set(imported_modules())


def test_uvicorn_is_bounded_where_the_kit_subclasses_its_protocol() -> None:
    uvicorn = core("uvicorn")
    assert any(spec.operator == "<" for spec in uvicorn.specifier), "connections.py needs an upper bound"
    assert uvicorn.specifier.contains(importlib.metadata.version("uvicorn"))


def test_uvicorns_internal_protocol_still_has_what_connections_py_overrides_and_reads() -> None:
    # felab/mock_server/connections.py subclasses HttpToolsProtocol (practice server, bundle-serve):
    # the methods it overrides, with the same parameters, and the attributes it reads. A uvicorn
    # that moves any of them fails here, not silently in a learner's server.
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from felab.mock_server.connections import TimelyHttp

    names = (
        "connection_made",
        "on_message_begin",
        "on_headers_complete",
        "connection_lost",
        "send_400_response",
    )
    for name in names:
        theirs = getattr(HttpToolsProtocol, name)
        assert name in TimelyHttp.__dict__, name
        assert list(inspect.signature(theirs).parameters) == list(
            inspect.signature(TimelyHttp.__dict__[name]).parameters
        ), name
    assert list(inspect.signature(HttpToolsProtocol.timeout_keep_alive_handler).parameters) == ["self"]
    built = inspect.getsource(HttpToolsProtocol.__init__)
    for attribute in (
        "self.loop",
        "self.timeout_keep_alive ",
        "self.timeout_keep_alive_task",
        "self.server_state",
    ):
        assert attribute in built, attribute
    # HeadWithBody stands in for the transport the request cycles write to, set in connection_made;
    # arrivals are noted in the scope's state, made in on_message_begin.
    assert "self.transport = transport" in inspect.getsource(HttpToolsProtocol.connection_made)
    assert '"state":' in inspect.getsource(HttpToolsProtocol.on_message_begin)


def test_starlette_static_files_still_has_the_lookup_bundle_serve_overrides() -> None:
    from starlette.staticfiles import StaticFiles

    from felab.course.serve import SiteFiles

    theirs, ours = StaticFiles.lookup_path, SiteFiles.lookup_path
    assert list(inspect.signature(theirs).parameters) == list(inspect.signature(ours).parameters)
    assert any(spec.operator == "<" for spec in core("starlette").specifier)
