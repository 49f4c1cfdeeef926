"""Server errors, explained: an `openai` exception from a call becomes one paragraph for the learner.

Dispatches on the HTTP status and the error `type` the server sent (never on
message text, which changes between versions; the one exception, engines whose
over-context error has no type of its own, is context_fit.py's). The advice is
worked out from the target and what the server reported: its start command
comes from the target table (targets.py), not from text repeated here. The API
key is never part of any message.
"""

from __future__ import annotations

import openai

from felab.context_fit import read_overflow, request_chars, too_long
from felab.errors import FelabError
from felab.paths import from_here
from felab.targets import Target, fix_key_advice, start_command


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own words from an OpenAI-shaped error body, if it sent any."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return exc.message


DROPPED = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)
"""What a socket raises when the server accepted the connection and then reset it."""
CUT_OFF = ("RemoteProtocolError", "ReadError", "WriteError")
"""httpx's names for a connection closed under a request (named, not imported: the openai client
may carry its own copy of httpx, whose classes are not httpx's)."""


def dropped(exc: openai.APIConnectionError) -> bool:
    """Did a server accept the connection, then close or reset it without an answer? (Not: the
    connection was refused, nothing listening; or the host could not be reached.)"""
    seen: BaseException | None = exc.__cause__ or exc.__context__
    for _ in range(10):  # the chain: openai's error, httpx's, httpcore's, the socket's
        if seen is None:
            return False
        if isinstance(seen, DROPPED) or type(seen).__name__ in CUT_OFF:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def explain(exc: Exception, target: Target) -> FelabError:
    """Turn an `openai` exception from a call to `target` into a FelabError.

    Dispatches on the HTTP status and the error `type` the server sent (never
    on message text, which changes between versions). The API key is never
    part of any message.
    """
    name, url = target.name, target.base_url
    if isinstance(exc, openai.APITimeoutError):
        return FelabError(
            f"The {name} server at {url} did not answer in time. It may be busy or stuck: "
            f"check it with `{from_here('make check')}`, restart it if needed, and run again."
        )
    if isinstance(exc, openai.APIConnectionError) and dropped(exc):
        return FelabError(
            f"The {name} server at {url} accepted the connection, then closed or reset it without "
            f"answering: something listens on that port, but it is not an OpenAI-compatible server, "
            f"or it fails on every request. Starting another server there would fail (the port is "
            f"taken): see what it is with `{from_here('make check')}`, stop it, then start the "
            f"server with `{start_command(name, url)}`; or pass --base-url with the right address."
        )
    if isinstance(exc, openai.APIConnectionError):
        return FelabError(
            f"Could not connect to the {name} server at {url}: nothing is listening there. "
            f"Start it with `{start_command(name, url)}` (in another terminal) and wait until it says it "
            f"is listening; `{from_here('make check')}` shows which servers are up. If it listens "
            f"elsewhere, pass --base-url or set FELAB_{name.upper()}_URL in .env."
        )
    if not isinstance(exc, openai.APIStatusError):
        return FelabError(f"The call to the {name} server at {url} failed: {exc}")

    status, said = exc.status_code, _server_message(exc)
    if status == 400 and (over := read_overflow(exc)) is not None:  # the prompt is over the context
        return FelabError(too_long(target, over, request_chars(exc)))
    if status == 401:
        key_hint = (
            fix_key_advice(target.key_env)
            if target.key_env
            else (
                "This server was started with an API key (llama-server's or vLLM's --api-key, or a "
                "proxy in front of it); the kit sends none to a local server. Stop it (Ctrl+C in its "
                f"terminal) and start it without one: `{start_command(name, url)}`."
            )
        )
        return FelabError(f"The {name} server refused the API key (HTTP 401: {said}). {key_hint}")
    if status == 404 and not url.endswith("/v1"):  # the OpenAI routes live under /v1
        return FelabError(
            f"The {name} server at {url} answered HTTP 404 ({said}): its OpenAI-compatible address "
            f"usually ends in /v1. Pass `--base-url {url}/v1`."
        )
    if status == 404:
        return FelabError(
            f"The {name} server has no model {target.model!r} (HTTP 404: {said}). Model ids change: "
            f"copy a current id (for Fireworks, from its model library) and pass it with --model."
        )
    if status == 429:
        wait = exc.response.headers.get("retry-after")
        when = f"{wait} s" if wait else "a minute"
        return FelabError(
            f"The {name} server is rate limiting this key (HTTP 429: {said}). Wait {when} and run again."
        )
    if status == 503:
        return FelabError(
            f"The {name} server is not ready (HTTP 503: {said}). It is loading, scaling up from zero "
            f"or overloaded: wait a minute and run again."
        )
    if status >= 500:
        return FelabError(
            f"The {name} server failed on this request (HTTP {status}: {said}). Run again; if it keeps "
            f"failing, restart the server or check its status page."
        )
    return FelabError(f"The {name} server rejected the request (HTTP {status}: {said}).")
