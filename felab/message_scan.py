"""Every message the kit can print to a learner, read from its source with `ast` (nothing is run).

A message is the first argument of a `FelabError` (or any class under it, found by reading the
class statements), of click's exceptions the command line prints, of `errors.fail` and the like
(`EDGE`); it is known by its first fixed words (`fixed_text`), which the troubleshooting page
must hold. tests/test_troubleshooting.py checks the page against this scan, and
felab/docs_gen.py writes the page's index (which section holds the messages of which file) from it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from felab.paths import KIT_ROOT

PACKAGE = KIT_ROOT / "felab"

EDGE = {"ClickException", "BadParameter", "UsageError", "ProfileError", "TokenizerError", "fail", "stop"}
"""Besides every `FelabError` subclass (`felab_errors()`, found in the code), what takes a
learner-facing message as its first argument: click's exceptions the command line prints,
errors.fail (prints one), the Fireworks budget's stop (a Stop's message), ProfileError (a
timing profile the practice server refuses) and TokenizerError (a --tokenizer it cannot read)."""


WORDS = 4


def fixed_text(node: ast.expr) -> str:
    """A message's first fixed words: the first 4 words of its first piece of 12 characters or
    more that does not depend on the run (`{braces}` on the page stand for the rest)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        pieces = [node.value]
    elif isinstance(node, ast.JoinedStr):
        pieces = [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    else:
        return ""
    first = next((p for p in pieces if len(p.strip()) >= 12), "")
    return " ".join(first.split()[:WORDS])


def messages_of(node: ast.expr, helpers: dict[str, ast.FunctionDef]) -> list[str]:
    """The fixed text of a message argument: a string, or a call to a function of the same module
    that writes the message (`port_in_use(host, port)`): the fixed text of each string it returns."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers:
        returned = [r.value for r in ast.walk(helpers[node.func.id]) if isinstance(r, ast.Return) and r.value]
        return [text for value in returned if (text := fixed_text(value))]
    text = fixed_text(node)
    return [text] if text else []


def felab_errors(root: Path = PACKAGE) -> set[str]:
    """`FelabError` and every class under it anywhere in felab/ (`CouldNotCheck`, `NotRecorded`, ...),
    found by reading the class statements, so a new subclass's messages are scanned without a list."""
    bases: dict[str, set[str]] = {}
    for path in (root).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
    found = {"FelabError"}
    while grown := {name for name, of in bases.items() if of & found and name not in found}:
        found |= grown
    return found


def raised_messages(root: Path = PACKAGE) -> list[tuple[str, str]]:
    """Every message the kit's Python can print, as (file:line, its first fixed words)."""
    found = []
    raised_by = felab_errors(root) | EDGE
    felab = root
    for path in sorted(felab.rglob("*.py")):  # every package, tiny_model/ too
        tree = ast.parse(path.read_text(encoding="utf-8"))
        helpers = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args:
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in raised_by:
                    for text in messages_of(node.args[0], helpers):
                        found.append((f"{path.relative_to(root.parent)}:{node.lineno}", text))
    return found
