"""What an engine family is: the one record the kit keeps for each kind of server.

An `Engine` holds everything that differs from one server to another: where it listens,
how to start it (on its usual port or another), which key it needs and whether it bills,
how it words a prompt longer than its context and which restart fits one, what its 4xx
answers mean, and how to empty its prefix cache. targets.py, connect.py, explain.py and
context_fit.py read these records; none of them names an engine. Each family module in
this package builds one `Engine`; `felab/engine_families/__init__.py` lists them.

The helpers below are what several families share: OpenAI's own error wording (the
practice server, vLLM and Fireworks speak it), the `Overflow` a family reads from an
error, and the paragraph that names the restart with room for the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from felab.paths import from_here


@dataclass(frozen=True)
class Target:
    """A resolved target: everything a script needs to talk to one server (`resolve()` makes it).

    It lives here, below the registry, so that each family can name it and targets.py (which reads
    the registry) imports it from here: the registry never imports targets.py."""

    name: str
    base_url: str
    model: str
    api_key: str
    is_paid: bool
    key_env: str | None = None

    def __repr__(self) -> str:  # never show the key, even in a debugger or a log
        return f"Target(name={self.name!r}, base_url={self.base_url!r}, model={self.model!r})"


ASK_SERVER = None
"""A default model of `None` means: ask the server's `/v1/models`."""

REPLY_ROOM = 256
"""Tokens kept free for the reply when a context size is worked out (lessons ask for 8 to 48)."""

LOOPBACK = re.compile(r"^https?://(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:|/|$)", re.IGNORECASE)
"""An address on this machine: a start command may name its port; plain http:// is safe there.
(A scheme and a host name have no case: `HTTP://LOCALHOST:8080` is this machine too; felab/urls.py.)"""


def port_of(url: str) -> int | None:
    """The port written in `url`, or None where it has none."""
    found = re.match(r"https?://[^/:]+:(\d+)", url, re.IGNORECASE)
    return int(found.group(1)) if found else None


# ── What a server said ───────────────────────────────────────────────────────


@dataclass(frozen=True)
class ServerError:
    """An error reply, whatever its shape: the HTTP status (or the one an error event inside a
    stream names; None if neither), the error object's fields, and its words."""

    status: int | None
    fields: Mapping[str, Any]
    said: str


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


def as_int(value: object) -> int | None:
    """`value` if it is a whole number (a JSON field), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


MAX_LEN = re.compile(r"maximum context length is (\d+)")
PROMPT = re.compile(r"(at least )?(\d+) (?:input|prompt) tokens")  # vLLM 0.11+, the practice server
REPLY = re.compile(r"(\d+) output tokens|asks for (\d+) more")
# OpenAI's older wording, and vLLM's before 0.11:
PROMPT_AND_REPLY = re.compile(r"\((\d+) in the messages, (\d+) in the completion\)")


def openai_overflow(error: ServerError) -> Overflow | None:
    """OpenAI's over-context 400 (code `context_length_exceeded`, "maximum context length is N
    tokens"), as the practice server and Fireworks send it."""
    if error.status not in (400, None):
        return None
    if not MAX_LEN.search(error.said) and error.fields.get("code") != "context_length_exceeded":
        return None
    return openai_numbers(error.said)


def openai_numbers(said: str) -> Overflow:
    """The numbers in OpenAI's wording: the limit, the prompt ("[at least] P input tokens") and
    the reply ("R output tokens"), or both ("(P in the messages, R in the completion)"); each
    None where the words do not give it."""
    limit, prompt, reply = MAX_LEN.search(said), PROMPT.search(said), REPLY.search(said)
    if both := PROMPT_AND_REPLY.search(said):
        return Overflow(int(both[1]), int(limit[1]) if limit else None, int(both[2]))
    return Overflow(
        int(prompt[2]) if prompt else None,
        int(limit[1]) if limit else None,
        int(reply[1] or reply[2]) if reply else None,
        at_least=bool(prompt and prompt[1]),
    )


def no_overflow(error: ServerError) -> None:
    """For a family that has no over-context wording of its own."""
    return None


# ── The advice ───────────────────────────────────────────────────────────────


def needed(over: Overflow, request_chars: int) -> int:
    """The tokens the request needs: as the server counted, or, where it did not say or only
    gave a lower bound, at least twice the limit and half a token a character."""
    known = (over.prompt_tokens or 0) + (over.reply_tokens or 0)
    if over.prompt_tokens is not None and not over.at_least:
        return known
    return max(known, 2 * (over.limit or 0), request_chars // 2)


def what_did_not_fit(target: Target, over: Overflow) -> str:
    """The first sentence: what did not fit what, in the server's own numbers."""
    what = "The prompt"
    if over.prompt_tokens is not None:
        what += f" ({over.prompt_tokens:,}{'+' if over.at_least else ''} tokens)"
    if over.reply_tokens:
        what += f" and its reply ({over.reply_tokens:,})"
    limit = f" ({over.limit:,} tokens)" if over.limit else ""
    verb = "do" if over.reply_tokens else "does"
    return f"{what} {verb} not fit the context of the {target.name} server at {target.base_url}{limit}."


def restart_with(target: Target, over: Overflow, request_chars: int, command: Callable[[int], str]) -> str:
    """The paragraph for an engine whose context is one start flag: `command(size)` is its
    restart with room for `size` tokens, on the address this run used."""
    size = fits(needed(over, request_chars))
    return (
        f"{what_did_not_fit(target, over)} Stop it (Ctrl+C in its terminal) and start it with room "
        f"for {size:,} tokens: `{command(size)}` (the model must support that length). Then run this again."
    )


def choose_another(target: Target, over: Overflow, request_chars: int) -> str:
    """The paragraph for a server the learner cannot restart (a cloud): another model, or less."""
    size = fits(needed(over, request_chars))
    return (
        f"{what_did_not_fit(target, over)} Pick a model with a longer context (`--model`), or a shorter "
        f"prompt: it needs about {size:,} tokens of context."
    )


def root_of(target: Target) -> str:
    """The server's address without its /v1 (where engines keep their own routes)."""
    return target.base_url.removesuffix("/v1")


def get_json(url: str) -> Any:
    """GET url as JSON, or None if it does not answer with JSON within 2 s (within the kit's
    limits, felab/guarded.py: a server that sends without end stops with a message naming it)."""
    from felab.guarded import get_json as guarded_get  # httpx, only when a server is asked

    return guarded_get(url, timeout_s=2.0)


def restart_to_forget(target: Target) -> str:
    """How to empty a local engine's prefix cache: it lives in the server's memory."""
    return "restart the server (Ctrl+C in its terminal, then start it again with the same command)"


# ── The record ───────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Engine:
    """One kind of server, as the kit knows it. Only `name`, `url` and `start` are required;
    every other field has the default of a local OpenAI-compatible engine."""

    name: str
    """The `--target` name (and the TARGET in FELAB_<TARGET>_URL)."""
    url: str
    """Where it listens when nothing says otherwise, ending in /v1."""
    start: str | None
    """The command that starts it on its usual port, written from the kit root; None: there is
    nothing to start (a cloud service)."""
    model: str | None = ASK_SERVER
    """Its usual model id; None: the one the server names at `GET /v1/models`."""
    start_on: Callable[[int], str] | None = None
    """The command that starts it on another port; None: `start` followed by `--port N`."""
    port_variable: str | None = None
    """The variable its serve script reads a port from (`LLAMACPP_PORT=9090 bash ...`)."""
    key_env: str | None = None
    """The variable holding its API key; None: it needs none (the kit sends a placeholder)."""
    paid: bool = False
    """Whether a call bills the learner's account."""
    root_env: str | None = None
    """A variable holding the service's root URL (the one its own SDK reads), below which the
    OpenAI API lives at `api_path`; `url` is then the default root plus `api_path`."""
    api_path: str = "/v1"
    """Where the OpenAI-compatible API lives below `root_env`'s root."""
    api_key_flag: str | None = "--api-key"
    """The start flag that makes it ask for a key (named when it refuses the kit's placeholder)."""
    status_page: str | None = None
    """Where a cloud service says whether it is up."""
    read_overflow: Callable[[ServerError], Overflow | None] = no_overflow
    """Its words for a prompt longer than its context, read into an Overflow (or None)."""
    fit_context: Callable[[Target, Overflow, int], str] = choose_another
    """The paragraph for an overflow: what did not fit, and the restart (or choice) that fits.
    Given the target, the Overflow and the characters the request sent."""
    forget_cache: Callable[[Target], str] = restart_to_forget
    """How to empty its prefix cache, so the next call 1 is cold (completes "For a cold start, ...")."""
    meanings: Mapping[int, str] = field(default_factory=dict)
    """What an HTTP status means from this engine when it is not what OpenAI means by it: a
    sentence explain() adds to its paragraph (TGI's 429 is its own queue being full)."""
    models_from: str = "`make check` shows the models it serves"
    """Where a current model id is found, for a 404 on the model."""

    def start_at(self, base_url: str) -> str | None:
        """The command that starts it listening at `base_url`, from the kit root (the caller
        writes it for the learner's folder); None for a service there is nothing to start."""
        if self.start is None:
            return None
        port = self.moved_port(base_url)
        if port is None:
            return self.start
        if self.port_variable:
            return f"{self.port_variable}={port} {self.start}"
        return self.start_on(port) if self.start_on else f"{self.start} --port {port}"

    def moved_port(self, base_url: str) -> int | None:
        """The port of a local server at `base_url` if it is not this engine's usual one (a start
        command must then say it); None for the usual port or a remote address."""
        port = port_of(base_url)
        local = LOOPBACK.match(base_url)
        return port if local and port is not None and port != port_of(self.url) else None

    def serve_script(self) -> str:
        """`bash <script>` of its start command, without arguments, for the learner's folder."""
        return from_here(" ".join((self.start or "").split()[:2]))
