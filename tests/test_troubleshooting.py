"""The troubleshooting page lists every error message the kit raises (docs that cannot drift)."""

from __future__ import annotations

import ast

from felab.paths import KIT_ROOT

RAISED_BY = {"FelabError", "ClickException", "BadParameter", "ProfileError"}
PAGE = KIT_ROOT / "docs" / "troubleshooting.md"


WORDS = 4


def fixed_text(node: ast.expr) -> str:
    """A message's first fixed words: the first 4 words of its first piece of 12 characters or
    more that does not depend on the run (`{braces}` on the page stand for the rest)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        pieces = [node.value]
    elif isinstance(node, ast.JoinedStr):
        pieces = [v.value for v in node.values if isinstance(v, ast.Constant)]
    else:
        return ""
    first = next((p for p in pieces if len(p.strip()) >= 12), "")
    return " ".join(first.split()[:WORDS])


def raised_messages() -> list[tuple[str, str]]:
    found = []
    felab = KIT_ROOT / "felab"
    scanned = [*felab.glob("*.py"), *(felab / "replay").glob("*.py"), *(felab / "calibrate").glob("*.py")]
    for path in sorted([*scanned, felab / "mock_server" / "profile.py"]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args:
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in RAISED_BY and (text := fixed_text(node.args[0])):
                    found.append((f"{path.name}:{node.lineno}", text))
    return found


def test_every_raised_message_is_on_the_troubleshooting_page() -> None:
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    messages = raised_messages()
    assert len(messages) > 15  # the scan sees the kit's messages at all
    missing = [f"{where}: {text!r}" for where, text in messages if " ".join(text.split()) not in page]
    assert not missing, "add these to docs/troubleshooting.md:\n" + "\n".join(missing)


def test_the_scan_would_notice_a_new_message() -> None:
    call = ast.parse('raise FelabError(f"The flux capacitor of {name} is not charged.")').body[0].exc
    assert fixed_text(call.args[0]) == "The flux capacitor of"
    assert fixed_text(call.args[0]) not in PAGE.read_text()
