"""How a request enters the practice server: its arrival time, a body limit, one admission at a time.

The arrival is noted before anything else, so the time the server takes to read
and parse a request counts against it, as it would on a real server.
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
    """ASGI middleware: note the arrival, read the whole body (over the limit: 413), then admit.

    Admission is one request at a time: each waits its turn (`self.turn`) after its body is
    read, and the route hands the turn on as soon as the request is booked. The event loop
    reads new requests between two turns, so when many arrive at once each notes its
    arrival time as it comes in, instead of after all the others have been parsed.
    """

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit
        self.turn = asyncio.Lock()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        arrival = asyncio.get_running_loop().time()  # before the body is read and parsed
        await asyncio.sleep(0)  # requests that came in together all note their arrival before any is parsed
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared and declared.isdigit() and int(declared) > self.limit:
            return await self._refuse(send)
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                return await self._refuse(send)
        await self.turn.acquire()
        admitted = False

        def admit() -> None:
            nonlocal admitted
            if not admitted:
                admitted = True
                self.turn.release()

        scope.setdefault("state", {})["intake"] = Admission(arrival, admit)  # Starlette's request.state
        try:
            await asyncio.sleep(0)  # a pass of the event loop between two admissions: it reads new requests
            await self.app(scope, _replay(bytes(body), receive), send)
        finally:
            admit()  # other routes, and errors: the turn passes when the reply is done

    async def _refuse(self, send: Any) -> None:
        response = ApiError(413, f"Request body larger than {self.limit} bytes.").response()
        await response({"type": "http"}, _closed, send)


async def _closed() -> dict:
    """A `receive` for a reply sent without reading the rest of the body."""
    return {"type": "http.disconnect"}


def _replay(body: bytes, receive: Any) -> Callable[[], Any]:
    """A `receive` that gives the body already read, then waits for the client to disconnect."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> dict:
        return pending.pop() if pending else await receive()

    return replay
