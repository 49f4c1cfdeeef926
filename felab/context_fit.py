"""A prompt longer than the server's context: what the server reported, and the restart that fits.

Every engine says it in its own words (HTTP 400 for most, 422 for TGI, or an error event
inside a stream); each engine family in felab/engine_families/ reads its own
(`Engine.read_overflow`, its module's docstring quotes the wording) and knows the restart
that fits (`Engine.fit_context`). An error is read by every family, not only the
target's (a learner may point `--target vllm` at any server); the advice is the target's
family's, worked out from the server's numbers and from what it says about itself, never
the configuration that just failed: the context that fits is the next power of two above
the prompt and room for the reply.
"""

from __future__ import annotations

import json
from typing import Any

import openai

from felab.engine_families import ENGINES
from felab.engine_families.family import REPLY_ROOM, Overflow, ServerError, fits
from felab.targets import Target

__all__ = ["REPLY_ROOM", "Overflow", "fits", "read_overflow", "request_chars", "server_error", "too_long"]


def server_error(exc: openai.APIError) -> ServerError:
    """An `openai` error as the server sent it: the HTTP status (or, for an error event inside a
    stream, the status it names), the error object's fields and its words."""
    body: Any = exc.body
    fields = body if isinstance(body, dict) else {}
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else fields.get("http_status_code")
    words = [fields.get(k) for k in ("message", "detail")]  # OpenAI's envelope, or FastAPI's
    said = next((w for w in words if isinstance(w, str) and w), None)
    said = said or (body if isinstance(body, str) else exc.message)
    return ServerError(status if isinstance(status, int) else None, fields, str(said))


def read_overflow(exc: openai.APIError) -> Overflow | None:
    """The overflow an error reports, as any engine family reads it, or None if it is some other error."""
    error = server_error(exc)
    for engine in ENGINES.values():
        if (over := engine.read_overflow(error)) is not None:
            return over
    return None


def too_long(target: Target, over: Overflow, request_chars: int) -> str:
    """One paragraph: what did not fit, and the restart (or choice) that fits, from the target's family."""
    return ENGINES[target.name].fit_context(target, over, request_chars)


def request_chars(exc: openai.APIError) -> int:
    """The characters of the messages the failed request sent (0 if unknown)."""
    try:
        sent = json.loads(exc.request.content)
    except (ValueError, TypeError, AttributeError):
        return 0
    messages = sent.get("messages") if isinstance(sent, dict) else None
    return sum(len(str(m.get("content", ""))) for m in messages or [] if isinstance(m, dict))
