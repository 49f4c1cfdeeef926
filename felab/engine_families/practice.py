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
from felab.mock_server.twin import Twin, reported
from felab.paths import from_here
from felab.results import fleet_at

SERVER = ".venv/bin/python -m felab.mock_server"
"""The server run by the kit's Python, from the kit root (`make mock` runs it on its usual port)."""


def start_on(port: int) -> str:
    return f"{SERVER} --port {port}"


def fit_context(target: Target, over: Overflow, request_chars: int) -> str:
    """Room for the prompt: a larger --context-tokens; with --seats, the same seats, each larger.
    A twin (started with --profile) is restarted with the same profile: the flags after it win."""
    port = ENGINE.moved_port(target.base_url)
    on_port = f" --port {port}" if port else ""  # the address this run used, not the usual one
    twin = _twin(target)
    server = f"{from_here(SERVER)} {twin.profile_flag()}" if twin else from_here(SERVER)
    seats = _seats(target)
    if seats is None or over.limit is None:
        return restart_with(
            target, over, request_chars, lambda size: f"{server} --context-tokens {size}{on_port}"
        )
    seat = fits(max(over.prompt_tokens or 0, over.limit + 1))
    prompt = f"{over.prompt_tokens:,}" if over.prompt_tokens else "more"
    return (
        f"The prompt ({prompt} tokens) does not fit a seat of the practice server at "
        f"{target.base_url} ({over.limit:,} tokens): it splits its context evenly between its {seats} seats "
        f"({over.limit * seats:,} in all), as llama.cpp does. Stop it (Ctrl+C in its terminal) and start "
        f"it with seats of {seat:,}: `{server} --seats {seats} "
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


def _twin(target: Target) -> Twin | None:
    """The twin the practice server at the target serves (its GET /v1/models says, twin.py), or None."""
    listed = get_json(f"{target.base_url}/models")
    data = listed.get("data") if isinstance(listed, dict) else None
    return reported(data[0]) if isinstance(data, list) and data else None


def forget_fleet_cache(target: Target) -> str | None:
    """For the URL of a fleet started from this kit folder (`make fleet`), how to start it cold:
    its router is no practice server (`/admin/reset` there is a 404) and a restart of one server
    on its port is no fleet; so the fleet's own stop and start. None for any other address."""
    state = fleet_at(target.base_url)
    if state is None:
        return None
    start = state["start"] if isinstance(state.get("start"), str) else "make fleet"
    again = f"`{from_here('make fleet-stop')}`, then `{from_here(start)}`"
    if state.get("router") == "none":  # one practice server: its reset empties every replica
        reset = f"curl -X POST {root_of(target)}/admin/reset"
        return f"empty its cache with `{reset}` (or start the fleet again: {again})"
    return f"start the fleet again, each worker's cache empty (it has one each, behind the router): {again}"


def forget_twin_cache(target: Target) -> str:
    """`forget_cache`, but a twin's restart keeps its profile (and the port this run used); a
    fleet's is the fleet's (`forget_fleet_cache`)."""
    if (fleet := forget_fleet_cache(target)) is not None:
        return fleet
    twin = _twin(target)
    if twin is None:
        return forget_cache(target)
    port = ENGINE.moved_port(target.base_url)
    again = f"make mock PROFILE={twin.path_here()}" + (f" PORT={port}" if port else "")
    return (
        f"empty its cache with `curl -X POST {root_of(target)}/admin/reset` (or restart it: Ctrl+C in its "
        f"terminal, then `{from_here(again)}`)"
    )


ENGINE = Engine(
    name="mock",
    url="http://127.0.0.1:8765/v1",
    start="make mock",
    start_on=start_on,
    api_key_flag=None,
    read_overflow=openai_overflow,
    fit_context=fit_context,
    forget_cache=forget_twin_cache,
)
