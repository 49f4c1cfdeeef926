"""felab's modules import one another without a circle, counting every import: at the top, inside a
function and under `if TYPE_CHECKING:` (a circle hidden in a function still makes two modules one).

The graph is read from the source with `ast`, one edge per import of a felab module (`from a import b`
is an edge to `a.b` when that is a module, else to `a`), and sorted with the standard library's
`graphlib`, which names a circle when it meets one.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

from felab.paths import KIT_ROOT

PACKAGE = KIT_ROOT / "felab"


def module_name(path: Path, top: Path) -> str:
    """felab/replay/trace.py -> felab.replay.trace; felab/replay/__init__.py -> felab.replay."""
    parts = path.relative_to(top).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Each felab module and the felab modules it imports, wherever in the file it imports them."""
    files = {module_name(p, root.parent): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in files}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    edges.add(child if child in files else node.module)
        graph[name] = {e for e in edges if e in files and e != name}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One circle in the graph (its modules, the first repeated at the end), or [] when there is none."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def test_felab_has_no_import_circle() -> None:
    graph = import_graph()
    assert len(graph) > 80 and "felab.targets" in graph["felab.connect"]  # the scan sees the imports
    found = circle(graph)
    assert not found, "an import circle: " + " -> ".join(found)


def test_the_circles_this_check_ended_would_be_seen() -> None:
    # The two circles there were: targets.py <-> engine_families (under TYPE_CHECKING) and
    # errors.py -> results.py (inside a function) while results.py imports errors.py.
    graph = import_graph()
    typing_only = {**graph, "felab.engine_families.family": {"felab.targets"}}
    assert "felab.targets" in circle(typing_only)
    local = {**graph, "felab.errors": graph["felab.errors"] | {"felab.results"}}
    assert set(circle(local)) == {"felab.errors", "felab.results"}


def test_an_import_inside_a_function_or_under_type_checking_is_an_edge(tmp_path: Path) -> None:
    package = tmp_path / "felab"
    package.mkdir()
    (package / "__init__.py").write_text("")
    typing_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from felab.b import X\n"
    (package / "a.py").write_text(typing_only)
    (package / "b.py").write_text("def f():\n    import felab.a\n")
    graph = import_graph(package)
    assert graph["felab.a"] == {"felab.b"} and graph["felab.b"] == {"felab.a"}
