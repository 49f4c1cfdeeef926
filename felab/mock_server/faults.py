"""Failure injection: the errors real servers send, on purpose (`--fail-rate`, `--fail-types`).

Off by default. With `--fail-rate 0.1`, one valid chat or completion request in ten (drawn
with a generator seeded by `--seed`, so a run can be repeated) fails as one of:

    429  rate limited: OpenAI's `rate_limit_exceeded`, with `retry-after: 1`
    503  overloaded: the server is up but cannot take the request now (`retry-after: 1`)
    500  a server error
    cut  a streamed reply stops half way: no finish_reason, no [DONE], the
         connection closes (a non-streamed request drawn for `cut` is served
         whole: there is no stream to cut)

Bad requests get their 4xx before any draw, so a fault never hides a mistake.
`felab:injected_faults_total` on /metrics counts what was injected.
"""

from __future__ import annotations

import logging
import random

FAULT_TYPES = ("429", "503", "500", "cut")

INJECTED = "(injected by --fail-rate)"
ERRORS = {
    "429": (429, f"Rate limit reached for requests {INJECTED}.", "requests", "rate_limit_exceeded"),
    "503": (503, f"The server is overloaded, please try again later {INJECTED}.", "server_error", None),
    "500": (500, f"The server had an error while processing your request {INJECTED}.", "server_error", None),
}
"""fault -> (HTTP status, message, error type, error code) in OpenAI's envelope."""

RETRY_AFTER_S = 1


class StreamCut(Exception):
    """Raised inside a streamed reply to drop the connection on purpose."""


class Faults:
    """Draws, per request, whether it fails and how."""

    def __init__(self, rate: float = 0.0, types: tuple[str, ...] = FAULT_TYPES, seed: int = 0) -> None:
        unknown = set(types) - set(FAULT_TYPES)
        if not 0.0 <= rate <= 1.0 or unknown or not types:
            raise ValueError(f"fail rate must be 0..1 and types some of {FAULT_TYPES}; got {rate}, {types}")
        self.rate, self.types = rate, tuple(types)
        self.rng = random.Random(f"faults/{seed}")
        self.injected = {kind: 0 for kind in self.types} if rate else {}

    def draw(self) -> str | None:
        """The fault this request gets, or None (always None at rate 0: nothing is drawn)."""
        if not self.rate or self.rng.random() >= self.rate:
            return None
        kind = self.rng.choice(self.types)
        self.injected[kind] += 1
        return kind


class HideStreamCuts(logging.Filter):
    """Keep a deliberate cut out of the server's log: it is a feature, not a crash."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None and not isinstance(exc, StreamCut):
            exc = exc.__cause__ or exc.__context__ or next(iter(getattr(exc, "exceptions", ())), None)
        return exc is None
