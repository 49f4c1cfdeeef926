"""The layout keeps its promises: the practice server reads in short functions."""

from __future__ import annotations

import ast

from felab.paths import KIT_ROOT

SERVER = KIT_ROOT / "felab" / "mock_server"
LONGEST = 40


def test_no_function_in_the_practice_server_is_over_40_lines() -> None:
    too_long = []
    for path in sorted(SERVER.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONGEST:
                    too_long.append(f"{path.name}:{node.lineno} {node.name}() is {lines} lines")
    assert not too_long, "split these (the HTTP layer only translates):\n" + "\n".join(too_long)
