"""The troubleshooting page lists every error message the kit raises (docs that cannot drift)."""

from __future__ import annotations

import ast
import re

from felab.paths import KIT_ROOT

RAISED_BY = {"FelabError", "ClickException", "BadParameter", "ProfileError", "TokenizerError", "fail", "stop"}
"""What takes a learner-facing message as its first argument: the exceptions the command line turns
into a paragraph, errors.fail (prints one), the Fireworks budget's stop (a Stop's message), and
ProfileError (a timing profile the practice server refuses), TokenizerError (a --tokenizer it cannot read)."""
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


def messages_of(node: ast.expr, helpers: dict[str, ast.FunctionDef]) -> list[str]:
    """The fixed text of a message argument: a string, or a call to a function of the same module
    that writes the message (`port_in_use(host, port)`): the fixed text of each string it returns."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers:
        returned = [r.value for r in ast.walk(helpers[node.func.id]) if isinstance(r, ast.Return) and r.value]
        return [text for value in returned if (text := fixed_text(value))]
    text = fixed_text(node)
    return [text] if text else []


def raised_messages() -> list[tuple[str, str]]:
    found = []
    felab = KIT_ROOT / "felab"
    for path in sorted(felab.rglob("*.py")):  # every package: mock_server/, course/, fireworks/, engines/ too
        tree = ast.parse(path.read_text(encoding="utf-8"))
        helpers = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args:
                name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
                if name in RAISED_BY:
                    for text in messages_of(node.args[0], helpers):
                        found.append((f"{path.relative_to(KIT_ROOT)}:{node.lineno}", text))
    return found


def test_every_raised_message_is_on_the_troubleshooting_page() -> None:
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    messages = raised_messages()
    assert len(messages) > 40  # the scan sees the kit's messages at all
    packages = {where.split("/")[1] for where, _ in messages}
    assert {"mock_server", "course", "fireworks", "engines", "replay"} <= packages, packages
    missing = [f"{where}: {text!r}" for where, text in messages if " ".join(text.split()) not in page]
    assert not missing, "add these to docs/troubleshooting.md:\n" + "\n".join(missing)


def test_the_scan_would_notice_a_new_message() -> None:
    call = ast.parse('raise FelabError(f"The flux capacitor of {name} is not charged.")').body[0].exc
    assert fixed_text(call.args[0]) == "The flux capacitor of"
    assert fixed_text(call.args[0]) not in PAGE.read_text()


SHELL_FAIL = re.compile(r'\bfail [0-9] "([^"]*)"')
SHELL_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+|\$[@*#?]")


def shell_messages() -> list[tuple[str, str]]:
    """The messages the kit's shell scripts stop with (`fail CODE "message"`, _serve_common.sh):
    the first 4 words of the first piece of 12 characters or more between variables."""
    found = []
    for path in sorted([*KIT_ROOT.glob("lessons/*/*.sh"), *KIT_ROOT.glob("scripts/*.sh")]):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for message in SHELL_FAIL.findall(line):
                first = next((p for p in SHELL_VARIABLE.split(message) if len(p.strip()) >= 12), "")
                words = [w for w in first.split() if any(c.isalnum() for c in w)]  # not a lone quote
                if words:
                    found.append((f"{path.relative_to(KIT_ROOT)}:{number}", " ".join(words[:WORDS])))
    return found


def test_every_shell_scripts_message_is_on_the_troubleshooting_page() -> None:
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    messages = shell_messages()
    assert len(messages) >= 6  # the scan sees the scripts' messages at all
    missing = [f"{where}: {text!r}" for where, text in messages if text not in page]
    assert not missing, "add these to docs/troubleshooting.md:\n" + "\n".join(missing)
