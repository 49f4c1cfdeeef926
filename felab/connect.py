"""Connecting to a target: flags and `.env` resolved into a Target, and the official client for it.

target = resolve(args)     # flags > FELAB_<TARGET>_URL / _MODEL > the table in targets.py
api = client(target)       # openai.OpenAI, retries off, reading within limits (guarded.py)
banner(target)             # which server and model this run measures (never the key)
"""

from __future__ import annotations

import argparse
import json
from typing import Any, cast

import openai

from felab.errors import FelabError
from felab.explain import explain, not_openai
from felab.guarded import guarded_client
from felab.paths import load_env
from felab.redact import redact
from felab.results import note_served
from felab.targets import (
    LOOPBACK,
    NO_KEY,
    TARGETS,
    Target,
    configured_model,
    default_url,
    env_value,
    exposes_key,
    required_key,
    root_problem,
)
from felab.urls import lower_scheme, scheme


def resolve(args: argparse.Namespace) -> Target:
    """Turn parsed flags into a Target, reading `.env` and asking the server where needed."""
    load_env()
    name: str = args.target
    spec = TARGETS[name]
    flag = getattr(args, "base_url", None)
    if not flag and not env_value(f"FELAB_{name.upper()}_URL") and (problem := root_problem(name)):
        raise FelabError(problem)  # the service's root variable, advised as a root
    base_url = with_scheme(flag or default_url(name), "--base-url" if flag else url_source(name))
    if spec.key_env and exposes_key(base_url):
        raise FelabError(
            f"{base_url} is a plain http:// address: the {spec.key_env} would cross the network "
            f"unencrypted. Use https:// (check --base-url, FELAB_{name.upper()}_URL"
            + (f" or {spec.root_env}" if spec.root_env else "")
            + ")."
        )

    api_key = required_key(spec.key_env) if spec.key_env else NO_KEY
    target = Target(name, base_url, "", api_key, spec.paid, spec.key_env)
    model = getattr(args, "model", None) or configured_model(name)
    if not model:
        model = served_model(target)
    resolved = Target(name, base_url, model, api_key, spec.paid, spec.key_env)
    if not spec.paid:  # what a local server says it serves is what its rows record (results.py)
        note_served(name, base_url, model, reported_models(resolved))
    return resolved


def reported_models(target: Target) -> list[dict[str, object]] | None:
    """The model objects a local server lists at `GET /v1/models`, or None when it does not
    answer with OpenAI's list (the run's first request then says why, as it always has)."""
    try:
        listed: object = json.loads(client(target, timeout=5.0).models.with_raw_response.list().text)
    except (openai.OpenAIError, ValueError):
        return None
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
        return None
    return data


def url_source(name: str) -> str:
    """The variable a target's address came from, as the learner set it (for a message)."""
    root_env = TARGETS[name].root_env
    if env_value(f"FELAB_{name.upper()}_URL") or not root_env or not env_value(root_env):
        return f"FELAB_{name.upper()}_URL"
    return root_env


def with_scheme(url: str, source: str) -> str:
    """`url` without a trailing slash and with its scheme in lower case (`HTTP://` is `http://`:
    see urls.py); a FelabError if it lacks http:// or https:// (the client would only say it
    could not connect)."""
    url = url.rstrip("/")
    if scheme(url) in ("http", "https"):
        return lower_scheme(url)
    bare = url.split("://", 1)[-1]
    if "/" not in bare:  # a host and port alone: every engine here serves OpenAI's API at /v1
        bare += "/v1"  # (else the fix would fail next on its path: one message, not two)
    local = LOOPBACK.match(f"http://{bare}")
    fixed = f"{'http' if local else 'https'}://{bare}"  # a remote server: encrypted
    how = f"`--base-url {fixed}`" if source == "--base-url" else f"`{source}={fixed}` in .env (or the shell)"
    other = scheme(url)  # ftp://, ws://: not an address the OpenAI API is served at
    what = (
        f"an address with {other}:// in front, not http:// or https://"
        if other
        else "an address without http:// or https:// in front"
    )
    raise FelabError(f"{source} is {url!r}, {what}. Use {how}.")


def served_model(target: Target) -> str:
    """Ask a local server which model it serves (`GET /v1/models`); a server whose answer is not
    OpenAI's list of models is named as one that does not speak OpenAI's API."""
    try:  # the reply as sent (the SDK's raw response), so a page that is not OpenAI's is seen as such
        page = client(target, timeout=5.0).models.with_raw_response.list().text
    except openai.OpenAIError as exc:
        raise explain(exc, target) from exc
    try:
        listed: object = json.loads(page)
    except ValueError:  # a web page, or nothing
        listed = page
    ids = model_ids(listed)
    if ids is None:
        kind = "a web page" if isinstance(listed, str) else "something other than a list of models"
        raise not_openai(target, "GET /v1/models", 200, kind)
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise FelabError(f"The {target.name} server at {target.base_url} serves no model yet.")
    shown = ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")
    raise FelabError(
        f"The {target.name} server serves {len(ids)} models ({shown}). Pick one with --model, or set "
        f"FELAB_{target.name.upper()}_MODEL in .env."
    )


def model_ids(listed: object) -> list[str] | None:
    """The ids in OpenAI's list of models (`{"data": [{"id": ...}, ...]}`), or None if `listed`
    is not one."""
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list):
        return None
    ids = [m.get("id") for m in data if isinstance(m, dict)]
    return [i for i in ids if isinstance(i, str)] if len(ids) == len(data) else None


class TargetClient(openai.OpenAI):
    """An `openai.OpenAI` client that remembers its Target, so errors can name it, and reads
    through the kit's limits (felab/guarded.py: a size cap, a deadline per request, an idle gap
    in a stream), so no server can make it read for ever."""

    def __init__(self, target: Target, *, timeout: float, max_retries: int) -> None:
        who = f"the {target.name} server at {target.base_url}"
        super().__init__(
            base_url=target.base_url,
            api_key=target.api_key,
            timeout=timeout,
            max_retries=max_retries,
            # an httpx.Client: the SDK takes one ("an instance of `httpx.Client` or `httpx2.Client`"),
            # though its type hints name only httpx2's, the library of its recent releases
            http_client=cast(Any, guarded_client(who, timeout)),
        )
        self.target = target


def client(target: Target, timeout: float = 300.0) -> TargetClient:
    """The official OpenAI client for a target.

    Retries are off (`max_retries=0`): a retried request would hide its wait
    inside the time we measure. A failed call fails loudly instead. `timeout` is each
    request's deadline, from sending it to the last byte of its reply (FELAB_READ_DEADLINE_S
    in its place; felab/guarded.py).
    """
    return TargetClient(target, max_retries=0, timeout=timeout)


def banner(target: Target) -> None:
    """Print which server and model this run measures (never the key)."""
    print(redact(f"target: {target.name} · {target.base_url} · model: {target.model}"))
    if target.is_paid:
        print("note: this target is paid; this run bills your account (a few cents).")
