"""A URL's scheme, read in one place and without regard to case.

RFC 3986 (section 3.1) makes a scheme case-insensitive: `HTTP://host` is the
same address as `http://host`, and `http` clients send it in clear all the
same. A check that compares text, `url.startswith("http://")`, would let the
first past: a key sent unencrypted to another machine. So every check the
kit makes on a URL's scheme reads it with `scheme()`, and the addresses a run
uses are put in the form those checks compare (`lower_scheme()`) as they are
read: `connect.with_scheme()` for every target's address (flags, `.env`, the
table), `fireworks.billing.root_url()` for `make fw-check`.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
"""RFC 3986's scheme (a letter, then letters, digits, `+`, `-` or `.`), followed by `://`."""


def scheme(url: str) -> str:
    """`url`'s scheme in lower case (`http`, `https`), or "" when it has none (`127.0.0.1:8080`)."""
    found = _SCHEME.match(url)
    return found.group(1).lower() if found else ""


def lower_scheme(url: str) -> str:
    """`url` with its scheme in lower case (`HTTPS://Host/v1` -> `https://Host/v1`), the rest as
    it is (a path is case-sensitive); a URL without a scheme is returned unchanged."""
    found = scheme(url)
    return found + url[len(found) :] if found else url


def api_root(url: str) -> str:
    """The OpenAI-compatible address nearest `url`, where its routes are: cut after its `/v1` (an
    endpoint pasted whole: `…/v1/chat/completions`), or with `/v1` added; no query or fragment
    (`?api_key=…` is no part of an address the kit takes)."""
    parts = urlsplit(url)
    at = (parts.path + "/").find("/v1/")
    path = parts.path[: at + 3] if at >= 0 else parts.path.rstrip("/") + "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))
