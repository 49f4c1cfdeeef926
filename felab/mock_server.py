"""The practice server: an OpenAI-compatible server that behaves like a real one, offline.

    python -m felab.mock_server            # or: make mock
    curl http://127.0.0.1:8765/v1/models

What it models, each in one short place:
- the prefix cache: felab/prefix_cache.py (`PrefixCache.uncached_tokens()`);
- the timing: felab/timing.py (overhead + prefill of the uncached tokens, then decode);
- replicas behind one address and how a request picks one: felab/fleet.py;
- the counters of `GET /metrics`, with vLLM's names: felab/metrics.py;
- failures on purpose (429, 503, 500, a cut stream): felab/faults.py;
- OpenAI's requests and error envelope: felab/openai_wire.py; how a request comes in
  (arrival time, body limit, admission): felab/intake.py.

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
import itertools
import json
import logging
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import click
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from felab import metrics
from felab.faults import ERRORS, FAULT_TYPES, RETRY_AFTER_S, Faults, HideStreamCuts, StreamCut
from felab.fleet import ROUTES, Fleet
from felab.intake import Intake
from felab.openai_wire import ApiError, ChatRequest, chat_template, validation_message
from felab.prefix_cache import block_keys, tokenize
from felab.timing import TimingModel

DEFAULT_PORT = 8765
MODEL_ID = "felab-practice"


@dataclass(frozen=True)
class Settings:
    """Everything the practice server can be told (each is a flag of `python -m felab.mock_server`)."""

    model: str = MODEL_ID
    timing: TimingModel = field(default_factory=TimingModel)
    cache_blocks: int = 4096
    context_tokens: int = 131_072
    max_body_bytes: int = 8 * 1024 * 1024
    default_max_tokens: int = 16
    replicas: int = 1
    route: str = "affinity"
    cache_ttl_s: float | None = None
    fail_rate: float = 0.0
    fail_types: tuple[str, ...] = FAULT_TYPES
    seed: int = 0


# ── The server ───────────────────────────────────────────────────────────────


@dataclass
class ServerState:
    """All mutable state, kept on the app (no module-level globals)."""

    settings: Settings
    fleet: Fleet
    faults: Faults
    ids: itertools.count = field(default_factory=itertools.count)

    @classmethod
    def fresh(cls, s: Settings) -> ServerState:
        """Empty caches, idle lanes, zeroed counters, generators back at their seed."""
        return cls(
            s,
            Fleet(s.replicas, s.route, s.cache_blocks, s.cache_ttl_s, s.timing, s.seed),
            Faults(s.fail_rate, s.fail_types, s.seed),
        )


WORDS = ("This", " is", " the", " practice", " server", " answering", " with", " placeholder", " words", ".")


def reply_tokens(n: int) -> list[str]:
    """The generated text: placeholder words, one token each (the practice server has no model)."""
    return [WORDS[i % len(WORDS)] for i in range(n)]


PRECISE_S = 0.002


async def sleep_until(loop: asyncio.AbstractEventLoop, deadline: float, precise: bool = False) -> None:
    """Sleep until `deadline` (loop time).

    asyncio wakes a timer up to about 1 ms late (the kernel call takes whole
    milliseconds). For the first token, whose time the client measures, a
    `precise` sleep stops PRECISE_S early and then yields to the event loop
    until the deadline has passed. Later tokens do not spin: that would cost
    CPU on every token for no visible gain.
    """
    delay = deadline - loop.time() - (PRECISE_S if precise else 0.0)
    if delay > 0:
        await asyncio.sleep(delay)
    while precise and loop.time() < deadline:
        await asyncio.sleep(0)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the practice server's app; `uvicorn` or a test serves it."""
    settings = settings or Settings()
    state = ServerState.fresh(replace(settings, fail_rate=0.0))  # for the warm-up, which must not fail

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await warm_up(wrapped, settings.model)
        app.state.felab = ServerState.fresh(settings)  # forget the warm-up entirely
        yield

    app = FastAPI(
        title="felab practice server", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan
    )
    app.state.felab = state

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(exc)
        return ApiError(400, message, param=param).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        text = {404: "Unknown route.", 405: "Method not allowed on this route."}.get(
            exc.status_code, str(exc.detail)
        )
        return ApiError(exc.status_code, text).response()

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict:
        entry = {"id": settings.model, "object": "model", "created": 0, "owned_by": "felab"}
        return {"object": "list", "data": [entry]}

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        state = app.state.felab
        page = metrics.render(
            state.fleet.replicas,
            settings.model,
            asyncio.get_running_loop().time(),
            state.faults.injected,
        )
        return PlainTextResponse(page, media_type=metrics.CONTENT_TYPE)

    @app.post("/admin/reset")
    async def reset() -> dict:
        """Forget every cached block of every replica, as a restart would."""
        caches = [r.cache for r in app.state.felab.fleet.replicas]
        cleared = sum(len(c) for c in caches)
        for c in caches:
            c.clear()
        return {"cleared_blocks": cleared}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request) -> Any:
        if req.model != settings.model:
            raise ApiError(
                404, f"The model `{req.model}` does not exist.", param="model", code="model_not_found"
            )
        tokens = tokenize(chat_template(req.messages))
        max_tokens = req.max_completion_tokens or req.max_tokens or settings.default_max_tokens
        if len(tokens) + max_tokens > settings.context_tokens:
            message = (
                f"This model's maximum context length is {settings.context_tokens} tokens; "
                f"the request has {len(tokens)} prompt tokens and asks for {max_tokens} more."
            )
            raise ApiError(400, message, param="messages", code="context_length_exceeded")

        state: ServerState = app.state.felab
        fault = state.faults.draw()
        if fault in ERRORS:
            status, text, type_, code = ERRORS[fault]
            wait = {"retry-after": str(RETRY_AFTER_S)} if status in (429, 503) else None
            raise ApiError(status, text, type_, code=code, headers=wait)

        loop = asyncio.get_running_loop()
        arrival = request.scope.get("felab_arrival", loop.time())
        session = request.headers.get("x-session-affinity") or req.user
        keys = block_keys(tokens)  # hashed once, on arrival; routing, lookup and insert share them
        replica = state.fleet.pick(tokens, session, arrival, keys)
        uncached = replica.cache.uncached_tokens(tokens, keys)
        prefill_start, first_token_at = replica.lane.schedule(arrival, settings.timing, uncached)
        # Safe at arrival: the FIFO lane prefills earlier prompts first. Used until its prefill ends.
        replica.cache.insert(tokens, used_at=first_token_at, keys=keys)
        rid, created = f"chatcmpl-felab-{next(state.ids)}", int(time.time())
        replica.stats.admit(
            rid, len(tokens), len(tokens) - uncached, max_tokens, prefill_start, first_token_at - arrival
        )
        request.scope.get("felab_admitted", lambda: None)()  # booked: the next request may be admitted
        usage = {
            "prompt_tokens": len(tokens),
            "completion_tokens": max_tokens,
            "total_tokens": len(tokens) + max_tokens,
            "prompt_tokens_details": {"cached_tokens": len(tokens) - uncached},
        }
        words = reply_tokens(max_tokens)
        interval = settings.timing.token_interval_s()
        headers = {
            "x-felab-predicted-ttft-ms": f"{(first_token_at - arrival) * 1000:.3f}",
            "x-felab-replica": str(replica.index),
        }

        if not req.stream:
            try:
                await sleep_until(loop, first_token_at + interval * (max_tokens - 1))
            finally:
                replica.stats.done(rid)
            message = {"role": "assistant", "content": "".join(words)}
            body = {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": settings.model,
                "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
                "usage": usage,
            }
            return JSONResponse(body, headers=headers)

        def frame(**fields: Any) -> str:
            """One server-sent event: a `chat.completion.chunk` with these fields."""
            data = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": settings.model}
            return f"data: {json.dumps({**data, **fields})}\n\n"

        def chunk(delta: dict, finish: str | None = None) -> str:
            return frame(choices=[{"index": 0, "delta": delta, "finish_reason": finish}])

        async def events() -> AsyncIterator[str]:
            try:
                async for event in stream():
                    yield event
            finally:  # also when the client goes away mid-reply
                replica.stats.done(rid)

        async def stream() -> AsyncIterator[str]:
            # The role arrives at once, as on many servers; a TTFT taken at the first
            # chunk of any kind would read ~0 ms here. felab waits for content.
            yield chunk({"role": "assistant", "content": ""})
            for i, word in enumerate(words):
                await sleep_until(loop, first_token_at + i * interval, precise=i == 0)
                if fault == "cut" and i == len(words) // 2:
                    raise StreamCut(rid)  # uvicorn closes the connection mid-body
                yield chunk({"content": word}, "length" if i == len(words) - 1 else None)
            if req.stream_options and req.stream_options.include_usage:
                yield frame(choices=[], usage=usage)  # the usage comes last, with no choices
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    wrapped = Intake(app, settings.max_body_bytes)
    return wrapped  # type: ignore[return-value]


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


# ── Command line ─────────────────────────────────────────────────────────────


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=DEFAULT_PORT, show_default=True, help="port to listen on")
@click.option("--model", default=MODEL_ID, show_default=True, help="the model id it serves")
@click.option("--overhead-ms", default=15.0, show_default=True, help="fixed cost of every request, ms")
@click.option(
    "--prefill-tps", default=2500.0, show_default=True, help="prefill rate, prompt tokens per second"
)
@click.option(
    "--decode-tps", default=400.0, show_default=True, help="decode rate per stream, tokens per second"
)
@click.option(
    "--cache-blocks",
    default=4096,
    show_default=True,
    help="prefix-cache capacity in 64-token blocks (least recently used evicted)",
)
@click.option("--context-tokens", default=131_072, show_default=True, help="largest prompt + reply, tokens")
@click.option(
    "--replicas",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="copies behind this one address, each with its own cache and prefill lane",
)
@click.option(
    "--route",
    default="affinity",
    show_default=True,
    type=click.Choice(ROUTES),
    help="how a request picks a replica (affinity: by x-session-affinity or user, else random)",
)
@click.option(
    "--cache-ttl",
    type=click.FloatRange(min=0, min_open=True),
    help="seconds a cached block may stay unused before it expires [default: never]",
)
@click.option(
    "--fail-rate",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="share of valid chat requests that fail on purpose (0.05 = 5%)",
)
@click.option(
    "--fail-types",
    default=",".join(FAULT_TYPES),
    show_default=True,
    help="which failures --fail-rate injects, comma-separated: 429, 503, 500, cut (a stream cut mid-way)",
)
@click.option("--seed", default=0, show_default=True, help="seed for random routing and failure draws")
def main(
    host: str,
    port: int,
    model: str,
    overhead_ms: float,
    prefill_tps: float,
    decode_tps: float,
    cache_blocks: int,
    context_tokens: int,
    replicas: int,
    route: str,
    cache_ttl: float | None,
    fail_rate: float,
    fail_types: str,
    seed: int,
) -> None:
    """The practice server: an OpenAI-compatible server with a prefix cache, offline.

    \b
    Examples:
      python -m felab.mock_server
      python -m felab.mock_server --port 9000 --prefill-tps 1050
      python -m felab.mock_server --replicas 18 --route affinity --cache-ttl 60
      python -m felab.mock_server --fail-rate 0.1 --fail-types 429,cut --seed 7
      curl -X POST http://127.0.0.1:8765/admin/reset     # empty its cache
      curl http://127.0.0.1:8765/metrics                 # counters, with vLLM's names
    """
    import uvicorn

    if overhead_ms < 0 or prefill_tps <= 0 or decode_tps <= 0 or cache_blocks < 0:
        raise click.BadParameter("rates must be above 0, overhead and cache size 0 or more")
    if not port_is_free(host, port):
        raise click.ClickException(
            f"port {port} on {host} is in use: a practice server may already be running (`make check` "
            f"shows it; stop it with `pkill -f felab.mock_server`), or pass another --port."
        )
    kinds = tuple(k.strip() for k in fail_types.split(",") if k.strip())
    if not kinds or set(kinds) - set(FAULT_TYPES):
        hint = f"use some of {', '.join(FAULT_TYPES)}, comma-separated"
        raise click.BadParameter(hint, param_hint="--fail-types")
    timing = TimingModel(overhead_ms, prefill_tps, decode_tps)
    settings = Settings(
        model=model,
        timing=timing,
        cache_blocks=cache_blocks,
        context_tokens=context_tokens,
        replicas=replicas,
        route=route,
        cache_ttl_s=cache_ttl,
        fail_rate=fail_rate,
        fail_types=kinds,
        seed=seed,
    )
    fleet = f" · {replicas} replicas, route {route}" if replicas > 1 else ""
    ttl = f" · cache TTL {cache_ttl:g} s" if cache_ttl else ""
    faults = f" · failing {fail_rate:.0%} ({', '.join(kinds)}, seed {seed})" if fail_rate else ""
    print(
        f"practice server listening on http://{host}:{port}/v1 · model {model} · "
        f"prefill {prefill_tps:g} tok/s · decode {decode_tps:g} tok/s{fleet}{ttl}{faults} · Ctrl+C stops it",
        flush=True,
    )
    config = uvicorn.Config(create_app(settings), host=host, port=port, log_level="warning", access_log=False)
    logging.getLogger("uvicorn.error").addFilter(HideStreamCuts())  # after Config has set up logging
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
