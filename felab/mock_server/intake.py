"""How a request enters the practice server: its arrival time, a body limit, one admission at a time.

The arrival is noted before anything else, so the time the server takes to read
and parse a request counts against it, as it would on a real server. The body
must arrive within the request deadline (`--request-timeout`), or the client
gets a 408 in OpenAI's envelope and the connection is closed: a body sent a byte
a second does not hold the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from felab.mock_server.wire import ApiError


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
    after its body is read, and the route releases it as soon as the request is booked. The
    event loop reads new requests between two admissions, so when many arrive at once each
    notes its arrival time as it comes in, instead of after all the others have been parsed.
    """

    def __init__(self, app: Any, limit: int, timeout_s: float) -> None:
        self.app, self.limit, self.timeout_s = app, limit, timeout_s
        self.admitting = asyncio.Lock()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        arrival = asyncio.get_running_loop().time()  # before the body is read and parsed
        await asyncio.sleep(0)  # requests that came in together all note their arrival before any is parsed
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared and declared.isdigit() and int(declared) > self.limit:
            return await self._refuse(send, 413, self._too_large())
        try:
            body = await asyncio.wait_for(self._read(receive), self.timeout_s)
        except asyncio.TimeoutError:
            return await self._refuse(
                send, 408, f"The request body did not arrive within {self.timeout_s:g} s."
            )
        except _TooLarge:
            return await self._refuse(send, 413, self._too_large())
        if body is None:
            return None  # the client left before its body was whole
        await self.admitting.acquire()
        admitted = False

        def admit() -> None:
            nonlocal admitted
            if not admitted:
                admitted = True
                self.admitting.release()

        scope.setdefault("state", {})["intake"] = Admission(arrival, admit)  # Starlette's request.state
        try:
            await asyncio.sleep(0)  # a pass of the event loop between two admissions: it reads new requests
            await self.app(scope, _replay(body, receive), send)
        finally:
            admit()  # other routes, and errors: the next is admitted when the reply is done

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

    def _too_large(self) -> str:
        return f"Request body larger than {self.limit} bytes."

    async def _refuse(self, send: Any, status: int, message: str) -> None:
        """Answer before the body is read (or whole), and close the connection: what is left of
        the body must not be read as the next request."""
        response = ApiError(status, message, headers={"connection": "close"}).response()
        await response({"type": "http"}, _closed, send)


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
