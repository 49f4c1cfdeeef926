"""A stand-in for Hugging Face TGI's router, speaking its wire format on loopback.

Started with the launcher's own flags (`--model-id`, `--port`, `--max-input-tokens`,
`--max-total-tokens`, `--max-batch-prefill-tokens`), so a test can start it exactly as an
advised `text-generation-launcher ...` command says. It checks them as the launcher does
(`--max-input-tokens` below `--max-total-tokens`; a prefill batch that holds a whole prompt)
and validates each chat request as TGI's router does (router/src/validation.rs): prompt and
`max_new_tokens` against `--max-total-tokens` first, then the prompt against
`--max-input-tokens`; past `--max-concurrent-requests` in flight, "Model is overloaded" (429).
A request refused gets TGI's answer (router/src/server.rs, infer/mod.rs):

    not streamed   HTTP 422 {"error": "Input validation error: <why>", "error_type": "validation"}
                   (HTTP 429 {"error": "Model is overloaded", "error_type": "overloaded"})
    streamed       HTTP 200, `data: {"error": {"message": "<the same words>", "http_status_code": 422}}`,
                   then `data: [DONE]` (TGI 2.4.1 and later; 422 whatever the error)

Tokens are counted as 4 characters each (English text with a Llama tokenizer, roughly).
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fake_http import JSONHandler

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def launcher_args(argv: list[str]) -> argparse.Namespace:
    """The launcher's flags the fake honours (the rest of a command is ignored)."""
    parser = argparse.ArgumentParser(prog="text-generation-launcher")
    parser.add_argument("--model-id", default=MODEL)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-input-tokens", type=int, default=1024)
    parser.add_argument("--max-total-tokens", type=int, default=2048)
    parser.add_argument("--max-batch-prefill-tokens", type=int, default=4096)
    parser.add_argument("--max-concurrent-requests", type=int, default=128)
    args, _ = parser.parse_known_args(argv)
    if args.max_input_tokens >= args.max_total_tokens:
        raise SystemExit(
            f"`max_input_tokens`({args.max_input_tokens}) must be < "
            f"`max_total_tokens`({args.max_total_tokens})"
        )
    if args.max_input_tokens > args.max_batch_prefill_tokens:
        raise SystemExit(
            f"`max_batch_prefill_tokens` must be >= `max_input_tokens`. Given: "
            f"{args.max_batch_prefill_tokens} and {args.max_input_tokens}"
        )
    return args


def refusal(args: argparse.Namespace, prompt: int, max_new: int, temperature: float | None) -> str | None:
    """TGI's validation of one request: its error's words, or None if it passes."""
    if temperature is not None and temperature <= 0:
        return "`temperature` must be strictly positive"
    if prompt + max_new > args.max_total_tokens:
        return (
            f"`inputs` tokens + `max_new_tokens` must be <= {args.max_total_tokens}. "
            f"Given: {prompt} `inputs` tokens and {max_new} `max_new_tokens`"
        )
    if prompt > args.max_input_tokens:
        return f"`inputs` must have less than {args.max_input_tokens} tokens. Given: {prompt}"
    return None


def _handler(args: argparse.Namespace) -> type[BaseHTTPRequestHandler]:
    seats = threading.BoundedSemaphore(args.max_concurrent_requests) if args.max_concurrent_requests else None

    class Handler(JSONHandler):
        def _event(self, body: object) -> None:
            self.wfile.write(f"data: {json.dumps(body) if not isinstance(body, str) else body}\n\n".encode())

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                model = {"id": args.model_id, "object": "model", "created": 0, "owned_by": args.model_id}
                self._json(200, {"object": "list", "data": [model]})
            elif self.path == "/info":
                self._json(200, {"model_id": args.model_id, "max_input_tokens": args.max_input_tokens,
                                 "max_total_tokens": args.max_total_tokens})  # fmt: skip
            else:
                self._json(404, {"error": "Not Found", "error_type": "not_found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            # TGI's Overloaded: 429 (an event inside a stream)
            if seats is None or not seats.acquire(blocking=False):
                self._refuse(body, 429, "Model is overloaded", "overloaded")
                return
            try:
                self._chat(body)
            finally:
                seats.release()

        def _refuse(self, body: dict, status: int, message: str, error_type: str) -> None:
            if not body.get("stream"):
                self._json(status, {"error": message, "error_type": error_type})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self._event({"error": {"message": message, "http_status_code": 422}})  # 422 for any error
            self._event("[DONE]")

        def _chat(self, body: dict) -> None:
            prompt = sum(len(str(m.get("content", ""))) for m in body["messages"]) // 4
            max_new = body.get("max_tokens") or max(args.max_total_tokens - prompt, 0)
            why = refusal(args, prompt, max_new, body.get("temperature"))
            if why:
                self._refuse(body, 422, f"Input validation error: {why}", "validation")
                return
            if not body.get("stream"):
                self._json(200, self._completion(prompt))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for text in ("Hi", " there"):
                self._event(self._chunk({"content": text}, None))
            last = self._chunk({}, "length")
            last["usage"] = {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2}
            self._event(last)
            self._event("[DONE]")

        def _chunk(self, delta: dict, finish: str | None) -> dict:
            choice = {"index": 0, "delta": {"role": "assistant", **delta}, "finish_reason": finish}
            return {"id": "", "object": "chat.completion.chunk", "created": 0, "model": args.model_id,
                    "system_fingerprint": "3.3.6-native", "choices": [choice]}  # fmt: skip

        def _completion(self, prompt: int) -> dict:
            message = {"role": "assistant", "content": "Hi there"}
            usage = {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2}
            return {"id": "", "object": "chat.completion", "created": 0, "model": args.model_id,
                    "system_fingerprint": "3.3.6-native", "usage": usage,
                    "choices": [{"index": 0, "message": message, "finish_reason": "length"}]}  # fmt: skip

    return Handler


@contextmanager
def fake_tgi(*argv: str) -> Iterator[str]:
    """Serve the fake, started with the launcher's flags `argv`, on loopback; yield its …/v1.
    `--port 0` (the default) takes a free port."""
    args = launcher_args(list(argv))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _handler(args))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
