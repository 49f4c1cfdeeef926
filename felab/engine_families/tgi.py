"""Hugging Face Text Generation Inference (`text-generation-launcher`): its own router, OpenAI's routes.

It serves one model (`GET /v1/models` names it) and OpenAI's `/v1/chat/completions`. Its
limits are launcher flags: `--max-input-tokens` (the prompt) and `--max-total-tokens`
(prompt and reply together); `--max-batch-prefill-tokens` must hold a whole prompt
unless the model supports chunked prefill. A prompt over them is a validation error
(router/src/validation.rs, infer/mod.rs, server.rs), in one of two shapes:

    not streamed   HTTP 422 {"error": "Input validation error: ...", "error_type": "validation"}
    streamed       HTTP 200, then the event {"error": {"message": "Input validation error: ...",
                   "http_status_code": 422}} (since 2.4.1; before, the 422 body as an event)

and its words, which carry the numbers:

    `inputs` tokens + `max_new_tokens` must be <= N. Given: P `inputs` tokens and R `max_new_tokens`
    `inputs` must have less than N tokens. Given: P

Its 429 is its own queue: more requests at once than `--max-concurrent-requests` (128).
"""

from __future__ import annotations

import re

from felab.engine_families.family import (
    REPLY_ROOM,
    Engine,
    Overflow,
    ServerError,
    Target,
    fits,
    needed,
    port_of,
    what_did_not_fit,
)

URL = "http://127.0.0.1:8082/v1"
TOTAL = re.compile(
    r"`inputs` tokens \+ `max_new_tokens` must be <= (\d+)\. Given: (\d+) `inputs` tokens and (\d+)"
)
INPUT = re.compile(r"`inputs` must have less than (\d+) tokens\. Given: (\d+)")


def start_on(port: int) -> str:
    """The launcher on `port` (its own default is 3000, so the port is always written)."""
    return f"text-generation-launcher --model-id <model> --port {port}"


def read_overflow(error: ServerError) -> Overflow | None:
    if error.status not in (422, None):
        return None
    if found := TOTAL.search(error.said):
        return Overflow(int(found[2]), int(found[1]), int(found[3]) or None)
    if found := INPUT.search(error.said):
        return Overflow(int(found[2]), int(found[1]))
    return None


def fit_context(target: Target, over: Overflow, request_chars: int) -> str:
    """Room for the prompt (`--max-input-tokens`) and for prompt and reply (`--max-total-tokens`)."""
    total = fits(needed(over, request_chars))
    prompt = total - REPLY_ROOM
    port = ENGINE.moved_port(target.base_url) or port_of(URL)
    restart = (
        f"text-generation-launcher --model-id {target.model} --port {port} --max-input-tokens {prompt} "
        f"--max-total-tokens {total} --max-batch-prefill-tokens {prompt}"
    )
    return (
        f"{what_did_not_fit(target, over)} Stop it (Ctrl+C in its terminal) and start it with room for "
        f"{prompt:,} prompt tokens and {total:,} in all: `{restart}` (the model must support that "
        f"length, and the GPU hold it). Then run this again."
    )


ENGINE = Engine(
    name="tgi",
    url=URL,
    start=start_on(8082),
    start_on=start_on,
    read_overflow=read_overflow,
    fit_context=fit_context,
    meanings={
        429: "TGI answers 429 when more requests are in flight than its --max-concurrent-requests "
        "(128 unless it was started with more): send fewer at once, or start it with a larger value.",
    },
)
