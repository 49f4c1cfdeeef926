"""How a streamed reply is written: server-sent events straight to the connection, at their times.

A streamed reply is a series of pieces, each written the moment it is due. Two
things make it cheap enough that 64 streams keep their schedule on two cores
(docs/benchmarks.md, "The floor"):

    one write per moment   pieces due at the same moment go out in one write: the last
                           token, the usage chunk and `[DONE]`, with the end of the body
    no watcher task        the HTTP protocol calls the reply back when its client hangs up
                           (intake.HangUp), and the reply is cancelled where it stands (its
                           own `finally` gives its time back); Starlette's StreamingResponse
                           runs a task group of two per reply, one of them only to watch

A hang-up is noticed at once, also while the reply waits for its first token: the
booked time it will not use goes back to the prefill lane (booking.py). Served by
another ASGI server (no such callbacks), a reply learns of a hang-up when it writes.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from starlette.responses import Response

from felab.mock_server.intake import hang_up

Piece = tuple[bytes, bool]
"""What a reply yields: the bytes due now, and whether more will follow."""


class EventStream(Response):
    """An ASGI response: `text/event-stream`, written piece by piece as `events` yields them.

    A Starlette `Response` only by type (a route returns one); nothing of its body handling is used.
    """

    def __init__(self, events: AsyncGenerator[Piece, None], headers: Mapping[str, str]) -> None:
        self.status_code, self.background, self.events = 200, None, events
        self.raw_headers = [(b"content-type", b"text/event-stream; charset=utf-8")] + [
            (k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
        ]
        self.over = self.gone = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        task = asyncio.current_task()
        assert task is not None

        def hung_up() -> None:
            if not self.over:
                self.gone = True
                task.cancel()

        hang_up(scope).then(hung_up)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            more = True
            async for body, more in self.events:
                await send({"type": "http.response.body", "body": body, "more_body": more})
                if not more:
                    break
            else:  # the events ended without saying so: end the body
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            self.over = True
            # Written. Other replies due at this moment go first; what is left (closing the
            # reply, uvicorn's bookkeeping) is not late for anyone.
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            if not self.gone:
                raise  # not a hang-up: the server is stopping
            if sys.version_info >= (3, 11):
                task.uncancel()  # the hang-up's cancel is handled here
        finally:
            self.over = True
            await self.events.aclose()
