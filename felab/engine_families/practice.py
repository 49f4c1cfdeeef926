"""The practice server (`python -m felab.mock_server`, target `mock`): the kit's own.

It speaks OpenAI's over-context 400 (code `context_length_exceeded`), so its context fix
is its own flag, and its prefix cache can be emptied without a restart (`POST /admin/reset`).
"""

from __future__ import annotations

from felab.engine_families.family import (
    Engine,
    Overflow,
    Target,
    as_int,
    fits,
    get_json,
    openai_overflow,
    restart_with,
    root_of,
)
from felab.paths import from_here

SERVER = ".venv/bin/python -m felab.mock_server"
"""The server run by the kit's Python, from the kit root (`make mock` runs it on its usual port)."""


def start_on(port: int) -> str:
    return f"{SERVER} --port {port}"


def fit_context(target: Target, over: Overflow, request_chars: int) -> str:
    """Room for the prompt: a larger --context-tokens; with --seats, the same seats, each larger."""
    port = ENGINE.moved_port(target.base_url)
    on_port = f" --port {port}" if port else ""  # the address this run used, not the usual one
    seats = _seats(target)
    if seats is None or over.limit is None:
        return restart_with(
            target, over, request_chars, lambda size: f"{from_here(SERVER)} --context-tokens {size}{on_port}"
        )
    seat = fits(max(over.prompt_tokens or 0, over.limit + 1))
    prompt = f"{over.prompt_tokens:,}" if over.prompt_tokens else "more"
    return (
        f"The prompt ({prompt} tokens) does not fit a seat of the practice server at "
        f"{target.base_url} ({over.limit:,} tokens): it splits its context evenly between its {seats} seats "
        f"({over.limit * seats:,} in all), as llama.cpp does. Stop it (Ctrl+C in its terminal) and start "
        f"it with seats of {seat:,}: `{from_here(SERVER)} --seats {seats} "
        f"--context-tokens {seat * seats}{on_port}`. Then run this again."
    )


def _seats(target: Target) -> int | None:
    """The seats a practice server started with --seats reports at GET /props, as llama.cpp does."""
    props = get_json(f"{root_of(target)}/props")
    return as_int(props.get("total_slots")) if isinstance(props, dict) else None


def forget_cache(target: Target) -> str:
    """Empty the cache of the server at the target's address, or restart that one: on another port
    than 8765 its restart names that port (`make mock` would start one on 8765 instead)."""
    restart = ENGINE.start_at(target.base_url) or ENGINE.start
    return (
        f"empty its cache with `curl -X POST {root_of(target)}/admin/reset` (or restart it: Ctrl+C in its "
        f"terminal, then `{from_here(restart or 'make mock')}`)"
    )


ENGINE = Engine(
    name="mock",
    url="http://127.0.0.1:8765/v1",
    start="make mock",
    start_on=start_on,
    api_key_flag=None,
    read_overflow=openai_overflow,
    fit_context=fit_context,
    forget_cache=forget_cache,
)
