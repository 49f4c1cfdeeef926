"""A stand-in for llama.cpp's `llama-server` whose replies take time, for calibrate end to end.

It speaks llama-server's wire format on loopback (`GET /props` with its seats and context,
`/v1/models`, streamed chat completions ending in a chunk with `usage` and `timings`), and
takes the time a simple engine would: a fixed overhead, then `ms_per_token` for each prompt
token it has not seen (the longest common prefix with the prompts it served before, in
characters, is its cache, as llama.cpp's seats keep theirs), then a short wait per reply
token. What calibrate must survive is set on purpose, never left to the machine's speed:

- `empty_every`: every n-th request's reply carries no text (a role chunk, then the finish
  with one completion token), as a tiny model that ends at once (its end-of-text first) does,
  unless the request says `ignore_eos` (llama-server's field);
- `blank_every`: every n-th request's reply is its full length of tokens with empty content;
- `slow_every`: every n-th request takes `slow_factor` times as long (a busy machine);
- `slow_from`: from the n-th request on, every one takes `slow_factor` times as long (a machine
  that slowed while calibrate measured);
- `ms_per_token` below 0: longer prompts answer sooner (no rate any engine has);
- `lie_at`, `lie`: the n-th request's `usage` has these fields replaced (a lying server);
- `fail_at`: these requests get HTTP 503 (a server that fails in passing).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fake_http import JSONHandler

MODEL_PATH = "/models/tiny-other.gguf"


@dataclass
class Engine:
    """How the fake behaves (see the module's docstring); `posts` counts the chat requests."""

    overhead_ms: float = 15.0
    ms_per_token: float = 0.05
    """20,000 prompt tokens a second."""
    decode_ms: float = 1.0
    chars_per_token: float = 4.0
    n_ctx: int = 2048
    slots: int = 4
    empty_every: int | None = None
    blank_every: int | None = None
    ignore_eos_asked: int = 0
    """Requests that asked for their whole length (`ignore_eos`)."""
    empties_sent: int = 0
    """Replies that ended at once, with no text."""
    slow_every: int | None = None
    slow_factor: float = 4.0
    slow_from: int | None = None
    lie_at: int | None = None
    lie: dict[str, Any] = field(default_factory=dict)
    fail_at: frozenset[int] = frozenset()
    """Requests (by number) answered with HTTP 503, llama-server's "loading model" answer."""
    posts: int = 0
    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, text: str) -> tuple[int, int, int]:
        """This request's number (from 1), its prompt tokens and the tokens found cached."""
        with self.lock:
            self.posts += 1
            common = max((len(os.path.commonprefix([text, s])) for s in self.seen), default=0)
            self.seen = [*self.seen[-7:], text]
            n = self.posts
        prompt = max(1, int(len(text) / self.chars_per_token))
        cached = min(prompt - 1, int(common / self.chars_per_token))
        return n, prompt, cached


def _chunk(delta: dict, **more: Any) -> bytes:
    body = {"id": "chatcmpl-t", "object": "chat.completion.chunk", "created": 0, "model": MODEL_PATH}
    body["choices"] = [{"index": 0, "delta": delta, "finish_reason": more.pop("finish", None)}]
    body.update(more)
    return f"data: {json.dumps(body)}\n\n".encode()


def _handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(JSONHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": MODEL_PATH, "object": "model"}]})
            elif self.path == "/props":
                settings = {"n_ctx": engine.n_ctx}
                self._json(
                    200,
                    {
                        "default_generation_settings": settings,
                        "total_slots": engine.slots,
                        "model_path": MODEL_PATH,
                        "build_info": "b0001-fake-timed",
                    },
                )
            elif self.path == "/health":
                self._json(200, {"status": "ok"})
            else:
                self._json(
                    404, {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
                )

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in body["messages"])
            n, prompt, cached = engine.admit(text)
            if n in engine.fail_at:
                self._json(
                    503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
                )
                return
            wait = engine.overhead_ms + (prompt - cached) * engine.ms_per_token
            if (engine.slow_every and n % engine.slow_every == 0) or (
                engine.slow_from and n >= engine.slow_from
            ):
                wait *= engine.slow_factor
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(_chunk({"role": "assistant", "content": None}))
            self.wfile.flush()
            time.sleep(max(wait, 1.0) / 1000)
            replies = min(int(body.get("max_tokens") or 16), 48)
            empty = bool(engine.empty_every and n % engine.empty_every == 0)
            empty = empty and not body.get("ignore_eos")  # llama-server's own field: no early end
            engine.ignore_eos_asked += bool(body.get("ignore_eos"))
            engine.empties_sent += empty
            if empty:  # its end-of-text first: one token, no text, the finish (as llama-server ends)
                replies = 1
            for i in range(0 if empty else replies):
                if i:
                    time.sleep(engine.decode_ms / 1000)
                blank = bool(engine.blank_every and n % engine.blank_every == 0)
                self.wfile.write(_chunk({"content": "" if blank else f"w{i} "}))
                self.wfile.flush()
            usage = {"prompt_tokens": prompt, "completion_tokens": replies, "total_tokens": prompt + replies}
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
            if engine.lie_at == n:
                usage.update(engine.lie)
            timings = {"cache_n": cached, "prompt_n": prompt - cached, "predicted_n": replies}
            finish = "stop" if empty else "length"
            self.wfile.write(_chunk({}, finish=finish, usage=usage, timings=timings))
            self.wfile.write(b"data: [DONE]\n\n")

    return Handler


@contextmanager
def fake_timed_llamacpp(engine: Engine) -> Iterator[str]:
    """Serve the fake on a free loopback port; yield its base URL (…/v1)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(engine))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
