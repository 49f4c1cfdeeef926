"""The practice server's HTTP layer: OpenAI's routes, translated to and from the booking core.

    python -m felab.mock_server            # or: make mock
    curl http://127.0.0.1:8765/v1/models

This module only translates: parse a request (wire.py), book it in the model
(booking.py), and write the reply at the booked times. What it models lives
elsewhere, each in one short place: the cache (cache.py), the timing
(timing.py), the replicas and routes (fleet.py), every default (config.py),
failures on purpose (faults.py), /metrics (metrics.py), and how a request
comes in (intake.py).

What it serves: `POST /v1/chat/completions` (streamed or not), `GET /v1/models`,
`GET /health`, `GET /metrics`, and `POST /admin/reset`, which empties the prefix
caches without a restart. Usage reports `prompt_tokens_details.cached_tokens` as
vLLM, SGLang and Fireworks do; the `x-felab-replica` header says which replica
served the request. Every error uses OpenAI's envelope
`{"error": {"message", "type", "param", "code"}}` with a 4xx status (5xx only
when injected on purpose with `--fail-rate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from felab.mock_server import metrics
from felab.mock_server.booking import Booking, PracticeModel, Prompt
from felab.mock_server.cache import block_keys, tokenize
from felab.mock_server.config import HEALTH_NAME, Settings
from felab.mock_server.faults import ERRORS, RETRY_AFTER_S, Faults, StreamCut
from felab.mock_server.intake import Admission, Intake
from felab.mock_server.wire import ApiError, ChatRequest, chat_template, validation_message


@dataclass
class ServerState:
    """All mutable state, kept on the app (no module-level globals)."""

    settings: Settings
    model: PracticeModel
    faults: Faults
    moved: dict[int, asyncio.Event] = field(default_factory=dict)
    """Per replica: set when prompts queued in its lane moved up (a request ahead was cancelled)."""

    @classmethod
    def fresh(cls, s: Settings) -> ServerState:
        """Empty caches, idle lanes, zeroed counters, generators back at their seed."""
        return cls(s, PracticeModel(s), Faults(s.fail_rate, s.fail_types, s.seed))

    def cancel(self, booking: Booking, now: float) -> None:
        """A client hung up: the model gives back its lane time; wake whoever moved up."""
        if self.model.cancel(booking, now):
            event = self.moved.pop(booking.replica.index, None)
            if event:
                event.set()


WORDS = ("This", " is", " the", " practice", " server", " answering", " with", " placeholder", " words", ".")


def reply_words(n: int) -> list[str]:
    """The generated text: placeholder words, one token each (the practice server has no model)."""
    return [WORDS[i % len(WORDS)] for i in range(n)]


# ── Waiting for the booked times ─────────────────────────────────────────────

PRECISE_S = 0.002
CLIENT_CLOSED = 499


async def sleep_until(deadline: float, precise: bool = False) -> None:
    """Sleep until `deadline` (loop time).

    asyncio wakes a timer up to about 1 ms late (the kernel call takes whole
    milliseconds). For the first token, whose time the client measures, a
    `precise` sleep stops PRECISE_S early and then yields to the event loop
    until the deadline has passed. Later tokens do not spin: that would cost
    CPU on every token for no visible gain.
    """
    loop = asyncio.get_running_loop()
    delay = deadline - loop.time() - (PRECISE_S if precise else 0.0)
    if delay > 0:
        await asyncio.sleep(delay)
    while precise and loop.time() < deadline:
        await asyncio.sleep(0)


async def until_first_token(state: ServerState, booking: Booking) -> None:
    """Wait for the booked first token; if a request ahead is cancelled, the time moves up."""
    loop = asyncio.get_running_loop()
    while (delay := booking.first_token_at - loop.time() - PRECISE_S) > 0:
        moved = state.moved.setdefault(booking.replica.index, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(moved.wait(), delay)
    await sleep_until(booking.first_token_at, precise=True)


async def hung_up(request: Request) -> None:
    """Return when the client closes its connection (never, while it waits for its reply)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


# ── Replies ──────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Reply:
    """What a reply needs besides its booking: the request's wishes and the fault drawn for it."""

    model: str
    stream: bool
    include_usage: bool
    fault: str | None
    created: int = field(default_factory=lambda: int(time.time()))

    def envelope(self, booking: Booking, obj: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-felab-{booking.rid}",
            "object": obj,
            "created": self.created,
            "model": self.model,
        }


def frame(data: dict[str, Any]) -> str:
    """One server-sent event."""
    return f"data: {json.dumps(data)}\n\n"


async def chat_events(state: ServerState, booking: Booking, reply: Reply) -> AsyncIterator[str]:
    """A streamed chat reply: a role chunk at once, then one chunk per token at its booked time."""
    words, done = reply_words(booking.reply_tokens), False

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return frame({**reply.envelope(booking, "chat.completion.chunk"), "choices": [choice]})

    try:
        # The role arrives at once, as on many servers; a TTFT taken at the first
        # chunk of any kind would read ~0 ms here. felab waits for content.
        yield chunk({"role": "assistant", "content": ""})
        await until_first_token(state, booking)
        for i, word in enumerate(words):
            await sleep_until(booking.token_at(i))
            if reply.fault == "cut" and i == len(words) // 2:
                raise StreamCut(booking.rid)  # uvicorn closes the connection mid-body
            yield chunk({"content": word}, "length" if i == len(words) - 1 else None)
        if reply.include_usage:  # the usage comes last, with no choices
            yield frame(
                {**reply.envelope(booking, "chat.completion.chunk"), "choices": [], "usage": booking.usage()}
            )
        yield "data: [DONE]\n\n"
        done = True
    finally:  # also when the client goes away mid-reply
        if done:
            state.model.finish(booking)
        else:
            state.cancel(booking, asyncio.get_running_loop().time())


async def chat_whole(state: ServerState, booking: Booking, reply: Reply, request: Request) -> Response:
    """A chat reply in one piece, sent when its last token is due (499 if the client hung up first)."""
    loop = asyncio.get_running_loop()
    gone = asyncio.ensure_future(hung_up(request))
    try:
        await asyncio.wait({gone}, timeout=max(0.0, booking.token_at(booking.reply_tokens - 1) - loop.time()))
    finally:
        gone.cancel()
    if not gone.cancelled() and gone.done():
        state.cancel(booking, loop.time())
        return Response(status_code=CLIENT_CLOSED)  # nobody reads it; nginx's code for this
    state.model.finish(booking)
    message = {"role": "assistant", "content": "".join(reply_words(booking.reply_tokens))}
    choice = {"index": 0, "message": message, "finish_reason": "length"}
    body = {**reply.envelope(booking, "chat.completion"), "choices": [choice], "usage": booking.usage()}
    return JSONResponse(body, headers=headers_for(booking))


def headers_for(booking: Booking) -> dict[str, str]:
    return {
        "x-felab-predicted-ttft-ms": f"{booking.ttft_s * 1000:.3f}",
        "x-felab-replica": str(booking.replica.index),
    }


# ── Booking a request ────────────────────────────────────────────────────────


def reply_length(req: ChatRequest, settings: Settings, prompt_tokens: int) -> int:
    """The reply's length in tokens; a 400 if prompt and reply do not fit the context."""
    max_tokens = req.max_completion_tokens or req.max_tokens or settings.default_max_tokens
    if prompt_tokens + max_tokens > settings.context_tokens:
        message = (
            f"This model's maximum context length is {settings.context_tokens} tokens; "
            f"the request has {prompt_tokens} prompt tokens and asks for {max_tokens} more."
        )
        raise ApiError(400, message, param="messages", code="context_length_exceeded")
    return max_tokens


def draw_fault(faults: Faults) -> str | None:
    """The failure this request gets on purpose (`--fail-rate`); an error reply is raised at once."""
    fault = faults.draw()
    if fault in ERRORS:
        status, text, type_, code = ERRORS[fault]
        wait = {"retry-after": str(RETRY_AFTER_S)} if status in (429, 503) else None
        raise ApiError(status, text, type_, code=code, headers=wait)
    return fault


def book(state: ServerState, request: Request, req: ChatRequest, text: str) -> tuple[Booking, Reply]:
    """Check the request, draw its fault, and book its prompt in the model."""
    s = state.settings
    if req.model != s.model:
        raise ApiError(404, f"The model `{req.model}` does not exist.", param="model", code="model_not_found")
    tokens = tokenize(text)
    max_tokens = reply_length(req, s, len(tokens))
    fault = draw_fault(state.faults)
    session = request.headers.get("x-session-affinity") or req.user
    prompt = Prompt(len(tokens), block_keys(tokens, s.block_tokens), session)  # hashed once, on arrival
    intake: Admission = request.state.intake
    booking = state.model.book(prompt, max_tokens, intake.arrival, asyncio.get_running_loop().time())
    intake.admitted()  # booked: the next request may be admitted
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return booking, Reply(s.model, req.stream, include_usage, fault)


# ── The app ──────────────────────────────────────────────────────────────────


def create_app(settings: Settings | None = None) -> Intake:
    """Build the practice server's ASGI app (FastAPI behind the intake); `uvicorn` or a test serves it."""
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await warm_up(wrapped, settings.model)
        app.state.felab = ServerState.fresh(settings)  # forget the warm-up entirely
        yield

    app = FastAPI(
        title="felab practice server", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )
    app.state.felab = ServerState.fresh(replace(settings, fail_rate=0.0))  # the warm-up must not fail
    add_error_handlers(app)
    add_routes(app, settings)
    wrapped = Intake(app, settings.max_body_bytes)
    return wrapped


def add_error_handlers(app: FastAPI) -> None:
    """Every error in OpenAI's envelope: 400 for a bad body (not FastAPI's 422), 404/405 for routes."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(exc)
        return ApiError(400, message, param=param).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        text = {404: "Unknown route.", 405: "Method not allowed on this route."}
        return ApiError(exc.status_code, text.get(exc.status_code, str(exc.detail))).response()

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()


def add_routes(app: FastAPI, settings: Settings) -> None:
    def state() -> ServerState:
        return app.state.felab

    @app.get("/health")
    async def health() -> dict:
        # `server` and `pid` let a second `make mock` name this one and the command that stops it
        return {"status": "ok", "server": HEALTH_NAME, "pid": os.getpid()}

    @app.get("/v1/models")
    async def models() -> dict:
        entry = {"id": settings.model, "object": "model", "created": 0, "owned_by": "felab"}
        return {"object": "list", "data": [entry]}

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        s = state()
        page = metrics.render(
            s.model.fleet.replicas, settings.model, asyncio.get_running_loop().time(), s.faults.injected
        )
        return PlainTextResponse(page, media_type=metrics.CONTENT_TYPE)

    @app.post("/admin/reset")
    async def reset() -> dict:
        """Forget every cached block of every replica, as a restart would."""
        return {"cleared_blocks": state().model.reset_caches()}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request) -> Response:
        booking, reply = book(state(), request, req, chat_template(req.messages))
        if reply.stream:
            events = chat_events(state(), booking, reply)
            return StreamingResponse(events, media_type="text/event-stream", headers=headers_for(booking))
        return await chat_whole(state(), booking, reply, request)


async def warm_up(app: Any, model: str) -> None:
    """Send one tiny request through the app in-process before serving anyone.

    The first request through FastAPI does one-time work (imports, building
    validators) worth tens of milliseconds, which would land on the learner's
    first, cold call and inflate it. Real servers warm up too: vLLM and
    llama.cpp run a dummy batch before they accept traffic.
    """
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "warm up"}],
            "max_tokens": 1,
            "stream": True,
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
    }
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        return pending.pop() if pending else {"type": "http.disconnect"}

    async def send(_: dict) -> None:
        pass

    await app(scope, receive, send)
