"""SGLang (`python -m sglang.launch_server`): one model, its context set by `--context-length`.

Its over-context answer is HTTP 400 with no field naming it, so its documented wording is
matched: "Input length (P tokens) exceeds the maximum allowed length (N tokens)" (older:
"The input (P tokens) is longer than the model's context length (N tokens)"), or, with the
reply, "maximum context length of N tokens ... P tokens from the input messages and R
tokens for the completion".
"""

from __future__ import annotations

import re

from felab.engine_families.family import Engine, Overflow, ServerError, Target, restart_with

PROMPT = re.compile(
    r"(?:Input length|The input) \((\d+) tokens\) (?:exceeds|is longer than)[^(]*\((\d+) tokens\)"
)
TOTAL = re.compile(r"maximum context length of (\d+) tokens")
PROMPT_AND_REPLY = re.compile(r"(\d+) tokens from the input messages and (\d+) tokens for the completion")


def read_overflow(error: ServerError) -> Overflow | None:
    if error.status not in (400, None):
        return None
    if found := PROMPT.search(error.said):
        return Overflow(int(found[1]), int(found[2]))
    if found := PROMPT_AND_REPLY.search(error.said):
        limit = TOTAL.search(error.said)
        return Overflow(int(found[1]), int(limit[1]) if limit else None, int(found[2]))
    return None


def fit_context(target: Target, over: Overflow, request_chars: int) -> str:
    port = ENGINE.moved_port(target.base_url)
    on_port = f" --port {port}" if port else ""
    return restart_with(
        target,
        over,
        request_chars,
        lambda size: (
            f"python -m sglang.launch_server --model-path {target.model} --context-length {size}{on_port}"
        ),
    )


ENGINE = Engine(
    name="sglang",
    url="http://127.0.0.1:30000/v1",
    start="python -m sglang.launch_server --model-path <model>",
    read_overflow=read_overflow,
    fit_context=fit_context,
)
