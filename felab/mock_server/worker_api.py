"""The routes a router calls on its workers: the practice server as a worker real routers understand.

A router in front of several servers (SGLang's `sglang-router`, vLLM's `vllm-router`) does not
only forward OpenAI requests. It asks each worker what it serves, how loaded it is, and may
tell it to empty its cache. These are the calls, as the routers' source makes them
(sgl-project/sglang `sgl-model-gateway/src/core/`, and vllm-project/router, recorded here
on loopback from the installed binaries):

    GET  /health                   every router, at start and every interval: any 2xx is healthy
                                   (app.py's own route)
    GET  /server_info              sglang-router's discovery: the model id is `served_model_name`,
    GET  /get_server_info            else `model_path`, else "unknown" (SGLang's older name too)
    GET  /model_info               sglang-router's discovery: `model_type`, `architectures`
    GET  /get_model_info             (SGLang's older name)
    GET  /get_load                 sglang-router's load monitor (power_of_two, and its
                                   /get_loads): a list, one entry per data-parallel rank,
                                   `{dp_rank, num_reqs, num_waiting_reqs, num_tokens}`; the
                                   router sums `num_tokens`
    GET  /health_generate          SGLang's deeper health check: 200 when a generation can run
    POST /flush_cache              sglang-router's /flush_cache, sent to every worker: the
                                   prefix caches emptied, as `POST /admin/reset` does
    POST /v1/chat/completions/render   vllm-router asks before routing: the prompt's token ids
    POST /v1/completions/render        (vLLM's render server answers `token_ids`)

The practice server has no weights, so `model_path` is null: the router then names the model
by `served_model_name` and, finding no path, loads no tokenizer (a path would send it to
Hugging Face for one, off this machine). Each replica of `--replicas` is a rank of `/get_load`.

One more call is not HTTP/1.1 at all: sglang-router probes every worker for gRPC (HTTP/2 with
prior knowledge) while it checks /health; h2_probe.py answers that probe.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from felab.mock_server.booking import PracticeModel
from felab.mock_server.cache import tokenize
from felab.mock_server.config import Settings
from felab.mock_server.waits import clock
from felab.mock_server.wire import ChatRequest, CompletionRequest, parse

VOCAB = 32_000
"""Token ids of the toy tokenizer are its pieces' CRC-32 modulo a Llama-sized vocabulary: equal
text, equal ids, which is all a prefix-aware router needs of them."""


class HasModel(Protocol):
    model: PracticeModel


def server_info(settings: Settings) -> dict[str, Any]:
    """What sglang-router reads from `/server_info` (SGLang answers its whole ServerArgs; these are
    the fields the router parses)."""
    return {
        "served_model_name": settings.model,
        "model_path": None,  # no weights; a path would make the router fetch a tokenizer for it
        "tokenizer_path": None,
        "dp_size": 1,  # the replicas are ranks of /get_load, behind one HTTP server
        "max_running_requests": settings.seats,
        "max_total_tokens": settings.context_tokens,
        "version": "felab practice server",
    }


def model_info(settings: Settings) -> dict[str, Any]:
    """What sglang-router reads from `/model_info` (SGLang's ModelInfo)."""
    return {
        "model_path": None,
        "tokenizer_path": None,
        "is_generation": True,
        "model_type": None,
        "architectures": None,
        "served_model_name": settings.model,
    }


def loads(model: PracticeModel, now: float) -> list[dict[str, int]]:
    """`/get_load`: per replica (a data-parallel rank), the requests it serves now, those of them
    still waiting for their prefill, and the prompt and reply tokens they hold."""
    rows = []
    for r in model.fleet.replicas:
        mine = [b for b in model.live.values() if b.replica is r]
        rows.append(
            {
                "dp_rank": r.index,
                "num_reqs": len(mine),
                "num_waiting_reqs": sum(b.prefill.start > now for b in mine),
                "num_tokens": r.active_tokens,
            }
        )
    return rows


def token_ids(text: str, chars_per_token: float) -> list[int]:
    """The prompt's token ids as the practice server counts its tokens (cache.tokenize)."""
    return [zlib.crc32(piece.encode()) % VOCAB for piece in tokenize(text, chars_per_token)]


def worker_routes(
    settings: Settings, state: Callable[[], HasModel], local_only: Callable[[Request], None]
) -> list[Route]:
    """The routes above, for app.py's route table; `local_only` refuses a POST sent by a web page
    (app.same_origin_only), as for `POST /admin/reset`."""

    async def info(_: Request) -> Response:
        return JSONResponse(server_info(settings))

    async def model(_: Request) -> Response:
        return JSONResponse(model_info(settings))

    async def get_load(_: Request) -> Response:
        return JSONResponse(loads(state().model, clock()))

    async def health_generate(_: Request) -> Response:
        return Response(status_code=200)

    async def flush_cache(request: Request) -> Response:
        local_only(request)
        cleared = state().model.reset_caches()
        return PlainTextResponse(f"Cache flushed. {cleared} blocks cleared.\n")

    return [
        *(Route(path, info, methods=["GET"]) for path in ("/server_info", "/get_server_info")),
        *(Route(path, model, methods=["GET"]) for path in ("/model_info", "/get_model_info")),
        Route("/get_load", get_load, methods=["GET"]),
        Route("/health_generate", health_generate, methods=["GET"]),
        Route("/flush_cache", flush_cache, methods=["POST"]),
        *render_routes(settings),
    ]


def render_routes(settings: Settings) -> list[Route]:
    """vLLM's render: a prompt's token ids, what vllm-router asks a worker before it routes."""

    async def render(request: Request, kind: type[ChatRequest | CompletionRequest]) -> Response:
        raw = await request.body()
        try:  # a router renders before it knows the model: the one served here
            fields = json.loads(raw)
            if isinstance(fields, dict) and "model" not in fields:
                raw = json.dumps({**fields, "model": settings.model}).encode()
        except ValueError:
            pass  # parse() answers it in OpenAI's envelope
        ids = token_ids(parse(kind, raw).prompt_text(), settings.chars_per_token)
        return JSONResponse({"model": settings.model, "token_ids": ids})

    async def render_chat(request: Request) -> Response:
        return await render(request, ChatRequest)

    async def render_completion(request: Request) -> Response:
        return await render(request, CompletionRequest)

    return [
        Route("/v1/chat/completions/render", render_chat, methods=["POST"]),
        Route("/v1/completions/render", render_completion, methods=["POST"]),
    ]
