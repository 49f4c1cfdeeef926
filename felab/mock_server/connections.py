"""What one connection may take of the practice server: time, bytes, and other clients' turn.

A server that waits forever for a client can be held by one that never finishes
(a crashed script, a stuck proxy, or slowloris on purpose), or by one that never reads
what it is sent. The limits:

    idle       a connection with no request under way is closed after --idle-timeout
               seconds: between two requests (uvicorn's `timeout_keep_alive`) and, here,
               also a new connection that has sent nothing yet
    head       a request's line and headers must all arrive within --request-timeout
               seconds of its first byte, or the connection is closed (uvicorn re-arms
               nothing while bytes trickle in, one a second), and fit MAX_HEAD_BYTES, or
               they get a 431 (httptools has no limit, and joins a header's pieces by
               copying: an endless header cost the event loop seconds)
    body       the body has the same deadline, counted from arrival, and gets a 408 in
               OpenAI's envelope (intake.py)
    unread     requests sent ahead of their replies (HTTP/1.1 pipelining) are read only
               while none waits for its reply and the replies are being read
               (`Backpressure`: TCP then holds the client back); more than MAX_WAITING
               waiting at once (a single read can bring thousands) closes the connection.
               uvicorn read on after every reply: 10 MB of `GET /health` sent and never
               read were all parsed and queued.

uvicorn's httptools protocol is used as is, with these added; its own keep-alive timer and
handler close the connection. Four more things happen here: each request's arrival is
noted as soon as its head is parsed (intake.py reads it), a reply is told at once when its
client hangs up (`intake.HANG_UP`), a response's head goes out in one write with its first
body bytes when they follow at once (`HeadWithBody`), and malformed HTTP is answered in
OpenAI's envelope. An HTTP/1.0 client gets a stream without chunks, ended by the close
(`CloseDelimited`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sized
from http import HTTPStatus
from typing import Any

import uvicorn
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from felab.mock_server.config import Settings
from felab.mock_server.h2_probe import RefusesHttp2
from felab.mock_server.intake import ARRIVAL, HANG_UP, HangUp
from felab.mock_server.waits import clock
from felab.mock_server.wire import ApiError

STOP_GRACE_S = 2
"""Ctrl+C (or SIGTERM): the streams under way get this long to end, then are cut, as llama-server
and vLLM stop without waiting for their queues. Without a bound, a server behind a queue of long
prompts waited minutes for them, saying nothing."""

MAX_WAITING = 100
"""Requests a connection may have waiting for their replies (sent ahead, HTTP/1.1 pipelining);
with more, it is closed. No client the kit uses sends a request before the last reply is read."""
MAX_HEAD_BYTES = 64 * 1024
"""The most a request's line and headers may take (nginx allows 32 kB, Node and uvicorn's h11
16 kB; the openai client sends well under 1 kB): past it, 431 and the connection is closed."""
SLICE = 16 * 1024
"""What the parser is fed at a time, so that a head's length is known to within this much."""
LINGER_BYTES = 1024 * 1024
"""After a 431, how much more is read and dropped (the rest of the head, a body) before the
connection is closed, so that a client that sends it all before reading gets the 431, not a reset."""


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
        if self.transport.is_closing():
            return  # dropped (cut_off) while a reply was written: nobody reads it
        if self.held:
            data, self.held = self.held + data, b""
        elif data.startswith(b"HTTP/1.1 ") and data.endswith(b"\r\n\r\n") and data[9:12] != b"100":
            self.held = data
            self.loop.call_soon(self.flush)
            return
        self.transport.write(data)

    def flush(self) -> None:
        if self.held and not self.transport.is_closing():
            data, self.held = self.held, b""
            self.transport.write(data)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def __getattr__(self, name: str) -> Any:  # is_closing(), get_extra_info(), ...: the transport's own
        return getattr(self.transport, name)


class Backpressure(FlowControl):
    """uvicorn's flow control, which reads on whenever a request asks for its body or a reply
    is done, held while the connection's client has requests waiting for replies (`waiting`,
    uvicorn's pipeline) or does not read its replies (the transport paused writing): TCP then
    stops it from sending more. Reading resumes when both are over."""

    def __init__(self, transport: asyncio.Transport, waiting: Sized) -> None:
        super().__init__(transport)
        self.waiting = waiting

    def resume_reading(self) -> None:
        if not self.waiting and not self.write_paused:
            super().resume_reading()

    def pause_writing(self) -> None:
        super().pause_writing()
        self.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        self.resume_reading()


class CloseDelimited(RequestResponseCycle):
    """An HTTP/1.0 request's cycle. HTTP/1.0 has no chunked transfer coding (a server must not
    send one to an HTTP/1.0 client: RFC 9112, 6.1), and uvicorn chunks every reply that has no
    Content-Length, a stream of events too: such a reply goes out as it is here, and its end
    is the connection's close (uvicorn closes an HTTP/1.0 connection after each reply)."""

    close_delimited = False

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            names = {name.lower() for name, _ in message.get("headers", [])}
            if not names & {b"content-length", b"transfer-encoding"}:
                self.close_delimited = True
                self.chunked_encoding = False  # uvicorn adds `transfer-encoding: chunked` when None
        elif message["type"] == "http.response.body" and self.close_delimited:
            # uvicorn writes an unchunked body against its Content-Length: each piece is all there is
            self.expected_content_length = len(message.get("body", b""))
        await super().send(message)


class TimelyHttp(HttpToolsProtocol):
    """uvicorn's HTTP protocol, with a deadline for a new connection's first byte and for each
    head, a limit to each head's size, and flow control for requests sent ahead of their replies."""

    head_timeout_s: float  # set per server by timely_http(), from Settings.request_timeout_s

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # (uvicorn's own signature narrows asyncio.Protocol's in the same way)
        super().connection_made(transport)
        self.flow = Backpressure(transport, self.pipeline)  # it keeps the transport itself
        self.transport = HeadWithBody(transport, self.loop)  # type: ignore[assignment]
        self.head_timer: asyncio.TimerHandle | None = None
        self.flooded = self.refused = False
        self.head_bytes: int | None = 0  # bytes of the head being read; None while a body is read
        self.dropped = 0  # bytes read and dropped after a 431
        # Idle from the start: uvicorn arms this only after a first reply. Any byte cancels it.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def on_message_begin(self) -> None:
        if self.flooded:
            return
        super().on_message_begin()
        self.head_timer = self.loop.call_later(self.head_timeout_s, self.timeout_keep_alive_handler)

    def data_received(self, data: bytes) -> None:
        """Feed the parser a slice at a time, counting the bytes of each head as they come.

        httptools joins a header's pieces by copying what it has so far at each one, and has
        no limit of its own: a header that never ends (or endless header lines) cost seconds
        of the event loop, every other client's, before the head deadline closed it.
        """
        if self.flooded:
            return
        if self.refused:
            self.dropped += len(data)
            if self.dropped > LINGER_BYTES:
                self.transport.abort()
            return
        for start in range(0, len(data), SLICE):
            piece = data[start : start + SLICE]
            if self.head_bytes is not None:
                self.head_bytes += len(piece)
                if self.head_bytes > MAX_HEAD_BYTES:
                    self.refuse_head()
                    return
            super().data_received(piece)
            if self.flooded or self.transport.is_closing():
                return

    def on_headers_complete(self) -> None:
        if self.flooded:  # the rest of the read that brought the flood: parsed, never served
            return
        self._stop_head_timer()
        self.head_bytes = None  # a body, if any, comes next: the intake limits it
        self.scope["state"][ARRIVAL] = clock()  # the request has arrived: every cost after this is its own
        self.scope["state"][HANG_UP] = HangUp()  # how its reply learns of a hang-up
        super().on_headers_complete()
        if self.scope["http_version"] == "1.0" and self.cycle is not None and self.cycle.scope is self.scope:
            self.cycle.__class__ = CloseDelimited  # the cycle uvicorn just made, for this request
        if len(self.pipeline) > MAX_WAITING:
            self.cut_off()

    def on_message_complete(self) -> None:
        if self.flooded:
            return
        super().on_message_complete()
        self.head_bytes = 0  # what comes next is the next request's head
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
        calls this when its parser gives up, then forgets the connection: it is closed here.
        """
        advice = "the request line, the headers or the chunked body do not follow HTTP/1.1"
        self.answer(400, f"{msg.rstrip('.')}: {advice}.")
        self.transport.close()

    def refuse_head(self) -> None:
        """A head past MAX_HEAD_BYTES: 431, then what the client still sends is dropped (up to
        LINGER_BYTES, then the connection is dropped too) until it closes or the idle timeout
        does. With a reply under way on the connection there is no room for the 431: it is
        dropped at once."""
        self.refused = True
        self._stop_head_timer()
        self.pipeline.clear()
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.abort()
            return
        self.answer(
            431,
            f"The request line and headers are larger than {MAX_HEAD_BYTES // 1024} kB: "
            f"send fewer or shorter headers (data belongs in the body).",
        )
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def answer(self, status: int, message: str) -> None:
        """Write an error in OpenAI's envelope, with `connection: close`, outside any request cycle."""
        body = ApiError(status, message).response().body
        content = [b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode())]
        for name, value in self.server_state.default_headers:
            content += [name, b": ", value, b"\r\n"]
        content += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body)]
        self.transport.write(b"".join([*content, b"connection: close\r\n\r\n", body]))

    def cut_off(self) -> None:
        """Drop a connection flooded with requests sent ahead, without a reply: its client reads
        nothing (a graceful close would wait for it to), and no request it queued is started.
        The parser still goes through the rest of the slice it is in (SLICE), serving none."""
        self.flooded = True
        self.logger.warning(
            "A client sent more than %d requests without reading the replies: its connection is closed.",
            MAX_WAITING,
        )
        self.pipeline.clear()
        self.transport.abort()

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
        timeout_graceful_shutdown=STOP_GRACE_S,
    )


class QuietStop(logging.Filter):
    """Keep the streams a stop cut out of the log: uvicorn logs each one's cancellation as
    "Exception in ASGI application" with its traceback (dozens behind a queue). Its one line
    that counts them stays, in words of the server's stop rather than as an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if str(record.msg).startswith("Cancel %s running task(s)"):
            record.msg, record.levelname = (
                f"stopping: cut %s request(s) still under way after {STOP_GRACE_S} s",
                "INFO",
            )
        return not isinstance(exc, asyncio.CancelledError)
