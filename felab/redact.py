"""Keys never leave the kit: `redact()` takes them out of any text before it is printed or recorded.

The kit shows a server's own words when a call fails, because they help. But a
server (or a proxy in front of it) may repeat the request's `Authorization`
header in its error message, and a traceback or a recorded row may carry what
it said. So every text a learner sees or keeps passes through `redact()`, whatever
the server sent:

    FelabError messages        (errors.py: made and printed)
    FELAB_DEBUG tracebacks     (errors.debug_exit, used by run() and the felab CLI)
    recorded rows              (results.record)
    make fw-check's report     (fireworks/billing.py)

What counts as a key:

    the value of every environment variable named *_API_KEY (FIREWORKS_API_KEY, ...),
        shown as <FIREWORKS_API_KEY>
    the word after "Bearer " (a credential in an Authorization header, anyone's: 8 characters
        or more, with a digit or one of _+/=-), shown as Bearer <redacted>; `Bearer $FIREWORKS_API_KEY`
        in a command is left as is
"""

from __future__ import annotations

import os
import re
from typing import Any

MIN_KEY_CHARS = 8
"""Shorter values are not keys (`not-needed`, the local servers' stand-in, has 10: it is not
in a *_API_KEY variable); replacing a short value would garble ordinary words."""

_BEARER = re.compile(r"(?i)\b(bearer\s+)(?![$<])(?=[^\s'\",;\\]*[0-9_+/=-])[^\s'\",;\\]{8,}")
"""`Bearer` and a credential: 8 characters or more, with a digit or one of `_+/=-` (so "Bearer
token" and "Bearer authentication." stay words), and not `$VARIABLE` or an already redacted `<NAME>`."""


def known_keys() -> dict[str, str]:
    """Key value -> the name shown instead, for every *_API_KEY variable set now."""
    return {
        value: f"<{name}>"
        for name, value in os.environ.items()
        if name.endswith("_API_KEY") and len(value.strip()) >= MIN_KEY_CHARS
    }


def redact(text: str) -> str:
    """`text` with every key it holds replaced by its variable's name, and every bearer credential."""
    for value, shown in sorted(known_keys().items(), key=lambda kv: -len(kv[0])):
        text = text.replace(value, shown).replace(value.strip(), shown)
    return _BEARER.sub(r"\1<redacted>", text)


def redact_all(data: Any) -> Any:
    """The same for every string inside a JSON-like value (a row to record): keys and values."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {redact_all(k): redact_all(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_all(v) for v in data]
    return data
