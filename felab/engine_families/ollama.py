"""Ollama, started by the lesson's serve script (or the Ollama app): its context is per seat.

Its OpenAI layer answers an over-long prompt with HTTP 400 "the input length exceeds the
context length", without numbers; what it runs is at `GET /api/ps` (`context_length`, a
seat's). Its context is its own setting (OLLAMA_CONTEXT_LENGTH, set by the serve script),
and every seat reserves it.
"""

from __future__ import annotations

from felab.engine_families.family import (
    Engine,
    Overflow,
    ServerError,
    Target,
    as_int,
    fits,
    get_json,
    needed,
    root_of,
    what_did_not_fit,
)

PORT_VARIABLE = "OLLAMA_PORT"
WORDS = "exceeds the context length"


def read_overflow(error: ServerError) -> Overflow | None:
    return Overflow(None, None) if error.status in (400, None) and WORDS in error.said else None


def fit_context(target: Target, over: Overflow, request_chars: int) -> str:
    running = get_json(f"{root_of(target)}/api/ps")
    models = running.get("models") if isinstance(running, dict) else None
    have = next((as_int(m.get("context_length")) for m in models or [] if isinstance(m, dict)), None)
    size = fits(max(needed(over, request_chars), (have or 0) + 1))
    now = f" It runs with {have:,} tokens a seat." if have else ""
    port = ENGINE.moved_port(target.base_url)
    env = f"{PORT_VARIABLE}={port} " if port else ""
    return (
        f"{what_did_not_fit(target, over)}{now} Stop Ollama (quit the Ollama app, which keeps its own "
        f"settings, or Ctrl+C the serve_ollama.sh that started it) and start it with {size:,} tokens a "
        f"seat: `{env}{ENGINE.serve_script()} {target.model} {size} 4` (4 seats; each reserves its "
        f"context). Then run this again."
    )


ENGINE = Engine(
    name="ollama",
    url="http://127.0.0.1:11434/v1",
    start="bash lessons/02-three-local-servers/serve_ollama.sh",
    port_variable=PORT_VARIABLE,
    api_key_flag=None,
    read_overflow=read_overflow,
    fit_context=fit_context,
)
