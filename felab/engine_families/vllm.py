"""vLLM (`vllm serve`): one model, its context set by `--max-model-len`.

Its over-context answer is HTTP 400 in OpenAI's envelope: since 0.11 with `param`
`input_tokens` ("your prompt contains [at least] P input tokens"; past its limit it
stops counting, hence "at least"), before that "(P in the messages, R in the completion)".
"""

from __future__ import annotations

from felab.engine_families.family import (
    MAX_LEN,
    Engine,
    Overflow,
    ServerError,
    Target,
    openai_numbers,
    restart_with,
)


def read_overflow(error: ServerError) -> Overflow | None:
    if error.status not in (400, None):
        return None
    limit = MAX_LEN.search(error.said)
    if limit is None and error.fields.get("param") != "input_tokens":
        return None
    return openai_numbers(error.said)


def fit_context(target: Target, over: Overflow, request_chars: int) -> str:
    port = ENGINE.moved_port(target.base_url)
    on_port = f" --port {port}" if port else ""
    return restart_with(
        target, over, request_chars, lambda size: f"vllm serve {target.model} --max-model-len {size}{on_port}"
    )


ENGINE = Engine(
    name="vllm",
    url="http://127.0.0.1:8000/v1",
    start="vllm serve <model>",
    read_overflow=read_overflow,
    fit_context=fit_context,
)
