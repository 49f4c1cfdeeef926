"""A stand-in for llama.cpp's `llama-server`, speaking its wire format on loopback.

It answers as a real llama-server does in the situations the kit must handle:
- `mode="too-small"`: a chat request over the seat's context (`n_ctx`, 2,048 by default)
  gets HTTP 400 with llama.cpp's `exceed_context_size_error` body (measured on a real
  build); `GET /props` names its seats (`total_slots`), the seat's `n_ctx` and its
  `model_path`, as llama-server's does (or 404, as a proxy in front of it might);
- `mode="old-usage"`: streams that report cached tokens only in `timings.cache_n`
  (builds before Feb 2026), not in `usage.prompt_tokens_details`;
- `mode="reasoning"`: a reasoning model that thinks first (`delta.reasoning_content`,
  as llama.cpp, vLLM and Fireworks send it), then answers 0.5 s later.

And as a broken server (or something posing as one) does, for the kit's limits (felab/guarded.py):
- `mode="endless-props"` / `"endless-models"`: `GET /props` / `GET /v1/models` answers 200 with
  JSON that never ends (no Content-Length, 64 kB after 64 kB until the client hangs up);
- `mode="trickle"`: a chat stream whose headers and first event come at once, then one byte a
  second of the next event, which never ends;
- `mode="endless-stream"`: a chat stream of well-formed tokens, one every 20 ms, without end.

Modes combine with `+`: `"too-small+endless-props"` refuses a long prompt, then sends a
`/props` without end to the kit that reads it for the restart that fits.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fake_http import JSONHandler

MODEL_PATH = "/models/practice.gguf"


@dataclass(frozen=True)
class Seats:
    """How the fake llama-server was started: seats, each seat's context, its model file, and
    how many characters its tokenizer makes a token (4 for English; fewer for some models)."""

    n_ctx: int = 2048
    slots: int = 4
    model_path: str = MODEL_PATH
    chars_per_token: float = 4.0
    props: bool = True


def _handler(mode: str, seats: Seats = Seats()) -> type[BaseHTTPRequestHandler]:
    modes = set(mode.split("+"))

    class Handler(JSONHandler):
        content_type = "application/json; charset=utf-8"

        def _endless(self, content_type: str, opening: bytes, piece: bytes, every_s: float) -> None:
            """A 200 whose body never ends (close-delimited, HTTP/1.0): `opening`, then `piece`
            every `every_s` seconds until the client hangs up or the fake stops."""
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.end_headers()
            try:
                self.wfile.write(opening)
                self.wfile.flush()
                while not stopping.is_set():
                    self.wfile.write(piece)
                    self.wfile.flush()
                    stopping.wait(every_s)
            except OSError:  # the client hung up: what the kit should do
                pass

        def do_GET(self) -> None:
            if {"/props": "endless-props", "/v1/models": "endless-models"}.get(self.path) in modes:
                self._endless("application/json", b'{"data": [{"id": "', b"x" * 65536, 0)
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": MODEL_PATH, "object": "model"}]})
            elif self.path == "/props" and seats.props:
                self._json(
                    200,
                    {
                        "default_generation_settings": {"n_ctx": seats.n_ctx},
                        "total_slots": seats.slots,
                        "model_path": seats.model_path,
                        "build_info": "b0000-fake",
                    },
                )
            elif self.path == "/health":
                self._json(200, {"status": "ok"})
            else:
                self._json(
                    404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
                )

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            n_prompt = int(sum(len(m["content"]) for m in body["messages"]) / seats.chars_per_token)
            if "too-small" in modes and n_prompt > seats.n_ctx:
                self._json(
                    400,
                    {
                        "error": {
                            "code": 400,
                            "message": f"request ({n_prompt} tokens) exceeds the available context size "
                            f"({seats.n_ctx} tokens), try increasing it",
                            "type": "exceed_context_size_error",
                            "n_prompt_tokens": n_prompt,
                            "n_ctx": seats.n_ctx,
                        }
                    },
                )
                return
            if "trickle" in modes:
                first = sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
                return self._endless("text/event-stream", first, b"d", 1.0)
            if "endless-stream" in modes:
                token = sse({"choices": [{"index": 0, "delta": {"content": "la"}}]})
                return self._endless("text/event-stream", b"", token, 0.02)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            if "reasoning" in modes:
                think = {"choices": [{"index": 0, "delta": {"reasoning_content": "Let me think."}}]}
                think.update({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 0})
                self.wfile.write(f"data: {json.dumps(think)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.5)
            chunks = [
                {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]},
                {"choices": [{"index": 0, "delta": {"content": "Hi"}}]},
                {
                    "choices": [{"index": 0, "delta": {"content": " there"}, "finish_reason": "length"}],
                    "usage": {
                        "prompt_tokens": n_prompt,
                        "completion_tokens": 2,
                        "total_tokens": n_prompt + 2,
                    },
                    "timings": {"cache_n": n_prompt - 7, "prompt_n": 7, "predicted_n": 2},
                },
            ]
            for c in chunks:
                c.update(
                    {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 0, "model": MODEL_PATH}
                )
                self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

    return Handler


def sse(chunk: dict[str, Any]) -> bytes:
    """One chat chunk as an SSE event, with the fields every chunk carries."""
    chunk = {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL_PATH,
        **chunk,
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()


stopping = threading.Event()
"""Set while a fake stops: its endless replies end (each fake clears it as it starts)."""


@contextmanager
def fake_llamacpp(mode: str, seats: Seats = Seats()) -> Iterator[str]:
    """Serve the fake on a free loopback port; yield its base URL (…/v1)."""
    stopping.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(mode, seats))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        stopping.set()
        server.shutdown()
        server.server_close()
