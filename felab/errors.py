"""Errors a learner can meet, each turned into one short paragraph that says what to do next.

The rule of the kit: code deep inside raises a `FelabError` carrying the
finished message; only the edge (`run()` for lesson scripts, the felab CLI)
prints it and exits non-zero. No learner sees a traceback unless they ask for
one with `FELAB_DEBUG=1`.

Every message here is also listed on the troubleshooting page (docs/troubleshooting.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import openai

from felab.paths import from_here

if TYPE_CHECKING:
    from felab.targets import Target

EXIT_ERROR = 2
"""Exit status of a run stopped by a FelabError (bad input or an unreachable server)."""


class FelabError(Exception):
    """An error with a message written for the learner: what happened and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's own words from an OpenAI-shaped error body, if it sent any."""
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return body["message"]
    return exc.message


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
    if isinstance(exc, openai.APIConnectionError):
        return FelabError(
            f"Could not connect to the {name} server at {url}: nothing is listening there. "
            f"Start it with `{from_here(target.start_hint)}` (in another terminal) and wait until it says it "
            f"is listening; `{from_here('make check')}` shows which servers are up. If it listens "
            f"elsewhere, pass --base-url or set FELAB_{name.upper()}_URL in .env."
        )
    if not isinstance(exc, openai.APIStatusError):
        return FelabError(f"The call to the {name} server at {url} failed: {exc}")

    status, said = exc.status_code, _server_message(exc)
    body = exc.body if isinstance(exc.body, dict) else {}
    if status == 400 and body.get("type") == "exceed_context_size_error":
        have = body.get("n_ctx", "too few")
        need = body.get("n_prompt_tokens", "more")
        return FelabError(
            f"The prompt ({need} tokens) does not fit the context each seat of the {name} server has "
            f"({have} tokens). llama.cpp splits its context between its seats: 8192 tokens over 4 seats "
            f"leaves 2,048 each, too few for the 3,000-token opening. Stop the server (Ctrl+C) and "
            f"restart it with room for 4,096 tokens a seat: "
            f"`{from_here('bash lessons/02-three-local-servers/serve_llamacpp.sh Q4_K_M 16384 4')}`."
        )
    if status == 401:
        key_hint = (
            f"Check {target.key_env} in {_env_file()} (copy the key again from your dashboard; no quotes, "
            f"no spaces) or export it in this terminal."
            if target.key_env
            else "This server expects an API key: pass the one it was started with."
        )
        return FelabError(f"The {name} server refused the API key (HTTP 401: {said}). {key_hint}")
    if status == 404:
        return FelabError(
            f"The {name} server has no model {target.model!r} (HTTP 404: {said}). Model ids change: "
            f"copy a current id (for Fireworks, from its model library) and pass it with --model."
        )
    if status == 429:
        wait = exc.response.headers.get("retry-after")
        when = f"{wait} s" if wait else "a minute"
        return FelabError(
            f"The {name} server is rate limiting this key (HTTP 429: {said}). Wait {when} and run "
            f"again; the results recorded so far are kept."
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


def _env_file() -> str:
    from felab import paths  # read at call time: tests point it elsewhere

    return str(paths.ENV_FILE)


def fail(message: str) -> None:
    """Print a learner-facing error paragraph to stderr, unwrapped so commands stay whole."""
    print(f"error: {message}", file=sys.stderr)


def run(main: Callable[[], object]) -> None:
    """Run a lesson's `main()` and turn a FelabError or Ctrl+C into a clear exit.

    Use it as the last line of a lesson script: `if __name__ == "__main__": run(main)`.
    Results recorded before the error stay recorded: `record()` writes each row
    as soon as it is measured.
    """
    try:
        main()
    except FelabError as exc:
        if os.environ.get("FELAB_DEBUG"):
            raise
        fail(exc.message)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        print("\ninterrupted: what was recorded so far is kept under results/", file=sys.stderr)
        sys.exit(130)
