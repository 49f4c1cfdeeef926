"""How a request enters the practice server: its arrival time, a body limit, one admission at a time.

The arrival is noted before anything else (by the HTTP protocol, as soon as the head is
parsed: connections.py), so the time the server takes to read
and parse a request counts against it, as it would on a real server. The body
must arrive within the request deadline (`--request-timeout`), or the client
gets a 408 in OpenAI's envelope and the connection is closed: a body sent a byte
a second does not hold the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

from felab.mock_server.waits import clock
from felab.mock_server.wire import ApiError

T = TypeVar("T")
DISCARD_BYTES = 64 * 1024 * 1024
"""How much of a body over the limit is read and dropped after its 413 is sent, so that a client
that sends it all before reading gets the 413 rather than a reset (above this, or past the
request deadline, the connection is closed as it stands)."""
ARRIVAL = "felab.arrival"
"""The key in a request's `scope["state"]` where the HTTP protocol notes its arrival (server's clock)."""
HANG_UP = "felab.hang_up"
"""The key in a request's `scope["state"]` of its `HangUp` (set by the HTTP protocol: connections.py)."""


class HangUp:
    """Tells a reply that its client hung up: the HTTP protocol calls `now()` when the connection
    closes before the reply is complete, and each callback given to `then` runs (at once, if the
    client is gone already). A reply waiting for its booked time learns of it at once, with no
    task of its own watching the connection."""

    __slots__ = ("gone", "callbacks")

    def __init__(self, gone: bool = False) -> None:
        self.gone = gone
        self.callbacks: list[Callable[[], None]] = []

    def then(self, callback: Callable[[], None]) -> None:
        if self.gone:
            callback()
        else:
            self.callbacks.append(callback)

    def now(self) -> None:
        self.gone = True
        for callback in self.callbacks:
            callback()


def hang_up(scope: Mapping[str, Any]) -> HangUp:
    """The request's HangUp; a new one, never called, where the server sets none (not uvicorn with
    connections.py: a reply then learns of a hang-up only when it writes)."""
    return (scope.get("state") or {}).get(HANG_UP) or HangUp()


async def within(seconds: float, work: Coroutine[Any, Any, T]) -> T:
    """`work`, or asyncio.TimeoutError after `seconds`: with `asyncio.timeout` where Python has it
    (3.11+), which needs no task of its own, else with `wait_for`."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await work
    return await asyncio.wait_for(work, seconds)  # pragma: no cover (Python 3.10)


@dataclass
class Admission:
    """What the intake hands a route (as `request.state.intake`): when the request arrived, and
    `admitted()`, to call once it is booked so the next request may be admitted."""

    arrival: float
    admitted: Callable[[], None]


class Intake:
    """ASGI middleware: note the arrival, read the whole body (over the limit: 413; too slow: 408),
    then admit.

    Admission is one request at a time: each waits for the admission lock (`self.admitting`)
    after its body is read, and the route releases it as soon as the request is booked; a
    route that books nothing (GET /health, /metrics, an error) releases it when its reply
    starts, before a byte of it is written. Writing waits for the client to read (uvicorn
    stops at a full send buffer): a client that never reads its replies must hold only its
    own connection, never the turn of every other client. The
    event loop reads new requests between two admissions (each admission waits for a pass of
    it), and the HTTP protocol notes each one's arrival as it reads its head (connections.py),
    so when many arrive at once none waits for the others to be parsed before its clock starts.
    """

    def __init__(self, app: Any, limit: int, timeout_s: float) -> None:
        self.app, self.limit, self.timeout_s = app, limit, timeout_s
        self.admitting = asyncio.Lock()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        # Noted by the HTTP protocol when the head was parsed (connections.py), before any work on
        # it: requests read together all have their arrival before any is parsed.
        arrival = (scope.get("state") or {}).get(ARRIVAL) or clock()
        body = await self._body(scope, receive, send)
        if body is None:
            return None  # refused (413, 408), or the client left before its body was whole
        await self.admitting.acquire()
        admitted = False

        def admit() -> None:
            nonlocal admitted
            if not admitted:
                admitted = True
                self.admitting.release()

        def reply(message: dict) -> Awaitable[None]:
            # (not a coroutine of its own: the server's send, awaited as it is, at no extra cost
            # to each of a stream's pieces)
            if message["type"] == "http.response.start":
                admit()  # the reply is worked out: writing it is its client's business alone
            return send(message)

        scope.setdefault("state", {})["intake"] = Admission(arrival, admit)  # Starlette's request.state
        try:
            # A pass of the event loop between two admissions, even when the turn was free:
            # without it, requests whose bodies were read in the same pass are admitted one
            # after another in it, and a burst of 64 large prompts kept the loop from reading
            # arrivals and sending first tokens for 30 ms (measured: p99 30 ms, with it 6 ms).
            await asyncio.sleep(0)
            await self.app(scope, _replay(body, receive), reply)
        finally:
            admit()  # a route that raised before it replied: the next is admitted now

    async def _body(self, scope: dict, receive: Any, send: Any) -> bytes | None:
        """The whole body; None once the request is refused (413, 408) or its client left."""
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            # A client that waits for `100 Continue` (curl) has not sent the body: nothing to drop.
            sent = headers.get(b"expect", b"").lower() != b"100-continue" and int(declared) <= DISCARD_BYTES
            await self._refuse(send, 413, self._too_large(), receive if sent else None)
            return None
        try:
            return await within(self.timeout_s, self._read(receive))
        except asyncio.TimeoutError:
            await self._refuse(send, 408, f"The request body did not arrive within {self.timeout_s:g} s.")
        except _TooLarge:  # the moment the limit is crossed, also in a chunked body of no known length
            await self._refuse(send, 413, self._too_large(), receive)
        return None

    async def _read(self, receive: Any) -> bytes | None:
        """The whole body; None if the client disconnects first, _TooLarge past the limit."""
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                raise _TooLarge
        return bytes(body)

    async def _discard(self, receive: Any) -> None:
        """Read and drop the rest of a body too large to keep, up to DISCARD_BYTES and the deadline.

        A client that sends its whole body before it reads (Python's http.client does) would
        otherwise see its connection reset instead of the 413: the kernel resets a connection
        closed with unread bytes in it.
        """
        dropped, more = 0, True

        async def drain() -> None:
            nonlocal dropped, more
            while more and dropped <= DISCARD_BYTES:
                message = await receive()
                dropped += len(message.get("body", b""))
                more = message["type"] != "http.disconnect" and message.get("more_body", False)

        with contextlib.suppress(asyncio.TimeoutError):
            await within(self.timeout_s, drain())

    def _too_large(self) -> str:
        return f"Request body larger than {self.limit} bytes."

    async def _refuse(self, send: Any, status: int, message: str, rest: Any = None) -> None:
        """Answer before the body is read (or whole), and close the connection: what is left of
        the body must not be read as the next request.

        With `rest` (the `receive` of a body still coming), the answer goes out whole at once,
        then the rest of the body is read and dropped (`_discard`), and only then does the
        connection close (uvicorn closes it when the reply's end is sent): the client has its
        answer when it looks, whether it reads as it sends or only once it has sent it all.
        """
        response = ApiError(status, message, headers={"connection": "close"}).response()
        if rest is None:
            await response({"type": "http"}, _closed, send)
            return

        async def all_but_the_end(message: MutableMapping[str, Any]) -> None:
            await send({**message, "more_body": True} if message["type"] == "http.response.body" else message)

        await response({"type": "http"}, _closed, all_but_the_end)  # every byte of it, written now
        await self._discard(rest)
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class _TooLarge(Exception):
    """The body passed the limit while it was read."""


async def _closed() -> dict:
    """A `receive` for a reply sent without reading the rest of the body."""
    return {"type": "http.disconnect"}


def _replay(body: bytes, receive: Any) -> Callable[[], Any]:
    """A `receive` that gives the body already read, then waits for the client to disconnect."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> dict:
        return pending.pop() if pending else await receive()

    return replay
