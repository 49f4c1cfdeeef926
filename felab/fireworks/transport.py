"""The HTTP client under `make fw-check`: one origin, no redirects, one deadline, a size cap on every reply.

An all-clear is worth something only if it came from Fireworks, over what was
asked, in bounded time and memory. The `fireworks-ai` SDK's own httpx client
follows redirects (`follow_redirects=True` in `_DefaultHttpxClient`,
fireworks/_base_client.py), to any origin, and dropping the key on the way: a
302 to a server that answers empty lists read as "nothing is billing". And a
per-read timeout never ends a reply trickled one byte a second, nor does
anything stop a reply of hundreds of megabytes. So fw-check hands the SDK an
httpx client built here:

    redirects     not followed: a 3xx, wherever it points, stops the check
    origin        a request to any origin but FIREWORKS_BASE_URL's is refused before it is sent
    deadline      the whole check has DEADLINE_S; each request's timeouts are cut to the time
                  left, and a reply still arriving when it runs out is dropped
    size          a reply may be MAX_REPLY_BYTES at most (declared or counted as it arrives);
                  replies are asked for uncompressed, and a compressed one is refused, since
                  its size once unpacked is not known until it is unpacked

The pieces are the kit's guard for every reply (felab/guarded.py: the body's `Capped`, the
waits cut to the time left), with one deadline for the whole check instead of one a request.
Each stop raises `Stop`, whose `why` is the sentence fw-check prints. The SDK
wraps it (and retries once, which stops again at once): `stopped_by()` finds it
again in the exception's chain.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from felab.guarded import SLACK_S, Capped, compressed, cut_to, declared, first_in_chain

DEADLINE_S = 120.0
"""The whole check, every page of every list: a few seconds on a normal day."""
MAX_REPLY_BYTES = 8 * 1024 * 1024
"""One page of 200 deployments or jobs is well under 1 MB."""


class Stop(Exception):
    """The transport stopped the check; `why` says why, in a sentence for the learner."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def stopped_by(exc: BaseException | None) -> Stop | None:
    """The Stop behind an SDK error (its `__cause__` or `__context__` chain), if any."""
    return first_in_chain(exc, Stop)


def _origin(url: httpx.URL) -> str:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return f"{url.scheme}://{url.host}:{url.port or default}"


@dataclass
class Budget:
    """What the whole check may use: one origin, until one moment, so many bytes a reply."""

    root: str
    deadline_s: float
    max_bytes: int

    @classmethod
    def for_check(cls, root: str) -> Budget:
        """The limits of one fw-check, starting now."""
        return cls(root, DEADLINE_S, MAX_REPLY_BYTES)

    def __post_init__(self) -> None:
        self.origin = _origin(httpx.URL(self.root))
        self.ends_at = time.monotonic() + self.deadline_s
        self.stopped: Stop | None = None

    def stop(self, why: str) -> Stop:
        """The first reason is kept: the SDK's retry must stop for the same one."""
        self.stopped = self.stopped or Stop(why)
        return self.stopped

    def left_s(self, slack_s: float = 0.0) -> float:
        """Seconds left; a Stop once there are none (or no more than `slack_s`)."""
        left = self.ends_at - time.monotonic()
        if left <= slack_s:
            raise self.stop(
                f"the check did not finish within its limit of {self.deadline_s:.0f} s (a reply from "
                f"{self.origin} was still arriving, or it did not answer). Fireworks may be slow right "
                f"now: run again in a minute."
            )
        return left


class GuardedTransport(httpx.BaseTransport):
    """httpx's own transport, inside the budget's limits."""

    def __init__(self, budget: Budget, inner: httpx.BaseTransport | None = None) -> None:
        self.budget, self.inner = budget, inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        budget = self.budget
        if budget.stopped:
            raise budget.stopped
        if _origin(request.url) != budget.origin:
            raise budget.stop(
                f"a request to {_origin(request.url)} was refused: only {budget.origin} is read."
            )
        cut_to(request, budget.left_s())
        try:
            response = self.inner.handle_request(request)
        except httpx.TimeoutException:
            budget.left_s(SLACK_S)  # out of time: say so, not "it timed out"
            raise
        self._check(request, response)
        assert isinstance(response.stream, httpx.SyncByteStream)  # a sync transport's reply
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=Capped(response.stream, Reply(budget, request.url.path)),
            extensions=response.extensions,
        )

    def _check(self, request: httpx.Request, response: httpx.Response) -> None:
        """Refuse, before its body is read, a redirect, a compressed reply, or one declared too large."""
        why = ""
        if 300 <= response.status_code < 400:
            to = request.url.join(response.headers.get("location", ""))
            why = (
                f"{self.budget.origin} answered HTTP {response.status_code}, a redirect to "
                f"{_origin(to)}{to.path[:80]}. fw-check follows no redirect: an answer from anywhere "
                f"but FIREWORKS_BASE_URL itself is not Fireworks' word on what bills. Check "
                f"FIREWORKS_BASE_URL (unset, it is https://api.fireworks.ai)."
            )
        elif encoding := compressed(response):
            why = (
                f"the reply from {self.budget.origin} to GET {request.url.path} came compressed "
                f"({encoding}) although it was asked for plain text."
            )
        elif declared(response) > self.budget.max_bytes:
            why = too_large(self.budget, request.url.path)
        if why:
            response.close()
            raise self.budget.stop(why)

    def close(self) -> None:
        self.inner.close()


def too_large(budget: Budget, path: str) -> str:
    return (
        f"the reply from {budget.origin} to GET {path} was larger than "
        f"{budget.max_bytes // (1024 * 1024)} MB, far more "
        f"than any page of deployments or jobs; fw-check stops rather than read it. Check "
        f"FIREWORKS_BASE_URL (unset, it is https://api.fireworks.ai)."
    )


class Reply:
    """One reply's body as it arrives (the `Watch` of felab/guarded.py's `Capped`): its bytes
    against the cap, and the check's deadline."""

    def __init__(self, budget: Budget, path: str) -> None:
        self.budget, self.path, self.got = budget, path, 0

    def arrived(self, chunk: bytes) -> None:
        self.got += len(chunk)
        if self.got > self.budget.max_bytes:
            raise self.budget.stop(too_large(self.budget, self.path))
        self.budget.left_s()

    def left_s(self, slack_s: float = 0.0) -> float:
        return self.budget.left_s(slack_s)


def guarded_client(budget: Budget, timeout_s: float) -> httpx.Client:
    """The httpx client for the SDK: the guarded transport, no redirects, replies uncompressed."""
    return httpx.Client(
        transport=GuardedTransport(budget),
        follow_redirects=False,
        timeout=timeout_s,
        headers={"Accept-Encoding": "identity"},
    )
