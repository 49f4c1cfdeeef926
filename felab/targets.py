"""Which server a script talks to: the practice server, a local engine, or Fireworks.

Every lesson script takes the same three flags:

    --target {mock,llamacpp,mlx,vllm,sglang,ollama,tgi,fireworks}
    --base-url URL     (default: the target's usual address, below)
    --model ID         (default: the target's usual model, or the one the server names)

Where each value comes from, first match wins:

    flag  >  FELAB_<TARGET>_URL / FELAB_<TARGET>_MODEL (shell or .env)  >  the engine's default

The defaults, and everything else that differs from one engine to another, are in the
engine registry (felab/engine_families/, one module per engine); this module only reads
it. Local servers that load exactly one model (llama.cpp, vLLM, SGLang, TGI, the practice
server) are asked for it at `GET /v1/models`, so nobody has to type a model id.
"""

from __future__ import annotations

import argparse
import os
import unicodedata

from felab import paths
from felab.engine_families import ENGINES
from felab.engine_families.family import (  # Target: read here, defined below the registry
    LOOPBACK,
    Engine,
    Target,
)
from felab.engine_families.fireworks import ROOT as FIREWORKS_ROOT
from felab.errors import FelabError
from felab.paths import load_env
from felab.urls import scheme

TARGETS: dict[str, Engine] = ENGINES
"""Every target by name: the engine registry (felab/engine_families/), one module per engine."""

NO_KEY = "not-needed"
"""What local servers get as an API key: the client needs one, they ignore it."""


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
    """The URL a target uses when no flag says otherwise: FELAB_<TARGET>_URL, else its service's
    root variable (FIREWORKS_BASE_URL) with the API's path added, else the table's."""
    load_env()
    url = env_value(f"FELAB_{name.upper()}_URL")
    if url:
        return url.rstrip("/")
    engine = TARGETS[name]
    if engine.root_env and (root := env_value(engine.root_env)):
        return f"{root.rstrip('/')}{engine.api_path}"
    return engine.url


def fireworks_root() -> str:
    """Fireworks' one root URL (`FIREWORKS_BASE_URL`, else the default): inference lives at
    /inference/v1 below it, the control plane (make fw-check) at /v1/accounts/..."""
    load_env()
    return (env_value("FIREWORKS_BASE_URL") or FIREWORKS_ROOT).rstrip("/")


def root_problem(name: str) -> str | None:
    """What is wrong with target `name`'s root variable (FIREWORKS_BASE_URL), or None.

    The variable is the service's ROOT, which the kit and the service's SDK add paths to
    (/inference/v1 for inference, /v1/accounts/... for fw-check): an address without a scheme,
    or one that already ends in an API path, would send every request somewhere else. The
    advice is the root, for every use of the variable."""
    engine = TARGETS[name]
    load_env()
    value = env_value(engine.root_env) if engine.root_env else None
    if not value or not engine.root_env:
        return None
    root = value.rstrip("/")
    bare = root.split("://", 1)[-1]
    for tail in (engine.api_path, "/v1", "/inference"):
        bare = bare.removesuffix(tail)
    scheme = "http" if LOOPBACK.match(f"http://{bare}") else "https"  # another machine: encrypted
    fixed = (
        f"`{engine.root_env}={scheme}://{bare}` (in {paths.ENV_FILE}, or export it again in this "
        f"terminal: an export wins over .env)"
    )
    if "://" not in root:
        return (
            f"{engine.root_env} is {value!r}, an address without http:// or https:// in front. Use {fixed}."
        )
    if bare != root.split("://", 1)[1]:
        return (
            f"{engine.root_env} is {value!r}, but it is the service's root: the kit adds "
            f"{engine.api_path} to it for inference, and make fw-check /v1/accounts/... Use {fixed}."
        )
    return None


def start_command(name: str, base_url: str) -> str | None:
    """The command that starts target `name` listening at `base_url`, written for the learner's
    folder (the table's, with the port added where the address is not the table's); None for a
    service there is nothing to start."""
    command = TARGETS[name].start_at(base_url)
    return paths.from_here(command) if command else None


def exposes_key(url: str) -> bool:
    """Would a key sent to `url` cross the network unencrypted (plain http:// to another machine)?"""
    return scheme(url) == "http" and not LOOPBACK.match(url)


def cold_start_advice(target: Target) -> str:
    """What to do after a run whose call 1 was warm: where its numbers went, and how to empty
    `target`'s prefix cache so that call 1 of the next run is cold."""
    how = TARGETS[target.name].forget_cache(target)
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

    in_file = (dotenv_values(paths.ENV_FILE).get(env_name) or "").strip()
    used = os.environ.get(env_name, "").strip()
    if used and not in_file:  # (no .env, or none in it: nothing to fall back on)
        return (
            f"The key in use comes from this terminal (it was exported): export it again with the "
            f"key copied from your dashboard, or put it in {paths.ENV_FILE} as `{env_name}=...` and "
            f"`unset {env_name}`."
        )
    if used and in_file != used:
        return (
            f"The key in use comes from this terminal (it was exported), which wins over "
            f"{paths.ENV_FILE}: export it again with the key copied from your dashboard, or "
            f"`unset {env_name}` to use the one in .env."
        )
    return (
        f"Check {env_name} in {paths.ENV_FILE} (copy the key again from your dashboard; no quotes, "
        f"no spaces)."
    )


def start_env() -> str:
    """How to start the kit's `.env` when it does not exist, from the learner's folder: a copy of
    `.env.example` (in 03-labs/, `.env` is a link to the kit's, which cp will not write through
    while the kit's does not exist: so the kit's own path); "" when it exists."""
    if paths.ENV_FILE.exists():
        return ""
    here = paths.learner_folder()
    example, env = (os.path.relpath(path, here) for path in (paths.KIT_ROOT / ".env.example", paths.ENV_FILE))
    return f" (`cp {example} {env}` starts one)"


def required_key(env_name: str) -> str:
    """An API key from the shell or `.env`; a FelabError saying where to put it if it is missing
    or holds characters a header cannot carry."""
    load_env()
    key = env_value(env_name)
    if not key:
        raise FelabError(
            f"{env_name} is not set. Put a line `{env_name}=...` in {paths.ENV_FILE}{start_env()} or "
            f"export it in this terminal, then run again."
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
        example = os.path.relpath(paths.KIT_ROOT / ".env.example", paths.learner_folder())
        return f"{env_name} is NOT set (see {example})", None
    return f"{env_name} is set", None
