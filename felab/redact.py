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
    the password in an address (http://user:PASSWORD@host/...), shown as user:<redacted>@

A server repeats what it was sent in more forms than one, so a key is also found:

    in any case                  FW_FAKE_..., fw_fake_... (a header upper-cased by a proxy)
    JSON-escaped, wholly or not  \u0066\u0077_fake... (a body encoded twice); also %66 (a URL)
    in base64                    of the key, of `Bearer KEY`, of a whole header line, of any text
                                 that holds it: standard or URL-safe alphabet, padded or not,
                                 wherever the key starts in it (three alignments); shown as
                                 <FIREWORKS_API_KEY in base64>, the whole encoded word replaced
    any base64 word that decodes to a Bearer credential, anyone's: <redacted, base64 of a Bearer credential>

Every search is linear in the text's length (no pattern that backtracks over a long run).
What is not covered: a key cut in pieces, reversed, hashed, or encoded in other ways (hex,
base32, gzip...); a key shorter than MIN_KEY_CHARS.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Callable
from functools import lru_cache
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
        text = text.replace(value, shown)
        plain, spelled, encoded = _forms(value.strip())
        text = (spelled if "\\" in text or "%" in text else plain).sub(shown, text)  # plain: 4x faster
        text = _cut_words(text, encoded, f"{shown[:-1]} in base64>")
    text = _cut_words(text, _BASE64_WORD, "<redacted, base64 of a Bearer credential>", _holds_bearer)
    return _url_passwords(_BEARER.sub(r"\1<redacted>", text))


_AUTHORITY_END = re.compile(r"[\s/?#'\"<>]")
"""What ends an address's authority (user:password@host:port): its path, query, or the text after it."""


def _url_passwords(text: str) -> str:
    """`text` with the password of every address that carries one (scheme://user:password@host)
    replaced by <redacted>: each `://` once, its authority cut at the last `@` (a scan, linear)."""
    out, done, at = [], 0, text.find("://")
    while at >= 0:
        start = at + 3
        end = m.start() if (m := _AUTHORITY_END.search(text, start)) else len(text)
        sep = text.rfind("@", start, end)  # (none: -1)
        user, _, password = text[start:sep].partition(":") if sep > start else ("", "", "")
        if password:
            out += [text[done:start], f"{user}:<redacted>"]
            done = sep
        at = text.find("://", end)
    return "".join(out) + text[done:] if out else text


_B64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")
_BASE64_WORD = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
"""A word that may be base64 (16 characters or more: `Bearer ` and 8 of a credential)."""


@lru_cache(maxsize=32)
def _forms(key: str) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """Three searches for `key`: as text in any case; the same, each character also \\u or
    %-escaped; the middle of its base64 (each alphabet, each of the three places it can start
    in a group of three bytes)."""
    one = []
    for c in key:
        codes = {ord(v) for v in (c, c.lower(), c.upper()) if len(v) == 1 and ord(v) <= 0xFFFF}
        escaped = [rf"\\+u{n:04x}" for n in sorted(codes)] + [rf"%{n:02x}" for n in sorted(codes) if n < 0x80]
        one.append("(?:" + "|".join([re.escape(c), *escaped]) + ")")
    cores = []
    raw = key.encode()
    for skip in range(3):  # the key starts 0, 1 or 2 bytes into a group of three
        whole = raw[skip:][: len(raw[skip:]) // 3 * 3]  # the groups made of the key's bytes only
        if len(whole) >= 6:
            core = base64.b64encode(whole).decode()
            cores += [core, core.replace("+", "-").replace("/", "_")]
    encoded = "|".join(re.escape(c) for c in dict.fromkeys(cores)) or r"(?!)"
    plain = re.compile(re.escape(key), re.IGNORECASE)
    return plain, re.compile("".join(one), re.IGNORECASE), re.compile(encoded)


def _cut_words(
    text: str, found: re.Pattern[str], shown: str, keep_if: Callable[[str], bool] | None = None
) -> str:
    """`text` with each base64 word that `found` matches in replaced by `shown`, whole: the
    characters around the match that are base64 too, and its padding. `keep_if(word)` False:
    the word is left as it is."""
    out, done = [], 0
    for match in found.finditer(text):
        if match.start() < done:
            continue  # inside a word already replaced
        start, end = match.start(), match.end()
        while start > done and text[start - 1] in _B64_CHARS:
            start -= 1
        while end < len(text) and text[end] in _B64_CHARS:
            end += 1
        pad = 0
        while end < len(text) and text[end] == "=" and pad < 2:
            end, pad = end + 1, pad + 1
        if keep_if is not None and not keep_if(text[start:end]):
            continue
        out += [text[done:start], shown]
        done = end
    return "".join(out) + text[done:] if out else text


def _holds_bearer(word: str) -> bool:
    """Whether a base64 word decodes to text holding `Bearer <credential>`."""
    bare = word.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        data = base64.b64decode(bare + "=" * (-len(bare) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return bool(_BEARER.search(data.decode("latin-1")))


def redact_all(data: Any) -> Any:
    """The same for every string inside a JSON-like value (a row to record): keys and values."""
    if isinstance(data, str):
        return redact(data)
    if isinstance(data, dict):
        return {redact_all(k): redact_all(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_all(v) for v in data]
    return data
