"""Every reply the kit reads, read with limits: a size cap, a deadline, and for a stream an idle gap.

A server can send anything: an endless body for `GET /props`, a stream that never ends, a
token trickled one byte a second. httpx's timeouts are per read (a byte a second resets
them forever) and nothing caps a reply's size, so a broken server could hold a lesson
script for ever, or fill the machine's memory. Every HTTP client the kit builds reads
through `GuardedTransport` (the `openai` client from `connect.client()`, and `get_json()`
for the engines' own routes):

    size      a reply read whole (a list of models, /props, an error): REPLY_BYTES at most,
              declared (Content-Length) or counted as it arrives; a streamed reply
              (text/event-stream): STREAM_BYTES in all
    deadline  each request, from the moment it is sent to the last byte of its reply: the
              client's timeout (FELAB_READ_DEADLINE_S in its place); every wait of httpx's
              is cut to the time left (a server that sends no answer at all in that time
              meets httpx's own timeout, as before)
    idle      a streamed reply: IDLE_S at most from its headers, or from one event (an SSE
              event ends at a blank line) to the next, while bytes still trickle in
              (FELAB_READ_IDLE_S); a server that sends nothing at all meets the deadline
    encoding  replies are asked for uncompressed, and a compressed one is refused: what it
              unpacks to is not known until it is unpacked

The limits never change what is timed: `stream_once()` starts its clock before the request
and stops it at the first chunk with text, as without them; nothing is retried. A stop raises
`ReplyStopped`, a FelabError whose message names the server, says what it did and what to
do. It passes the `openai` client unwrapped, or wrapped in its connection error, where
`stopped_by()` finds it again.

The same idea guards fw-check (felab/fireworks/transport.py), with one deadline for the
whole check and one origin.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx

from felab.errors import FelabError
from felab.paths import from_here, load_env

MIB = 1024 * 1024
REPLY_BYTES = 8 * MIB
"""A reply read whole. llama.cpp's /props is a few kB, a list of models well under 1 MiB."""
STREAM_BYTES = 32 * MIB
"""A streamed reply in all: a chunk is a few hundred bytes, so this is over 50,000 tokens."""
IDLE_S = 60.0
"""A stream's longest gap between events. A slow CPU engine sends a token a second or faster;
the first token may take longer (a long prompt's prefill), but before it the server sends
nothing at all, which only the deadline ends."""
SLACK_S = 0.25
"""A timeout this close to the deadline is the deadline's (httpx's waits are cut to the time left)."""
DEADLINE_ENV = "FELAB_READ_DEADLINE_S"
IDLE_ENV = "FELAB_READ_IDLE_S"


class ReplyStopped(FelabError):
    """The kit stopped reading a reply at one of its limits; the message says which and why."""


E = TypeVar("E", bound=BaseException)


def first_in_chain(exc: BaseException | None, kind: type[E]) -> E | None:
    """The first `kind` in an error's chain (its `__cause__`, else its `__context__`), if any: an
    SDK wraps the error a transport raised, so the kit's own stop is found behind the SDK's."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def stopped_by(exc: BaseException | None) -> ReplyStopped | None:
    """The ReplyStopped behind an `openai` error, if any."""
    return first_in_chain(exc, ReplyStopped)


def seconds_from_env(name: str, default: float) -> float:
    """A number of seconds from the environment (or .env), else `default`."""
    load_env()
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1e6:  # also NaN
        raise FelabError(
            f"{name} is {text[:40]!r}, not a number of seconds between 0 and 1,000,000. Set it to "
            f"a number such as {default * 3:.0f} (in .env or the shell), or remove it for the kit's "
            f"limit."
        )
    return value


@dataclass(frozen=True)
class Limits:
    """What one client may read: a deadline per request, an idle gap in a stream, bytes."""

    deadline_s: float
    idle_s: float = IDLE_S
    reply_bytes: int = REPLY_BYTES
    stream_bytes: int = STREAM_BYTES

    @classmethod
    def for_timeout(cls, timeout_s: float) -> Limits:
        """The kit's limits for a client whose calls may take `timeout_s` each, or the
        environment's (FELAB_READ_DEADLINE_S, FELAB_READ_IDLE_S) where set."""
        return cls(seconds_from_env(DEADLINE_ENV, timeout_s), seconds_from_env(IDLE_ENV, IDLE_S))


def declared(response: httpx.Response) -> int:
    """The size a reply declares (Content-Length), 0 if it declares none."""
    length = response.headers.get("content-length", "")
    return int(length) if length.isdigit() else 0


def compressed(response: httpx.Response) -> str:
    """The reply's Content-Encoding if it is compressed, else ""."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    return "" if encoding in ("", "identity") else encoding[:20]


def cut_to(request: httpx.Request, left_s: float) -> None:
    """Cut each of httpx's waits for this request (connect, read, write, pool) to `left_s`."""
    asked = request.extensions.get("timeout") or {}
    request.extensions["timeout"] = {
        k: min(asked.get(k) or left_s, left_s) for k in ("connect", "read", "write", "pool")
    }


def _is_stream(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").lower().startswith("text/event-stream")


class GuardedTransport(httpx.BaseTransport):
    """httpx's own transport, inside the limits; `who` names the server in a message
    ("the vllm server at http://127.0.0.1:8000/v1")."""

    def __init__(self, limits: Limits, who: str, inner: httpx.BaseTransport | None = None) -> None:
        self.limits, self.who = limits, who
        self.inner = inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        read = Read(self.limits, self.who, request)
        cut_to(request, read.left_s())
        # No answer in time (no headers) stays httpx's timeout: the openai client's "did not
        # answer in time", get_json()'s None. The deadline speaks for a reply that began.
        response = self.inner.handle_request(request)
        read.check_head(response)
        assert isinstance(response.stream, httpx.SyncByteStream)  # a sync transport's reply
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=Capped(response.stream, read),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self.inner.close()


class Read:
    """One request's reply as it is read: its deadline, its bytes so far, its last event."""

    def __init__(self, limits: Limits, who: str, request: httpx.Request) -> None:
        self.limits, self.who = limits, who
        self.asked = f"{request.method} {request.url.path}"
        self.ends_at = time.monotonic() + limits.deadline_s
        self.stream = False
        self.cap = limits.reply_bytes
        self.got = 0
        self.last_event = self.ends_at - limits.deadline_s
        self.tail = b""

    def stop(self, what: str, advice: str) -> ReplyStopped:
        return ReplyStopped(f"{self.who[:1].upper()}{self.who[1:]} {what}. {advice}")

    def left_s(self, slack_s: float = 0.0) -> float:
        """Seconds left before the deadline; a ReplyStopped once there are none (or no more than
        `slack_s`: a wait httpx cut to the time left may end a moment before it)."""
        left = self.ends_at - time.monotonic()
        if left <= slack_s:
            raise self.stop(
                f"did not finish its reply to {self.asked} within {self.limits.deadline_s:g} s, the "
                f"kit's limit for it, so the kit stopped reading",
                _slow_advice(DEADLINE_ENV, self.limits.deadline_s),
            )
        return left

    def check_head(self, response: httpx.Response) -> None:
        """Refuse, before its body is read, a compressed reply or one declared too large."""
        self.stream = _is_stream(response)
        self.cap = self.limits.stream_bytes if self.stream else self.limits.reply_bytes
        self.last_event = time.monotonic()
        stop = None
        if encoding := compressed(response):
            stop = self.stop(
                f"sent its reply to {self.asked} compressed ({encoding}) although the kit asked "
                f"for it uncompressed, so the kit did not read it (what it unpacks to is not known "
                f"until it is unpacked)",
                _address_advice(),
            )
        elif declared(response) > self.cap:
            stop = self.too_large()
        if stop is not None:
            response.close()
            raise stop

    def too_large(self) -> ReplyStopped:
        what = "in its streamed reply to" if self.stream else "for"
        return self.stop(
            f"sent more than {self.cap / MIB:g} MiB {what} {self.asked}, far more than an LLM server "
            f"sends, so the kit stopped reading",
            _address_advice(),
        )

    def arrived(self, chunk: bytes) -> None:
        """Count a piece of the body; a ReplyStopped once a limit is passed."""
        self.got += len(chunk)
        if self.got > self.cap:
            raise self.too_large()
        self.left_s()
        if not self.stream:
            return
        now = time.monotonic()
        window = self.tail + chunk
        if b"\n\n" in window or b"\r\r" in window or b"\n\r\n" in window:  # an SSE event ended
            self.last_event = now
        elif now - self.last_event > self.limits.idle_s:
            raise self.stop(
                f"sent no whole event (no token) for {self.limits.idle_s:g} s in its streamed reply "
                f"to {self.asked}, while a few bytes still trickled in, so the kit stopped reading",
                _slow_advice(IDLE_ENV, self.limits.idle_s),
            )
        self.tail = window[-3:]


def _address_advice() -> str:
    return (
        f"Check that the address is an LLM server's (`{from_here('make check')}` shows which of the "
        f"kit's servers are up, and where), and restart the server if it is."
    )


def _slow_advice(env: str, seconds: float) -> str:
    return (
        f"If the server is only slow (a long prompt on a CPU, a busy cloud model), give it longer: "
        f"set {env}={max(seconds * 4, 60):.0f} in .env (or the shell) and run again. Otherwise it is "
        f"stuck: restart it (`{from_here('make check')}` shows whether it answers)."
    )


class Watch(Protocol):
    """What watches a reply's body: this module's `Read`, or fw-check's (one deadline for the check)."""

    def arrived(self, chunk: bytes) -> None:
        """Count a piece of the body; raise once a limit is passed."""

    def left_s(self, slack_s: float = 0.0) -> float:
        """Seconds left; raise once there are none (or no more than `slack_s`)."""


class Capped(httpx.SyncByteStream):
    """A reply's body, stopped at the first limit its watch says it passed."""

    def __init__(self, inner: httpx.SyncByteStream, read: Watch) -> None:
        self.inner, self.read = inner, read

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self.inner:
                self.read.arrived(chunk)
                yield chunk
        except httpx.TimeoutException:
            self.read.left_s(SLACK_S)  # out of time: say so
            raise

    def close(self) -> None:
        self.inner.close()


POOL = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
"""The `openai` client's own connection pool (its DEFAULT_CONNECTION_LIMITS): a replay's many
requests at once must not queue for a connection, which would add to their measured times."""


def guarded_client(who: str, timeout_s: float) -> httpx.Client:
    """An httpx client reading within the kit's limits (for the `openai` client, and raw GETs).
    Otherwise as the `openai` client builds its own: redirects followed, the same pool."""
    return httpx.Client(
        transport=GuardedTransport(Limits.for_timeout(timeout_s), who, httpx.HTTPTransport(limits=POOL)),
        timeout=timeout_s,
        headers={"Accept-Encoding": "identity"},
        follow_redirects=True,
    )


def origin(url: str) -> str:
    """`http://host:port` of a URL, as a message names a server."""
    parsed = httpx.URL(url)
    return f"{parsed.scheme}://{parsed.netloc.decode()}"


def get_json(url: str, timeout_s: float = 3.0) -> Any:
    """GET url as JSON, within the limits; None if nothing answers, or not with JSON, or not with
    2xx. A server that passes a limit (an endless body) is a ReplyStopped that names it."""
    with guarded_client(f"the server at {origin(url)}", timeout_s) as http:
        try:
            reply = http.get(url)
        except httpx.HTTPError:
            return None
    if not reply.is_success:
        return None
    try:
        return json.loads(reply.content)
    except ValueError:
        return None


def get_text(url: str, timeout_s: float = 10.0) -> str:
    """GET url as text, within the limits (a page a lesson reads, such as /metrics)."""
    with guarded_client(f"the server at {origin(url)}", timeout_s) as http:
        try:
            reply = http.get(url)
            reply.raise_for_status()
        except httpx.HTTPError as exc:
            raise FelabError(
                f"Could not read {url} ({type(exc).__name__}: {str(exc)[:200]}). The server stopped "
                f"answering, or does not serve that page: `{from_here('make check')}` shows whether "
                f"it is up; run again once it is."
            ) from exc
        return reply.text
