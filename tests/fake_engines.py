"""Stand-ins for vLLM, SGLang and Ollama answering a prompt longer than their context, and for
mlx_lm.server's list of models.

Each of the first answers `GET /v1/models` with one model and every chat request with the HTTP
400 body that engine sends (the wording of their sources: vLLM's `VLLMValidationError` since 0.11
and its older `create_error_response`, SGLang's `validate_input_length`, Ollama's OpenAI layer),
and Ollama's `GET /api/ps` with the context it runs. `fake_mlx` answers `GET /v1/models` as
mlx_lm.server 0.32 does (server.py, `handle_models_request`): every model repo in the Hugging
Face cache, then the folder it loaded, by its full path; anything else 404 (no `GET /props`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fake_http import JSONHandler

VLLM = {
    "error": {
        "message": "This model's maximum context length is 2048 tokens. However, you requested 48 output "
        "tokens and your prompt contains 3052 input tokens, for a total of 3100 tokens. Please reduce "
        "the length of the input prompt or the number of requested output tokens. "
        "(parameter=input_tokens, value=3052)",
        "type": "BadRequestError",
        "param": "input_tokens",
        "code": 400,
    }
}
VLLM_AT_LEAST = {
    "error": {
        "message": "This model's maximum context length is 2048 tokens. However, you requested 48 output "
        "tokens and your prompt contains at least 2001 input tokens, for a total of at least 2049 "
        "tokens. Please reduce the length of the input prompt or the number of requested output "
        "tokens. (parameter=input_tokens, value=2001)",
        "type": "BadRequestError",
        "param": "input_tokens",
        "code": 400,
    }
}
VLLM_OLD = {
    "object": "error",
    "message": "This model's maximum context length is 2048 tokens. However, you requested 3100 tokens "
    "(3052 in the messages, 48 in the completion). Please reduce the length of the messages or completion.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
SGLANG = {
    "object": "error",
    "message": "Input length (3052 tokens) exceeds the maximum allowed length (2048 tokens). Use a shorter "
    "input or enable --allow-auto-truncate.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
OLLAMA = {
    "error": {
        "message": "the input length exceeds the context length",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
}
BODIES = {
    "vllm": VLLM,
    "vllm-at-least": VLLM_AT_LEAST,
    "vllm-old": VLLM_OLD,
    "sglang": SGLANG,
    "ollama": OLLAMA,
}


def _handler(engine: str, model: str) -> type[BaseHTTPRequestHandler]:
    class Handler(JSONHandler):
        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
            elif self.path == "/api/ps" and engine == "ollama":
                self._json(200, {"models": [{"name": model, "model": model, "context_length": 2048}]})
            else:
                self._json(404, {"error": {"message": "not found", "type": "not_found_error"}})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self._json(400, BODIES[engine])

    return Handler


def _mlx_handler(ids: list[str]) -> type[BaseHTTPRequestHandler]:
    listed = {"object": "list", "data": [{"id": i, "object": "model", "created": 0} for i in ids]}

    class Handler(JSONHandler):
        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._json(200, listed)
            else:
                self.send_response(404)
                self.end_headers()

    return Handler


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve `handler` on a free loopback port; yield its …/v1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def fake_engine(engine: str, model: str = "meta-llama/Llama-3.1-8B-Instruct") -> Iterator[str]:
    """Serve the stand-in for `engine` (a key of BODIES) on a free loopback port; yield its …/v1."""
    with _serving(_handler(engine, model)) as url:
        yield url


@contextmanager
def fake_mlx(ids: list[str]) -> Iterator[str]:
    """Serve mlx_lm.server's `GET /v1/models`, listing `ids` in that order; yield its …/v1."""
    with _serving(_mlx_handler(ids)) as url:
        yield url
