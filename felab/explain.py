"""Server errors, explained: an `openai` exception from a call becomes one paragraph for the learner.

A reply the kit stopped reading at one of its limits (felab/guarded.py) is already its own
paragraph, naming the server and what it did: it is passed on as it is. Otherwise this
dispatches on what happened on the wire, never on message text (which changes between
versions): for a connection that failed, the operating system's reason found under the
client's error (`connection_failure()`: refused, a name that does not resolve, no route,
accepted then reset...); for an answer, its HTTP status and whether it is JSON at all.
What an answer means for one engine (its over-context wording, what its 429 is, the
command that starts it) comes from the engine registry (felab/engine_families/), not from
text repeated here. The API key is never part of any message.
"""

from __future__ import annotations

import errno
import socket
import ssl
from urllib.parse import urlsplit

import openai

from felab.context_fit import read_overflow, request_chars, server_error, too_long
from felab.engine_families import ENGINES
from felab.engine_families.family import LOOPBACK, Engine, port_of
from felab.errors import FelabError
from felab.guarded import stopped_by
from felab.paths import from_here
from felab.targets import Target, fix_key_advice, start_command
from felab.urls import api_root

REFUSED = "refused"
"""Nothing listens at that address (the machine answered, the port is closed)."""
NO_NAME = "no-name"
"""The host name does not resolve: mistyped, or no name server answers (no network)."""
NO_NETWORK = "no-network"
"""No route to the address: this machine has no network (or a firewall drops it)."""
RESET = "reset"
"""Something accepted the connection, then reset or closed it without an answer."""
TLS = "tls"
"""https:// could not be set up (a plain http:// server, or a certificate problem)."""
OTHER = "other"

NAME_SERVER_SILENT = {socket.EAI_AGAIN, getattr(socket, "EAI_NODATA", socket.EAI_AGAIN)}
"""getaddrinfo's "try again": no name server answered, which is what no network looks like."""


def causes(exc: BaseException) -> list[BaseException]:
    """`exc` and what it was raised from, outermost first (the client wraps the system's error)."""
    found: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in found:
        found.append(seen)
        seen = seen.__cause__ or seen.__context__
    return found


def connection_failure(exc: BaseException) -> str:
    """Why a connection failed, from the system's error under the client's: REFUSED, NO_NAME,
    NO_NETWORK, RESET (accepted, then reset or closed without an answer), TLS or OTHER.

    For any caller that must tell "nothing is listening" from the rest (explain() here; the
    real-time replay, which counts its failures by kind)."""
    for cause in causes(exc):
        if isinstance(cause, socket.gaierror):
            return NO_NAME
        if isinstance(cause, ConnectionRefusedError):
            return REFUSED
        if isinstance(cause, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
            return RESET
        if isinstance(cause, ssl.SSLError):
            return TLS
        if isinstance(cause, OSError) and cause.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return NO_NETWORK
        if type(cause).__name__ == "RemoteProtocolError":  # httpx's: "disconnected without ... a response"
            return RESET
    return OTHER


def _name_lookup_said(exc: BaseException) -> int | None:
    """getaddrinfo's error number, if a name lookup failed."""
    return next((c.errno for c in causes(exc) if isinstance(c, socket.gaierror)), None)


def _address_advice(engine: Engine | None, name: str) -> str:
    """Where the address may have come from, and what each place gives when unset."""
    if engine is None:
        return "Check the address you gave (--base-url)."
    said = f"Check where the address came from: --base-url, FELAB_{name.upper()}_URL (unset, {engine.url})"
    if engine.root_env:
        root = engine.url.removesuffix(engine.api_path)
        said += f" or {engine.root_env} (the service's root; unset, {root})"
    return said + "."


def unreachable(exc: BaseException, target: Target) -> FelabError:
    """The paragraph for a connection that failed, by its cause (`connection_failure()`)."""
    name, url = target.name, target.base_url
    engine = ENGINES.get(name)
    host = urlsplit(url).hostname or url
    kind = connection_failure(exc)
    if kind == NO_NAME:
        usual = engine is not None and host == urlsplit(engine.url).hostname
        if usual or _name_lookup_said(exc) in NAME_SERVER_SILENT:  # the name is right: the lookup failed
            return FelabError(
                f"Could not look up {host} (the {name} server's name): no name server answered, so this "
                f"machine seems to have no network. Connect it (or check its DNS or proxy settings), "
                f"then run again."
            )
        return FelabError(
            f"The name {host} does not resolve, so the {name} server at {url} cannot be reached: the "
            f"name is mistyped, or this machine has no network. {_address_advice(engine, name)}"
        )
    if kind == NO_NETWORK:
        return FelabError(
            f"There is no route to {host}, so the {name} server at {url} cannot be reached: this machine "
            f"has no network (or a firewall drops the traffic). Connect it, then run again."
        )
    if kind == RESET:
        port = port_of(url)
        see = (
            f" See what listens there with `lsof -nP -iTCP:{port} -sTCP:LISTEN`."
            if port and LOOPBACK.match(url)
            else ""
        )
        return FelabError(
            f"Something at {url} accepted the connection, then reset or closed it without answering: a "
            f"program listens there, but dropped the request (it may not be an HTTP server, may be at "
            f"its limit of connections, or a proxy or firewall cut it).{see} If it is the {name} server, "
            f"look at its terminal for an error and restart it; if it is another program, pass the "
            f"{name} server's address with --base-url."
        )
    if kind == TLS:
        plain = url.replace("https://", "http://", 1)
        fix = (
            f" A local server speaks plain http: pass `--base-url {plain}`." if LOOPBACK.match(plain) else ""
        )
        return FelabError(
            f"Could not set up https with the {name} server at {url} (the secure connection failed: "
            f"{next((c for c in causes(exc) if isinstance(c, ssl.SSLError)), exc)}).{fix}"
        )
    command = start_command(name, url) if engine is not None else None
    if kind == REFUSED and command:
        return FelabError(
            f"Could not connect to the {name} server at {url}: nothing is listening there. "
            f"Start it with `{command}` (in another terminal) and wait until it says it "
            f"is listening; `{from_here('make check')}` shows which servers are up. If it listens "
            f"elsewhere, pass --base-url or set FELAB_{name.upper()}_URL in .env."
        )
    status = f" Its status page: {engine.status_page}." if engine and engine.status_page else ""
    why = "nothing is listening at that address" if kind == REFUSED else f"{causes(exc)[-1]}"
    return FelabError(
        f"Could not connect to the {name} server at {url} ({why}). {_address_advice(engine, name)}{status}"
    )


def not_openai(target: Target, asked: str, status: int, kind: str) -> FelabError:
    """A web server that is not an LLM server: it answered, but not in OpenAI's API."""
    return FelabError(
        f"The server at {target.base_url} answered {asked} with HTTP {status} and {kind}: a web server "
        f"is there, but not one that speaks OpenAI's API (an LLM server answers JSON under /v1). "
        f"Check the address (--base-url, or FELAB_{target.name.upper()}_URL in .env): "
        f"`{from_here('make check')}` shows which of the kit's servers are up and where; pass one of "
        f"those, ending in /v1."
    )


def _key_advice(target: Target) -> str:
    """What to do about a refused key: fix the learner's key, or start a local server without one."""
    if target.key_env:
        return fix_key_advice(target.key_env)
    engine = ENGINES.get(target.name)
    flag = f"{engine.api_key_flag}, or " if engine and engine.api_key_flag else ""
    command = start_command(target.name, target.base_url) if engine else None
    return (
        f"This server was started with an API key ({flag}a proxy in front of it); the kit sends none "
        f"to a local server. Stop it (Ctrl+C in its terminal) and start it without one"
        + (f": `{command}`." if command else ".")
    )


def _is_json(exc: openai.APIStatusError) -> bool:
    return "json" in exc.response.headers.get("content-type", "")


def explain(exc: Exception, target: Target) -> FelabError:
    """Turn an `openai` exception from a call to `target` into a FelabError.

    Dispatches on the connection's failure, the HTTP status and what the engine's family
    says they mean (never on message text). The API key is never part of any message.
    """
    name, url = target.name, target.base_url
    if (stopped := stopped_by(exc)) is not None:  # the kit stopped reading, at one of its limits
        return stopped
    if isinstance(exc, openai.APITimeoutError):
        return FelabError(
            f"The {name} server at {url} did not answer in time. It may be busy or stuck: "
            f"check it with `{from_here('make check')}`, restart it if needed, and run again."
        )
    if isinstance(exc, openai.APIConnectionError):
        return unreachable(exc, target)
    if not isinstance(exc, openai.APIError):
        return FelabError(f"The call to the {name} server at {url} failed: {exc}")

    if (over := read_overflow(exc)) is not None:  # the prompt is over the context, in any engine's words
        return FelabError(too_long(target, over, request_chars(exc)))
    error = server_error(exc)
    said, status = error.said, error.status
    if isinstance(exc, openai.APIStatusError) and not _is_json(exc):  # a page, not an error object
        kind = exc.response.headers.get("content-type", "no content type").split(";")[0]
        said = f"a {kind} page" if "html" in kind else " ".join(said.split())[:200]
    if not isinstance(exc, openai.APIStatusError):  # an error event inside a streamed reply
        return FelabError(
            f"The {name} server at {url} sent an error inside its streamed reply "
            f"(HTTP {status or 'status not given'}: {said}). Its words say what to change; run again then."
        )
    return _refused(exc, target, said)


def _refused(exc: openai.APIStatusError, target: Target, said: str) -> FelabError:
    """An HTTP error status answered to a call to `target`: what it means, and what to do next
    (`said`: the server's own words, shortened)."""
    name, url, status = target.name, target.base_url, exc.status_code
    engine = ENGINES.get(name)
    meaning = f" {engine.meanings[status]}" if engine and status in engine.meanings else ""
    if status == 401:
        return FelabError(f"The {name} server refused the API key (HTTP 401: {said}). {_key_advice(target)}")
    if status in (404, 405) and api_root(url) != url:  # the OpenAI routes live under /v1
        return FelabError(
            f"The {name} server at {url} answered HTTP {status} ({said}): its OpenAI-compatible address "
            f"usually ends in /v1. Pass `--base-url {api_root(url)}`."
        )
    asked = f"{exc.request.method} {exc.request.url.path}"
    if status in (404, 405, 501) and not _is_json(exc):  # a web server, not an OpenAI API
        return not_openai(target, asked, status, said)
    if status == 404 and asked.endswith("/models"):  # every OpenAI-compatible server lists its models
        return not_openai(target, asked, status, f"the words {said!r}")
    if status == 404:
        where = engine.models_from if engine else "`make check` shows the models it serves"
        return FelabError(
            f"The {name} server has no model {target.model!r} (HTTP 404: {said}). Model ids change: "
            f"{where}; pass the one you want with --model."
        )
    if status == 429:
        wait = exc.response.headers.get("retry-after")
        when = f"{wait} s" if wait else "a minute"
        if meaning:  # this engine's 429 is not OpenAI's rate limit
            return FelabError(
                f"The {name} server turned this request away (HTTP 429: {said}).{meaning} Wait {when} "
                f"and run again."
            )
        return FelabError(
            f"The {name} server is rate limiting this key (HTTP 429: {said}). Wait {when} and run again."
        )
    if status == 503:
        return FelabError(
            f"The {name} server is not ready (HTTP 503: {said}). It is loading, scaling up from zero "
            f"or overloaded: wait a minute and run again.{meaning}"
        )
    if status >= 500:
        return FelabError(
            f"The {name} server failed on this request (HTTP {status}: {said}). Run again; if it keeps "
            f"failing, restart the server or check its status page."
        )
    return FelabError(f"The {name} server rejected the request (HTTP {status}: {said}).{meaning}")
