"""How long a connection may keep the practice server waiting: idle, or sending its request slowly.

A server that waits forever for a client can be held by one that never finishes
(a crashed script, a stuck proxy, or slowloris on purpose). Three limits:

    idle       a connection with no request under way is closed after --idle-timeout
               seconds: between two requests (uvicorn's `timeout_keep_alive`) and, here,
               also a new connection that has sent nothing yet
    head       a request's line and headers must all arrive within --request-timeout
               seconds of its first byte, or the connection is closed (uvicorn re-arms
               nothing while bytes trickle in, one a second)
    body       the body has the same deadline, counted from arrival, and gets a 408 in
               OpenAI's envelope (intake.py)

uvicorn's httptools protocol is used as is, with two timers added; its own keep-alive
timer and handler close the connection. Four more things happen here: each request's
arrival is noted as soon as its head is parsed (intake.py reads it), a reply is told at
once when its client hangs up (`intake.HANG_UP`), a response's head goes out in one write
with its first body bytes when they follow at once (`HeadWithBody`), and malformed HTTP is
answered in OpenAI's envelope.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from felab.mock_server.config import Settings
from felab.mock_server.h2_probe import RefusesHttp2
from felab.mock_server.intake import ARRIVAL, HANG_UP, HangUp
from felab.mock_server.waits import clock
from felab.mock_server.wire import ApiError


class HeadWithBody:
    """A connection's transport as uvicorn's request cycles see it: a response's head (its status
    line and headers, which uvicorn writes on their own) is held until the response's first body
    bytes and goes out with them, in one write: one system call and one wake-up of the client
    instead of two (a whole reply's body follows its head at once). A head with nothing after it
    (a streamed reply's, whose first chunk comes with its first token) goes out alone at the end
    of the event loop's pass.
    `100 Continue` is never held: the client waits for it before it sends the body.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport, self.loop, self.held = transport, loop, b""

    def write(self, data: bytes) -> None:
        if self.held:
            data, self.held = self.held + data, b""
        elif data.startswith(b"HTTP/1.1 ") and data.endswith(b"\r\n\r\n") and data[9:12] != b"100":
            self.held = data
            self.loop.call_soon(self.flush)
            return
        self.transport.write(data)

    def flush(self) -> None:
        if self.held:
            data, self.held = self.held, b""
            self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing(), get_extra_info(), ...: the transport's own
        return getattr(self.transport, name)


class TimelyHttp(HttpToolsProtocol):
    """uvicorn's HTTP protocol, with a deadline for a new connection's first byte and for each head."""

    head_timeout_s: float  # set per server by timely_http(), from Settings.request_timeout_s

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # (uvicorn's own signature narrows asyncio.Protocol's in the same way)
        super().connection_made(transport)  # uvicorn's flow control keeps the transport itself
        self.transport = HeadWithBody(transport, self.loop)  # type: ignore[assignment]
        self.head_timer: asyncio.TimerHandle | None = None
        # Idle from the start: uvicorn arms this only after a first reply. Any byte cancels it.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.head_timer = self.loop.call_later(self.head_timeout_s, self.timeout_keep_alive_handler)

    def on_headers_complete(self) -> None:
        self._stop_head_timer()
        self.scope["state"][ARRIVAL] = clock()  # the request has arrived: every cost after this is its own
        self.scope["state"][HANG_UP] = HangUp()  # how its reply learns of a hang-up
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        if not self.pipeline:  # the request being served is whole: read on, to see a hang-up
            # (uvicorn pauses reading while a large body waits to be read, and resumes it only
            # when the app asks for more: a reply that waits asks for nothing)
            self.flow.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self.cycle is not None and not self.cycle.response_complete:  # hung up mid-reply
            self.cycle.scope["state"][HANG_UP].now()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """Malformed HTTP (a bad chunk size, Content-Length with chunked, a bare LF, ...), answered
        in OpenAI's envelope like every other error; uvicorn's own answer is plain text. uvicorn
        calls this when its parser gives up, then forgets the connection: it is closed here."""
        advice = "the request line, the headers or the chunked body do not follow HTTP/1.1"
        body = ApiError(400, f"{msg.rstrip('.')}: {advice}.").response().body
        content = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            content += [name, b": ", value, b"\r\n"]
        content += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body)]
        self.transport.write(b"".join([*content, b"connection: close\r\n\r\n", body]))
        self.transport.close()

    def _stop_head_timer(self) -> None:
        timer = getattr(self, "head_timer", None)
        if timer is not None:
            timer.cancel()
            self.head_timer = None


def timely_http(head_timeout_s: float) -> type[TimelyHttp]:
    """The protocol class for uvicorn's `http=` setting, with this head deadline."""
    attrs: dict[str, Any] = {"head_timeout_s": head_timeout_s}
    return type("TimelyHttp", (RefusesHttp2, TimelyHttp), attrs)  # a router's HTTP/2 probe: h2_probe.py


def uvicorn_config(app: Any, host: str, port: int, settings: Settings) -> uvicorn.Config:
    """How uvicorn serves the practice server: quiet, and with the limits above."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        http=timely_http(settings.request_timeout_s),
        timeout_keep_alive=settings.idle_timeout_s,
        proxy_headers=False,
    )
