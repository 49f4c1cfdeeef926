"""llama.cpp's `llama-server`: started by the lesson's serve script; its context split into seats.

Its over-context answer is HTTP 400 with a body of its own, named by a field:
type `exceed_context_size_error`, with `n_prompt_tokens` and `n_ctx` (the seat's context).
llama-server splits its context (`-c`) evenly between its seats (`-np`), so the restart
that fits is worked out from what it says about itself at `GET /props` (its seats, its
model file): bigger seats for the same number, or fewer seats in the same memory.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePath

from felab.engine_families.family import (
    Engine,
    Overflow,
    ServerError,
    Target,
    as_int,
    fits,
    get_json,
    root_of,
)

START = "bash lessons/02-three-local-servers/serve_llamacpp.sh Q4_K_M 16384 4"
PORT_VARIABLE = "LLAMACPP_PORT"
DEFAULT_REPO = "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"
"""serve_llamacpp.sh's default download (a test keeps the two the same)."""
QUANT = re.compile(r"[-._]((?:I?Q\d\w*)|BF16|F16|F32)\.gguf$", re.IGNORECASE)
"""The quantisation in a GGUF file's name (`...-Q4_K_M.gguf`)."""


def read_overflow(error: ServerError) -> Overflow | None:
    if error.fields.get("type") != "exceed_context_size_error":
        return None
    return Overflow(as_int(error.fields.get("n_prompt_tokens")), as_int(error.fields.get("n_ctx")))


def fit_context(target: Target, over: Overflow, request_chars: int) -> str:
    """Seats big enough for the prompt: the same number of bigger seats, or fewer in the same memory."""
    props = get_json(f"{root_of(target)}/props")
    props = props if isinstance(props, dict) else {}
    seats = as_int(props.get("total_slots"))
    settings = props.get("default_generation_settings")
    have = over.limit or (as_int(settings.get("n_ctx")) if isinstance(settings, dict) else None)
    seat = fits(max(over.prompt_tokens or 0, (have or 0) + 1))
    prompt = f"{over.prompt_tokens:,}" if over.prompt_tokens else "more"
    said = (
        f"The prompt ({prompt} tokens) does not fit a seat of the llamacpp server at "
        f"{target.base_url} ({f'{have:,}' if have else 'too few'} tokens). llama.cpp splits its "
        f"context evenly between its seats"
    )
    start = _start(target, props.get("model_path"))
    if seats is None or have is None:
        return (
            f"{said}. Stop it (Ctrl+C in its terminal) and start it with seats of {seat:,} tokens: "
            f"CTX = {seat:,} x seats, for example `{start} {seat * 4} 4` (4 seats) or "
            f"`{start} {seat} 1` (one). Then run this again."
        )
    total = have * seats
    said += f": this one runs {seats} seat{'s' if seats > 1 else ''} of {have:,} ({total:,} in all)."
    more = (
        f"{said} Stop it (Ctrl+C in its terminal) and start it with seats of {seat:,}: "
        f"`{start} {seat * seats} {seats}` ({seats} seats; llama-server flags -c {seat * seats} -np {seats})"
    )
    fewer = total // seat
    if 1 <= fewer < seats:
        more += (
            f", or keep its memory and have {fewer} seat{'s' if fewer > 1 else ''}: `{start} {total} {fewer}`"
        )
    return more + ". Then run this again."


def _start(target: Target, model_path: object) -> str:
    """serve_llamacpp.sh with the model and port this server runs, written for the learner's
    folder; QUANT follows (CTX SEATS are the caller's). The default download needs no LLAMACPP_MODEL."""
    words = []
    port = ENGINE.moved_port(target.base_url)
    if port is not None:
        words.append(f"{PORT_VARIABLE}={port}")
    quant = "Q4_K_M"
    if isinstance(model_path, str) and model_path:
        name = PurePath(model_path).name
        found = QUANT.search(name)
        quant = found.group(1) if found else quant
        owner, repo = DEFAULT_REPO.split("/")
        default = owner in model_path and name.endswith(f"{repo.removesuffix('-GGUF')}-{quant}.gguf")
        if not default:
            words.append(f"LLAMACPP_MODEL={shlex.quote(model_path)}")
    return " ".join([*words, ENGINE.serve_script(), quant])


ENGINE = Engine(
    name="llamacpp",
    url="http://127.0.0.1:8080/v1",
    start=START,
    port_variable=PORT_VARIABLE,
    read_overflow=read_overflow,
    fit_context=fit_context,
)
