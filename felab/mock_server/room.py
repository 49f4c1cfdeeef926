"""Does a request fit the context, and how long may its reply be?

One rule, read by the live server (app.py answers a refusal with its 400) and by the
virtual replay (felab/replay/virtual.py counts a refusal as a failed request, as a
real-time replay does): so a replay through a profile with small seats refuses the
prompts the live twin refuses, and caps the replies it caps.

    with --seats (llama.cpp):  each seat holds context_tokens // seats tokens
        a prompt of a seat or more      refused: exceed_context_size_error
        otherwise                        reply = min(max_tokens, seat - prompt): it stops
                                         where the seat is full (finish_reason "length")
    without seats (vLLM, OpenAI):
        max_tokens over the context      refused: the reply alone cannot fit
        prompt + max_tokens over it      refused: context_length_exceeded
        otherwise                        reply = max_tokens

The words are the engines' own (llama.cpp's measured on a real build; the others OpenAI's).
No web framework here: a replay's worker process imports only this.
"""

from __future__ import annotations

from felab.mock_server.config import Settings

SEAT = "exceed_context_size_error"
"""llama.cpp's code for a prompt longer than a seat."""
CONTEXT = "context_length_exceeded"
"""OpenAI's (and vLLM's) code for a prompt and reply longer than the context."""
REPLY = "max_tokens"
"""A reply limit larger than the whole context: an invalid value of that field."""


class TooLong(Exception):
    """Why a request does not fit: `code` (SEAT, CONTEXT or REPLY), the message, and the prompt's
    tokens and the room it had (`n_ctx`), which llama.cpp puts in its error body."""

    def __init__(self, code: str, message: str, prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(message)
        self.code, self.message, self.prompt_tokens, self.n_ctx = code, message, prompt_tokens, n_ctx


def reply_room(s: Settings, prompt_tokens: int, max_tokens: int) -> int:
    """The reply's length in tokens for this prompt and limit; TooLong if they do not fit."""
    if s.seats is not None:
        seat = s.context_tokens // s.seats
        if prompt_tokens >= seat:
            why = (
                f"request ({prompt_tokens} tokens) exceeds the available context size ({seat} tokens), "
                f"try increasing it"
            )
            raise TooLong(SEAT, why, prompt_tokens, seat)
        return min(max_tokens, seat - prompt_tokens)
    if max_tokens > s.context_tokens:
        why = f"{max_tokens} is more than the model's context ({s.context_tokens} tokens)"
        raise TooLong(REPLY, why, prompt_tokens, s.context_tokens)
    if prompt_tokens + max_tokens > s.context_tokens:
        why = (
            f"This model's maximum context length is {s.context_tokens} tokens; "
            f"the request has {prompt_tokens} prompt tokens and asks for {max_tokens} more."
        )
        raise TooLong(CONTEXT, why, prompt_tokens, s.context_tokens)
    return max_tokens
