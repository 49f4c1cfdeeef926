"""A prompt longer than the server's context: what the server reported, and the restart that fits.

Every engine answers HTTP 400, each in its own words:

    llama.cpp   type `exceed_context_size_error`, with `n_prompt_tokens` and `n_ctx` (the seat's)
    vLLM        param `input_tokens` (0.11 and later), or "maximum context length is N tokens"
    SGLang      "Input length (P tokens) exceeds the maximum allowed length (N tokens)"
    Ollama      "the input length exceeds the context length" (no numbers; ask GET /api/ps)
    practice    code `context_length_exceeded` (OpenAI's), "maximum context length is N tokens";
                with --seats, llama.cpp's body and `GET /props`

llama.cpp's and OpenAI's bodies name the error with a field; vLLM's (before 0.11), SGLang's
and Ollama's do not, so for them their documented wording is what is matched. The advice is
worked out from those numbers and from what the server says about itself (llama.cpp's
`GET /props`: its seats), never the configuration that just failed: the seat that fits is the
next power of two above the prompt and room for the reply.
"""

from __future__ import annotations

import json
import re
import shlex
import urllib.request
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import openai

from felab.paths import from_here
from felab.targets import PORT_VARIABLES, TARGETS, Target, moved_port

REPLY_ROOM = 256
"""Tokens kept free for the reply when a seat size is worked out (lessons ask for 8 to 48)."""

LLAMACPP_DEFAULT_REPO = "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"
"""serve_llamacpp.sh's default download (a test keeps the two the same)."""
SERVE_LLAMACPP = " ".join(TARGETS["llamacpp"].start_hint.split()[:2])  # `bash <script>`, without its flags
SERVE_OLLAMA = TARGETS["ollama"].start_hint


@dataclass(frozen=True)
class Overflow:
    """What the server said about a prompt that did not fit (None: it did not say)."""

    prompt_tokens: int | None
    limit: int | None
    """The context that was too small: per seat for llama.cpp, per model for the others."""
    reply_tokens: int | None = None
    at_least: bool = False
    """`prompt_tokens` is only a lower bound (vLLM stops counting past its limit)."""


def fits(tokens: int) -> int:
    """The smallest power of two that holds `tokens` and room for the reply."""
    size = 1024
    while size < tokens + REPLY_ROOM:
        size *= 2
    return size


# ── Recognising the error ─────────────────────────────────────────────────────

MAX_LEN = re.compile(r"maximum context length (?:is|of) (\d+)")
PROMPT = re.compile(r"(at least )?(\d+) (?:input|prompt) tokens")  # vLLM 0.11+, the practice server
PROMPT_AND_REPLY = re.compile(r"\((\d+) in the messages, (\d+) in the completion\)")  # vLLM before 0.11
REPLY = re.compile(r"(\d+) output tokens|asks for (\d+) more")
SGLANG = re.compile(
    r"(?:Input length|The input) \((\d+) tokens\) (?:exceeds|is longer than)[^(]*\((\d+) tokens\)"
)
SGLANG_TOTAL = re.compile(r"(\d+) tokens from the input messages and (\d+) tokens for the completion")
OLLAMA = "exceeds the context length"


def read_overflow(exc: openai.APIStatusError) -> Overflow | None:
    """The overflow a 400 reports, or None if it is some other error."""
    body: Any = exc.body
    fields = body if isinstance(body, dict) else {}
    said = str(fields.get("message") or (body if isinstance(body, str) else exc.message))
    if fields.get("type") == "exceed_context_size_error":  # llama.cpp
        return Overflow(_int(fields.get("n_prompt_tokens")), _int(fields.get("n_ctx")))
    if found := SGLANG.search(said):
        return Overflow(int(found[1]), int(found[2]))
    limit = int(found[1]) if (found := MAX_LEN.search(said)) else None
    if found := SGLANG_TOTAL.search(said):
        return Overflow(int(found[1]), limit, int(found[2]))
    if limit or fields.get("param") == "input_tokens" or fields.get("code") == "context_length_exceeded":
        if found := PROMPT_AND_REPLY.search(said):
            return Overflow(int(found[1]), limit, int(found[2]))
        prompt, reply = PROMPT.search(said), REPLY.search(said)
        return Overflow(
            int(prompt[2]) if prompt else None,
            limit,
            int(reply[1] or reply[2]) if reply else None,
            at_least=bool(prompt and prompt[1]),
        )
    if OLLAMA in said:
        return Overflow(None, None)
    return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ── The advice ────────────────────────────────────────────────────────────────


def too_long(target: Target, over: Overflow, request_chars: int) -> str:
    """One paragraph: what did not fit, and the restart (or choice) that fits."""
    if target.name == "llamacpp":
        return _llamacpp(target, over)
    if target.name == "mock" and (seats := _practice_seats(target, over)):
        return seats
    need = _needed(over, request_chars)
    size = fits(need)
    what = _what(target, over)
    if target.name == "ollama":
        return _ollama(target, what, need)
    port = moved_port(target.name, target.base_url)
    on_port = f" --port {port}" if port else ""  # the address this run used, not the usual one
    restart = {
        "vllm": f"vllm serve {target.model} --max-model-len {size}{on_port}",
        "sglang": (
            f"python -m sglang.launch_server --model-path {target.model} --context-length {size}{on_port}"
        ),
        "mock": f"{from_here('.venv/bin/python')} -m felab.mock_server --context-tokens {size}{on_port}",
    }.get(target.name)
    if restart is None:
        return (
            f"{what} Pick a model with a longer context (`--model`), or a shorter prompt: "
            f"it needs about {size:,} tokens of context."
        )
    return (
        f"{what} Stop it (Ctrl+C in its terminal) and start it with room for {size:,} tokens: "
        f"`{restart}` (the model must support that length). Then run this again."
    )


def _needed(over: Overflow, request_chars: int) -> int:
    """The tokens the request needs: as the server counted, or, where it did not say or only
    gave a lower bound, at least twice the limit and half a token a character."""
    known = (over.prompt_tokens or 0) + (over.reply_tokens or 0)
    if over.prompt_tokens is not None and not over.at_least:
        return known
    return max(known, 2 * (over.limit or 0), request_chars // 2)


def _what(target: Target, over: Overflow) -> str:
    """The first sentence: what did not fit what, in the server's own numbers."""
    what = "The prompt"
    if over.prompt_tokens is not None:
        what += f" ({over.prompt_tokens:,}{'+' if over.at_least else ''} tokens)"
    if over.reply_tokens:
        what += f" and its reply ({over.reply_tokens:,})"
    limit = f" ({over.limit:,} tokens)" if over.limit else ""
    verb = "do" if over.reply_tokens else "does"
    return f"{what} {verb} not fit the context of the {target.name} server at {target.base_url}{limit}."


def _root(target: Target) -> str:
    return target.base_url.removesuffix("/v1")


def _get_json(url: str) -> Any:
    """GET url as JSON, or None if it does not answer with JSON within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2.0) as reply:
            return json.loads(reply.read())
    except (OSError, ValueError):
        return None


# ── llama.cpp: seats ──────────────────────────────────────────────────────────


def _llamacpp(target: Target, over: Overflow) -> str:
    props = _get_json(f"{_root(target)}/props")
    props = props if isinstance(props, dict) else {}
    seats = _int(props.get("total_slots"))
    settings = props.get("default_generation_settings")
    have = over.limit or (_int(settings.get("n_ctx")) if isinstance(settings, dict) else None)
    seat = fits(max(over.prompt_tokens or 0, (have or 0) + 1))
    prompt = f"{over.prompt_tokens:,}" if over.prompt_tokens else "more"
    said = (
        f"The prompt ({prompt} tokens) does not fit a seat of the llamacpp server at "
        f"{target.base_url} ({f'{have:,}' if have else 'too few'} tokens). llama.cpp splits its "
        f"context evenly between its seats"
    )
    start = _llamacpp_start(target, props.get("model_path"))
    if seats is None or have is None:
        return (
            f"{said}. Stop it (Ctrl+C in its terminal) and start it with seats of {seat:,} tokens: "
            f"CTX = {seat:,} x seats, for example `{start} {seat * 4} 4` (4 seats) or "
            f"`{start} {seat} 1` (one). Then run this again."
        )
    total = have * seats
    said += f": this one runs {seats} seats of {have:,} ({total:,} in all)."
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


def _practice_seats(target: Target, over: Overflow) -> str | None:
    """The practice server started with --seats answers /props as llama.cpp does: the advice
    keeps its seats and gives each room for the prompt (None: it runs without seats)."""
    props = _get_json(f"{_root(target)}/props")
    seats = _int(props.get("total_slots")) if isinstance(props, dict) else None
    if seats is None or over.limit is None:
        return None
    seat = fits(max(over.prompt_tokens or 0, over.limit + 1))
    port = moved_port(target.name, target.base_url)
    on_port = f" --port {port}" if port else ""
    python = from_here(".venv/bin/python")
    prompt = f"{over.prompt_tokens:,}" if over.prompt_tokens else "more"
    return (
        f"The prompt ({prompt} tokens) does not fit a seat of the practice server at "
        f"{target.base_url} ({over.limit:,} tokens): it splits its context evenly between its {seats} seats "
        f"({over.limit * seats:,} in all), as llama.cpp does. Stop it (Ctrl+C in its terminal) and start "
        f"it with seats of {seat:,}: `{python} -m felab.mock_server --seats {seats} "
        f"--context-tokens {seat * seats}{on_port}`. Then run this again."
    )


QUANT = re.compile(r"[-._]((?:I?Q\d\w*)|BF16|F16|F32)\.gguf$", re.IGNORECASE)


def _llamacpp_start(target: Target, model_path: object) -> str:
    """serve_llamacpp.sh with the model and port this server runs, written for the learner's
    folder; QUANT and CTX SEATS follow. The default download needs no LLAMACPP_MODEL."""
    words = []
    port = moved_port("llamacpp", target.base_url)
    if port is not None:
        words.append(f"{PORT_VARIABLES['llamacpp']}={port}")
    quant = "Q4_K_M"
    if isinstance(model_path, str) and model_path:
        name = PurePath(model_path).name
        found = QUANT.search(name)
        quant = found.group(1) if found else quant
        owner, repo = LLAMACPP_DEFAULT_REPO.split("/")
        default = owner in model_path and name.endswith(f"{repo.removesuffix('-GGUF')}-{quant}.gguf")
        if not default:
            words.append(f"LLAMACPP_MODEL={shlex.quote(model_path)}")
    return " ".join([*words, from_here(SERVE_LLAMACPP), quant])


# ── Ollama: its seats are its own setting ─────────────────────────────────────


def _ollama(target: Target, what: str, need: int) -> str:
    """Ollama's context is per seat (OLLAMA_CONTEXT_LENGTH); GET /api/ps says what it runs."""
    running = _get_json(f"{_root(target)}/api/ps")
    models = running.get("models") if isinstance(running, dict) else None
    have = next((_int(m.get("context_length")) for m in models or [] if isinstance(m, dict)), None)
    size = fits(max(need, (have or 0) + 1))
    now = f" It runs with {have:,} tokens a seat." if have else ""
    port = moved_port("ollama", target.base_url)
    env = f"{PORT_VARIABLES['ollama']}={port} " if port else ""
    return (
        f"{what}{now} Stop Ollama (quit the Ollama app, which keeps its own settings, or Ctrl+C the "
        f"serve_ollama.sh that started it) and start it with {size:,} tokens a seat: "
        f"`{env}{from_here(SERVE_OLLAMA)} {target.model} {size} 4` (4 seats; each reserves its "
        f"context). Then run this again."
    )


def request_chars(exc: openai.APIStatusError) -> int:
    """The characters of the messages the failed request sent (0 if unknown)."""
    try:
        sent = json.loads(exc.request.content)
    except (ValueError, TypeError, AttributeError):
        return 0
    messages = sent.get("messages") if isinstance(sent, dict) else None
    return sum(len(str(m.get("content", ""))) for m in messages or [] if isinstance(m, dict))
