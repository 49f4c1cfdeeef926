"""Which server a script talks to: the practice server, a local engine, or Fireworks.

Every lesson script takes the same three flags:

    --target {mock,llamacpp,mlx,vllm,sglang,ollama,fireworks}
    --base-url URL     (default: the target's usual address, below)
    --model ID         (default: the target's usual model, or the one the server names)

Where each value comes from, first match wins:

    flag  >  FELAB_<TARGET>_URL / FELAB_<TARGET>_MODEL (shell or .env)  >  the default below

Local servers that load exactly one model (llama.cpp, vLLM, SGLang, the practice
server) are asked for it at `GET /v1/models`, so nobody has to type a model id.
"""

from __future__ import annotations

import argparse
import os
import re
import unicodedata
from dataclasses import dataclass

from felab import paths
from felab.errors import FelabError
from felab.paths import load_env

ASK_SERVER = None
"""A default model of `None` means: ask the server's `/v1/models`."""


@dataclass(frozen=True)
class TargetSpec:
    """A target's defaults: where it listens, its model, how to start it."""

    url: str
    model: str | None
    start_hint: str
    key_env: str | None = None
    paid: bool = False


FIREWORKS_ROOT = "https://api.fireworks.ai"
"""Fireworks' root URL; `FIREWORKS_BASE_URL` (the variable its SDK reads) overrides it."""

TARGETS: dict[str, TargetSpec] = {
    "mock": TargetSpec("http://127.0.0.1:8765/v1", ASK_SERVER, "make mock"),
    "llamacpp": TargetSpec(
        "http://127.0.0.1:8080/v1",
        ASK_SERVER,
        "bash lessons/02-three-local-servers/serve_llamacpp.sh Q4_K_M 16384 4",
    ),
    # mlx_lm.server reads the request's `model` as a path or hub repo; the
    # string "default_model" means "the model it was started with".
    "mlx": TargetSpec(
        "http://127.0.0.1:8081/v1", "default_model", "bash lessons/02-three-local-servers/serve_mlx.sh"
    ),
    "vllm": TargetSpec("http://127.0.0.1:8000/v1", ASK_SERVER, "vllm serve <model>"),
    "sglang": TargetSpec(
        "http://127.0.0.1:30000/v1", ASK_SERVER, "python -m sglang.launch_server --model-path <model>"
    ),
    "ollama": TargetSpec(
        "http://127.0.0.1:11434/v1", ASK_SERVER, "bash lessons/02-three-local-servers/serve_ollama.sh"
    ),
    "fireworks": TargetSpec(
        f"{FIREWORKS_ROOT}/inference/v1",
        "accounts/fireworks/models/gpt-oss-120b",
        "nothing to start: check your network and https://status.fireworks.ai",
        key_env="FIREWORKS_API_KEY",
        paid=True,
    ),
}

NO_KEY = "not-needed"
"""What local servers get as an API key: the client needs one, they ignore it."""


@dataclass(frozen=True)
class Target:
    """A resolved target: everything a script needs to talk to one server."""

    name: str
    base_url: str
    model: str
    api_key: str
    is_paid: bool
    key_env: str | None = None

    def __repr__(self) -> str:  # never show the key, even in a debugger or a log
        return f"Target(name={self.name!r}, base_url={self.base_url!r}, model={self.model!r})"


def add_target_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add --target, --base-url and --model to a lesson script's parser, and return it."""
    parser.add_argument(
        "--target",
        choices=list(TARGETS),
        default="mock",
        help="which server to measure (default: mock, the practice server)",
    )
    parser.add_argument("--base-url", help="the server's OpenAI-compatible URL, ending in /v1")
    parser.add_argument("--model", help="model id (default: the target's, or the one the server serves)")
    return parser


def positive_int(text: str) -> int:
    """An argparse type for counts (`type=positive_int`): a whole number of 1 or more, else a usage error."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return value


def lesson_parser(doc: str | None) -> argparse.ArgumentParser:
    """A lesson script's parser: its docstring, as written, for --help, and the target flags."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_target_args(parser)


def env_value(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def default_url(name: str) -> str:
    """The URL a target uses when no flag says otherwise."""
    load_env()
    url = env_value(f"FELAB_{name.upper()}_URL")
    if url:
        return url.rstrip("/")
    if name == "fireworks":
        return f"{fireworks_root()}/inference/v1"
    return TARGETS[name].url


def fireworks_root() -> str:
    """Fireworks' one root URL (`FIREWORKS_BASE_URL`, else the default): inference lives at
    /inference/v1 below it, the control plane (make fw-check) at /v1/accounts/..."""
    load_env()
    return (env_value("FIREWORKS_BASE_URL") or FIREWORKS_ROOT).rstrip("/")


PORT_VARIABLES = {"llamacpp": "LLAMACPP_PORT", "mlx": "MLX_PORT", "ollama": "OLLAMA_PORT"}
"""The variable each serve_*.sh script reads its port from."""


def start_command(name: str, base_url: str) -> str:
    """The command that starts target `name` listening at `base_url`, written for the learner's
    folder: the table's, with the port added where the address is not the table's."""
    command = TARGETS[name].start_hint
    port = moved_port(name, base_url)
    if port is None:
        return paths.from_here(command)
    if name in PORT_VARIABLES:
        return f"{PORT_VARIABLES[name]}={port} {paths.from_here(command)}"
    if name == "mock":
        return f"{paths.from_here('.venv/bin/python')} -m felab.mock_server --port {port}"
    return f"{command} --port {port}"


LOOPBACK = re.compile(r"^https?://(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:|/|$)")
"""An address on this machine: a start command may name its port; plain http:// is safe there."""


def exposes_key(url: str) -> bool:
    """Would a key sent to `url` cross the network unencrypted (plain http:// to another machine)?"""
    return url.startswith("http://") and not LOOPBACK.match(url)


def port_of(url: str) -> int | None:
    found = re.match(r"https?://[^/:]+:(\d+)", url)
    return int(found.group(1)) if found else None


def moved_port(name: str, base_url: str) -> int | None:
    """The port of a local server of target `name` at `base_url`, if it is not the table's
    (a start command must then say it); None for the usual port or a remote address."""
    port = port_of(base_url)
    local = LOOPBACK.match(base_url)
    return port if local and port is not None and port != port_of(TARGETS[name].url) else None


def cold_start_advice(target: Target) -> str:
    """What to do after a run whose call 1 was warm: where its numbers went, and how to empty
    `target`'s prefix cache so that call 1 of the next run is cold."""
    if target.name == "mock":
        root = target.base_url.removesuffix("/v1")
        how = (
            f"empty its cache with `curl -X POST {root}/admin/reset` (or restart it: Ctrl+C in its "
            f"terminal, then `{paths.from_here('make mock')}`)"
        )
    elif target.is_paid:
        how = (
            f"wait: {target.name} keeps a cached prompt for minutes to hours and cannot be told to forget it"
        )
    else:
        how = "restart the server (Ctrl+C in its terminal, then start it again with the same command)"
    return (
        f"This run is recorded as warm; `{paths.from_here('make numbers')}` keeps offering your latest "
        f"cold one. For a cold start, {how}, and run again."
    )


def configured_model(name: str) -> str | None:
    """The model a target uses when no --model says otherwise: FELAB_<TARGET>_MODEL, else the
    table's (None: ask the server)."""
    load_env()
    return env_value(f"FELAB_{name.upper()}_MODEL") or TARGETS[name].model


def unsendable(key: str) -> str | None:
    """What in `key` an HTTP header cannot carry, or None if it can be sent.

    A key goes in the `Authorization` header, which carries printable ASCII only:
    a space, a line break or a curly quote pasted with it would make the client
    fail before anything is sent. Says which character, never the key.
    """
    for c in key:
        if c.isspace():
            return "a line break" if c in "\r\n" else "a space or tab"
        if not c.isascii() or not c.isprintable():
            return f"the character U+{ord(c):04X} {unicodedata.name(c, '(a control character)')}"
    return None


def key_problem(env_name: str, key: str) -> str:
    """The message for a key that cannot be sent (see `unsendable`)."""
    return (
        f"{env_name} contains {unsendable(key)}, which a key does not have, so it cannot be sent. "
        f"Copy the key again from your dashboard into {paths.ENV_FILE} (`{env_name}=` then the key, "
        f"with nothing around it), or export it again in this terminal, then run again."
    )


def fix_key_advice(env_name: str) -> str:
    """Where to put a key right, said for where the one in use came from: a key exported in the
    shell wins over `.env`, so editing `.env` alone would change nothing."""
    from dotenv import dotenv_values  # python-dotenv, as load_env() uses it

    in_file = dotenv_values(paths.ENV_FILE).get(env_name)
    used = os.environ.get(env_name, "").strip()
    if used and (in_file or "").strip() != used:
        return (
            f"The key in use comes from this terminal (it was exported), which wins over "
            f"{paths.ENV_FILE}: export it again with the key copied from your dashboard, or "
            f"`unset {env_name}` to use the one in .env."
        )
    return (
        f"Check {env_name} in {paths.ENV_FILE} (copy the key again from your dashboard; no quotes, "
        f"no spaces)."
    )


def required_key(env_name: str) -> str:
    """An API key from the shell or `.env`; a FelabError saying where to put it if it is missing
    or holds characters a header cannot carry."""
    load_env()
    key = env_value(env_name)
    if not key:
        raise FelabError(
            f"{env_name} is not set. Put a line `{env_name}=...` in {paths.ENV_FILE} "
            f"(copy .env.example to start one) or export it in this terminal, then run again."
        )
    if unsendable(key):
        raise FelabError(key_problem(env_name, key))
    return key


def key_status(env_name: str) -> tuple[str, str | None]:
    """For `make check`: a short state (is the key set, can it be sent), and the message that
    says what to do when it cannot be sent. Never the key."""
    try:
        required_key(env_name)
    except FelabError as exc:
        key = env_value(env_name)
        if key:
            return f"{env_name} is set but cannot be sent (it contains {unsendable(key)})", exc.message
        return f"{env_name} is NOT set (see .env.example)", None
    return f"{env_name} is set", None
