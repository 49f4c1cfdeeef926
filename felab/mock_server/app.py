"""The practice server's HTTP layer: OpenAI's routes, translated to and from the booking core.

    python -m felab.mock_server            # or: make mock
    curl http://127.0.0.1:8765/v1/models

This module only translates: parse a request (wire.py), book it in the model
(booking.py), and write the reply at the booked times. What it models lives
elsewhere, each in one short place: the cache (cache.py), the timing
(timing.py), the replicas and routes (fleet.py), every default (config.py),
failures on purpose (faults.py), /metrics (metrics.py), and how a request
comes in (intake.py).

What it serves: `POST /v1/chat/completions` and `POST /v1/completions` (legacy
completions), streamed or not, through the same booking and the same reply code
(replies.py holds the two shapes); `GET /v1/models` and `GET /v1/models/{id}`;
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
import gc
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from felab.mock_server import metrics, room
from felab.mock_server.booking import Booking, PracticeModel, Prompt
from felab.mock_server.config import FLEET_ROLE_ENV, HEALTH_NAME, Settings
from felab.mock_server.faults import ERRORS, RETRY_AFTER_S, Faults, StreamCut
from felab.mock_server.intake import HANG_UP, Admission, HangUp, Intake, hang_up
from felab.mock_server.replies import CHAT, COMPLETION, DONE, Reply, Shape, reply_text
from felab.mock_server.room import TooLong, reply_room
from felab.mock_server.sse import EventStream, Piece
from felab.mock_server.tokens import counter_for
from felab.mock_server.twin import FIELD as TWIN_FIELD
from felab.mock_server.twin import Twin
from felab.mock_server.waits import OnTime, clock, sleep_until, wake_up
from felab.mock_server.wire import (
    ApiError,
    ChatRequest,
    CompletionRequest,
    Sampling,
    StreamOptions,
    invalid,
    parse,
    refuse,
)
from felab.mock_server.worker_api import worker_routes


@dataclass
class ServerState:
    """All mutable state, kept on the app (no module-level globals)."""

    settings: Settings
    model: PracticeModel
    faults: Faults
    waiting: dict[str, set[asyncio.Future[None]]] = field(default_factory=dict)
    """Per booking (its rid): the wake-ups of a request waiting for its first token, so that a
    cancel ahead of it can wake it early (the model says whose booked time moved up)."""
    on_time: OnTime = field(default_factory=OnTime)
    """Sends first tokens on time (waits.py)."""

    @classmethod
    def fresh(cls, s: Settings) -> ServerState:
        """Empty caches, idle lanes, zeroed counters, generators back at their seed."""
        return cls(s, PracticeModel(s), Faults(s.fail_rate, s.fail_types, s.seed))

    def __post_init__(self) -> None:
        self.model.on_moved = self.wake  # a hang-up, or a reply's end, moved these first tokens up

    def wake(self, bookings: list[Booking]) -> None:
        """Wake the waits of these bookings: they look at their booked time again."""
        for booking in bookings:
            for wake in self.waiting.get(booking.rid, ()):
                wake_up(wake)

    def cancel(self, booking: Booking, now: float) -> None:
        """A client hung up: the model gives back its lane time and wakes whoever moved up."""
        self.model.cancel(booking, now)


# ── Waiting for the booked times ─────────────────────────────────────────────

CLIENT_CLOSED = 499


async def until_first_token(state: ServerState, booking: Booking) -> None:
    """Wait for the booked first token, to a fraction of a millisecond (waits.OnTime); if a
    request ahead is cancelled, the time moves up and the wait is woken to look again."""
    await until_moved(state, booking, lambda: booking.first_token_at)


async def until_moved(state: ServerState, booking: Booking, due: Callable[[], float]) -> None:
    """Wait until the time `due()` says, looking again whenever the model says it moved up
    (`on_moved`: a hang-up ahead) or when the time comes and it has moved later."""
    waiting = state.waiting.setdefault(booking.rid, set())
    try:
        while clock() < due():
            # One future, set at the booked time or sooner by a cancel: no task per request, which
            # a burst of 64 arrivals would feel.
            wake = state.on_time.at(due())
            waiting.add(wake)
            try:
                await wake
            finally:
                waiting.discard(wake)
    finally:
        state.waiting.pop(booking.rid, None)


async def until_token(state: ServerState, booking: Booking, i: int) -> None:
    """Wait for reply token i's time. With batches (--batch-tokens) it is the end of a step its
    stream is in: a prompt that comes meanwhile may put a step before it (it moves later), and
    a hang-up may take one out (it moves up, and the model says so)."""
    if booking.follows_steps:
        await until_moved(state, booking, lambda: booking.token_at(i))
    else:
        await sleep_until(booking.token_at(i))


# ── Replies ──────────────────────────────────────────────────────────────────


async def stream_events(state: ServerState, booking: Booking, reply: Reply) -> AsyncGenerator[Piece, None]:
    """A streamed reply (chat or completion): one chunk per token at its time (chat's role chunk with
    the first), after the response's head, which goes out at once.

    Each chunk is built before its time comes, so that at its time it only has to be written.
    What is due at the same moment goes out in one piece: the last token, the usage chunk and
    `[DONE]`, with the end of the body (`more` False).
    """
    done, last = False, booking.reply_tokens - 1
    try:
        for i in range(booking.reply_tokens):
            piece = reply.token(booking, i)
            if i == 0:  # chat's role chunk comes with the first token, as llama.cpp and vLLM send it
                piece = (reply.opening(booking) or "") + piece
            if i == last:
                piece += (reply.usage(booking) if reply.include_usage else "") + DONE
            await (until_first_token(state, booking) if i == 0 else until_token(state, booking, i))
            if reply.fault == "cut" and i == booking.reply_tokens // 2:
                raise StreamCut(booking.rid)  # uvicorn closes the connection mid-body
            if i == last:
                state.model.finish(booking)  # every token sent: counted before [DONE] reaches the client
                done = True
            yield piece.encode(), i < last
    finally:  # also when the client goes away mid-reply: count only what it got
        if not done:
            state.cancel(booking, clock())


async def reply_due(state: ServerState, booking: Booking) -> None:
    """Wait until a whole reply is due: its last token's time, moved up if a request ahead hung up."""
    await until_first_token(state, booking)
    await until_token(state, booking, booking.reply_tokens - 1)


async def whole_reply(state: ServerState, booking: Booking, reply: Reply, request: Request) -> Response:
    """A reply in one piece, sent when its last token is due (499 if the client hung up first)."""
    gone = asyncio.get_running_loop().create_future()
    hang_up(request.scope).then(lambda: wake_up(gone))
    due = asyncio.ensure_future(reply_due(state, booking))
    try:
        await asyncio.wait({gone, due}, return_when=asyncio.FIRST_COMPLETED)
        hung = gone.done() and not due.done()
    finally:
        due.cancel()
    if hung:
        state.cancel(booking, clock())
        return Response(status_code=CLIENT_CLOSED)  # nobody reads it; nginx's code for this
    state.model.finish(booking)
    return JSONResponse(reply.whole(booking), headers=headers_for(booking))


# ── Booking a request ────────────────────────────────────────────────────────


def headers_for(booking: Booking) -> dict[str, str]:
    return {
        "x-felab-predicted-ttft-ms": f"{booking.ttft_s * 1000:.3f}",
        "x-felab-replica": str(booking.replica.index),
    }


def reply_length(req: Sampling, settings: Settings, prompt_tokens: int) -> int:
    """The reply's length in tokens; a 400 if prompt and reply do not fit the context (room.py)."""
    try:
        return reply_room(settings, prompt_tokens, req.reply_limit() or settings.default_max_tokens)
    except TooLong as exc:
        raise too_long(exc, req) from None


@dataclass
class SeatOverflow(ApiError):
    """llama.cpp's answer to a prompt longer than a seat, body and all (measured on a real build)."""

    n_prompt_tokens: int = 0
    n_ctx: int = 0

    def response(self) -> JSONResponse:
        error = {"code": self.status, "message": self.message, "type": self.type}
        error |= {"n_prompt_tokens": self.n_prompt_tokens, "n_ctx": self.n_ctx}
        return JSONResponse({"error": error}, status_code=self.status)


def too_long(exc: TooLong, req: Sampling) -> ApiError:
    """A refusal (room.py) as the modelled engine sends it: llama.cpp's body for a seat, else OpenAI's."""
    if exc.code == room.SEAT:
        return SeatOverflow(400, exc.message, exc.code, n_prompt_tokens=exc.prompt_tokens, n_ctx=exc.n_ctx)
    if exc.code == room.REPLY:
        field = "max_completion_tokens" if getattr(req, "max_completion_tokens", None) else "max_tokens"
        return invalid(field, exc.message)
    return ApiError(400, exc.message, param=req.prompt_field, code=exc.code)


def draw_fault(faults: Faults) -> str | None:
    """The failure this request gets on purpose (`--fail-rate`); an error reply is raised at once."""
    fault = faults.draw()
    if fault in ERRORS:
        status, text, type_, code = ERRORS[fault]
        wait = {"retry-after": str(RETRY_AFTER_S)} if status in (429, 503) else None
        raise ApiError(status, text, type_, code=code, headers=wait)
    return fault


def book(
    state: ServerState, request: Request, req: Sampling, text: str, shape: Shape
) -> tuple[Booking, Reply]:
    """Check the request, draw its fault, and book its prompt in the model (chat and completions alike)."""
    s = state.settings
    if req.model != s.model:
        raise unknown_model(req.model)
    refuse(req)
    tokens, keys = counter_for(s).keys(text, s.block_tokens)  # counted and hashed once, on arrival
    words, finish = reply_text(reply_length(req, s, tokens), req.stops())
    fault = draw_fault(state.faults)
    session = request.headers.get("x-session-affinity") or req.user
    prompt = Prompt(tokens, keys, session)
    intake: Admission = request.state.intake
    booking = state.model.book(prompt, len(words), intake.arrival, clock())
    intake.admitted()  # booked: the next request may be admitted
    usage = req.stream_options or StreamOptions()
    continuous = usage.include_usage and usage.continuous_usage_stats  # as vLLM: only with include_usage
    return booking, Reply(shape, s.model, words, finish, req.stream, usage.include_usage, continuous, fault)


async def answer(state: ServerState, request: Request, req: Sampling, text: str, shape: Shape) -> Response:
    """Book the request, then write its reply, streamed or whole, at the booked times."""
    booking, reply = book(state, request, req, text, shape)
    if reply.stream:
        return EventStream(stream_events(state, booking, reply), headers_for(booking))
    return await whole_reply(state, booking, reply, request)


def unknown_model(model: str) -> ApiError:
    return ApiError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")


def model_card(settings: Settings) -> dict[str, Any]:
    """The model object of `GET /v1/models` and `GET /v1/models/{id}`."""
    return {"id": settings.model, "object": "model", "created": 0, "owned_by": "felab"}


# ── The app ──────────────────────────────────────────────────────────────────


def create_app(settings: Settings | None = None, twin: Twin | None = None) -> Intake:
    """Build the practice server's ASGI app (Starlette behind the intake); `uvicorn` or a test serves it.
    `twin`: the profile it was started with, which /v1/models and /health report (twin.py)."""
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        await warm_up(wrapped, settings.model)
        app.state.felab = ServerState.fresh(settings)  # forget the warm-up entirely
        settle_heap()
        yield

    def state() -> ServerState:
        return app.state.felab

    endpoints = generating(state)
    app = Starlette(
        routes=routes(settings, state, endpoints), exception_handlers=ERROR_HANDLERS, lifespan=lifespan
    )
    app.state.felab = ServerState.fresh(replace(settings, fail_rate=0.0))  # the warm-up must not fail
    app.state.twin = twin
    wrapped = Intake(Shortcut(app, endpoints), settings.max_body_bytes, settings.request_timeout_s)
    return wrapped


async def api_error(_: Request, exc: Exception) -> Response:
    """An ApiError raised anywhere in a route goes out in OpenAI's envelope."""
    assert isinstance(exc, ApiError)
    return exc.response()


async def route_error(_: Request, exc: Exception) -> Response:
    """Unknown routes (404) and wrong methods (405), in OpenAI's envelope too."""
    assert isinstance(exc, HTTPException)
    text = {404: "Unknown route.", 405: "Method not allowed on this route."}
    return ApiError(exc.status_code, text.get(exc.status_code, str(exc.detail))).response()


ERROR_HANDLERS = {ApiError: api_error, HTTPException: route_error}


LOOPBACK = {"127.0.0.1", "localhost", "[::1]"}


def same_origin_only(request: Request) -> None:
    """A 403 for a request a web page sent: any web page the learner opens can POST to a local
    server (a "simple" request needs no permission), so an admin route takes requests with no
    Origin (curl, scripts) or from the server's own origin on a loopback name, as local dev
    servers do; the loopback check also stops a page whose name was rebound to 127.0.0.1."""
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if origin is None or (origin == f"http://{host}" and host.rsplit(":", 1)[0] in LOOPBACK):
        return
    here = "{}:{}".format(*(request.scope.get("server") or ("127.0.0.1", 8765)))  # the socket's own address
    raise ApiError(
        403,
        f"POST {request.url.path} is refused from a web page (Origin: {origin[:100]}). Send it from "
        f"a terminal: curl -X POST http://{here}{request.url.path}",
        code="forbidden_origin",
    )


Endpoint = Callable[[Request], Awaitable[Response]]


def generating(state: Callable[[], ServerState]) -> dict[str, Endpoint]:
    """The routes that generate, by path (POST): booked in the model (see `Shortcut`)."""

    async def chat(request: Request) -> Response:
        req = parse(ChatRequest, await request.body())
        return await answer(state(), request, req, req.prompt_text(), CHAT)

    async def completions(request: Request) -> Response:
        req = parse(CompletionRequest, await request.body())
        return await answer(state(), request, req, req.prompt_text(), COMPLETION)

    return {"/v1/chat/completions": chat, "/v1/completions": completions}


def routes(
    settings: Settings, state: Callable[[], ServerState], endpoints: dict[str, Endpoint]
) -> list[Route]:
    """The routes that generate (`endpoints`, booked in the model) and the ones that only read or
    reset. (Starlette serves a generating route only what `Shortcut` passes on: its 405s.)"""

    async def reset(request: Request) -> Response:
        """Forget every cached block of every replica, as a restart would (not from a web page)."""
        same_origin_only(request)
        return JSONResponse({"cleared_blocks": state().model.reset_caches()})

    return [
        *(Route(path, endpoint, methods=["POST"]) for path, endpoint in endpoints.items()),
        Route("/admin/reset", reset, methods=["POST"]),
        *info_routes(settings, state),
        *worker_routes(settings, state, same_origin_only),  # what routers ask of a worker
    ]


class Shortcut:
    """ASGI: a POST to a generating route goes straight to its endpoint; the rest through Starlette.

    Starlette's stack (two error middlewares, the router, the route, and an error wrapper
    around each `send`) costs each request a few dozen microseconds of Python, at 64 streams
    a good part of what makes a first token late (docs/benchmarks.md). The endpoints and
    their errors are the same either way: an ApiError goes out in OpenAI's envelope, and
    anything else reaches uvicorn, which answers 500 (as Starlette's ServerErrorMiddleware would).
    """

    def __init__(self, app: Starlette, endpoints: dict[str, Endpoint]) -> None:
        self.app, self.endpoints = app, endpoints

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        endpoint = self.endpoints.get(scope["path"]) if scope.get("method") == "POST" else None
        if endpoint is None:
            return await self.app(scope, receive, send)
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except ApiError as exc:
            response = exc.response()
        await response(scope, receive, send)


def twin_of(request: Request) -> dict[str, Any] | None:
    """The twin this server serves (create_app's `twin`, twin.py), as it reports it, or None."""
    served: Twin | None = getattr(request.app.state, "twin", None)
    return served.card() if served else None


def listed_card(settings: Settings, request: Request) -> dict[str, Any]:
    """The model object, with `felab_twin` when a twin serves it: its runs are recorded as the twin's."""
    twin = twin_of(request)
    return {**model_card(settings), **({TWIN_FIELD: twin} if twin else {})}


def info_routes(settings: Settings, state: Callable[[], ServerState]) -> list[Route]:
    """The routes that only read: health, the model (listed or looked up), and /metrics."""

    async def health(request: Request) -> Response:
        # `server` and `pid` let a second `make mock` name this one and the command that stops it;
        # `twin`, whether it is the one asked for (serve.py)
        health = {"status": "ok", "server": HEALTH_NAME, "pid": os.getpid()}
        fleet = {"fleet_role": role} if (role := os.environ.get(FLEET_ROLE_ENV)) else {}  # (`make fleet`)
        return JSONResponse({**health, **fleet, "twin": twin_of(request)})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [listed_card(settings, request)]})

    async def model(request: Request) -> Response:
        """One model, as the openai SDK's `models.retrieve` asks for it."""
        if request.path_params["model_id"] != settings.model:
            raise unknown_model(request.path_params["model_id"])
        return JSONResponse(listed_card(settings, request))

    def snapshot() -> metrics.Snapshot:
        s = state()
        now = clock()
        return metrics.Snapshot(s.model.fleet.replicas, s.faults.injected, now, s.model.in_flight())

    page = metrics.registry(settings.model, snapshot)  # this server's own registry

    async def prometheus(_: Request) -> Response:
        return Response(metrics.render(page), media_type=metrics.CONTENT_TYPE)

    return [
        Route("/props", seats_route(settings), methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/models/{model_id:path}", model, methods=["GET"]),  # an id may hold slashes (org/name)
        Route("/metrics", prometheus, methods=["GET"]),
    ]


def seats_route(settings: Settings) -> Callable[[Request], Any]:
    """With --seats, llama.cpp's `GET /props` as far as the kit reads it: the seats and each
    seat's context (context_fit.py works out its advice from them). Without seats: 404."""

    async def props(_: Request) -> Response:
        if settings.seats is None:
            raise ApiError(404, "Unknown route.")
        seat = {"n_ctx": settings.context_tokens // settings.seats}
        return JSONResponse(
            {"default_generation_settings": seat, "total_slots": settings.seats, "model_path": settings.model}
        )

    return props


async def warm_up(app: Any, model: str) -> None:
    """Send one tiny request to each generating route, in-process, before serving anyone.

    The first request through the app does one-time work (imports, building
    validators) worth tens of milliseconds, which would land on the learner's
    first, cold call and inflate it. Real servers warm up too: vLLM and
    llama.cpp run a dummy batch before they accept traffic.
    """
    common = {"model": model, "max_tokens": 1, "stream": True}
    await send_in_process(
        app, "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": "hi"}]}
    )
    await send_in_process(app, "/v1/completions", {**common, "prompt": "hi"})


def settle_heap() -> None:
    """Move everything built at start-up out of the garbage collector's sight (`gc.freeze()`),
    and let the youngest generation grow before it is collected.

    Python's collector now and then walks every object that survived two collections: with
    the libraries the server imports, about 70 ms here, a pause every request in flight
    would feel (the worst TTFT errors at 64 streams). What exists after the warm-up lives
    as long as the server, so it is frozen once; later walks see only newer objects. (No
    collection first: it would cost about 40 ms of start-up to free a few kilobytes.) A
    streamed request makes a few hundred objects, most gone by the end of its reply: with
    the default threshold (700) a young collection ran every few requests and walked the
    requests in flight each time; at 20,000, 64 streams cost 7% less CPU and their p99
    error was 15% lower (docs/benchmarks.md).
    """
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


async def send_in_process(app: Any, path: str, payload: dict[str, Any]) -> None:
    """POST a JSON body to the ASGI app directly (no socket) and drop the reply."""
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        "state": {HANG_UP: HangUp(gone=True)},  # gone at once: only the code paths are wanted
    }
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        return pending.pop() if pending else {"type": "http.disconnect"}

    async def send(_: dict) -> None:
        pass

    await app(scope, receive, send)
