"""The troubleshooting page lists every error message the kit raises (docs that cannot drift)."""

from __future__ import annotations

import ast
import re

from felab.message_scan import WORDS, felab_errors, fixed_text, raised_messages
from felab.paths import KIT_ROOT

PAGE = KIT_ROOT / "docs" / "troubleshooting.md"


def test_every_raised_message_is_on_the_troubleshooting_page() -> None:
    page = " ".join(PAGE.read_text(encoding="utf-8").split())
    messages = raised_messages()
    assert len(messages) > 40  # the scan sees the kit's messages at all
    packages = {where.split("/")[1] for where, _ in messages}
    assert {"mock_server", "course", "fireworks", "tiny_model", "replay"} <= packages, packages
    missing = [f"{where}: {text!r}" for where, text in messages if " ".join(text.split()) not in page]
    assert not missing, "add these to docs/troubleshooting.md:\n" + "\n".join(missing)


def test_every_felab_error_subclass_is_scanned() -> None:
    assert {"FelabError", "CouldNotCheck", "NotRecorded"} <= felab_errors()
    where = {text for _, text in raised_messages()}
    assert any("could not" in t.lower() for t in where)  # CouldNotCheck's messages are among them


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
