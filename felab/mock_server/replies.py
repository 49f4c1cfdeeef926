"""What a reply says: its text, and the JSON of each piece, in the two shapes OpenAI defines.

The practice server has no model: a reply is placeholder words, one token each,
cut at the first stop string (`stop`) or after the tokens asked for (`max_tokens`).
The same reply goes out in one of two shapes:

    chat         POST /v1/chat/completions   choices[].message.content, streamed as
                                             choices[].delta.content after a role chunk
    completion   POST /v1/completions        choices[].text, streamed as choices[].text

Streamed, every chunk is one token; with `stream_options.include_usage` the last
chunk before `[DONE]` carries the usage and no choices, and every chunk before it
`"usage": null`, as OpenAI sends them. With vLLM's `continuous_usage_stats` too,
every chunk carries the usage so far instead: the prompt tokens, the reply tokens
sent up to and with this chunk, and their total (vLLM leaves the cached tokens to
the last chunk, and so does this server).

When (the booked times) lives in booking.py; the waiting, in app.py.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from felab.mock_server.booking import Booking

WORDS = ("This", " is", " the", " practice", " server", " answering", " with", " placeholder", " words", ".")


def reply_text(max_tokens: int, stops: list[str]) -> tuple[list[str], str]:
    """The reply's tokens and its finish_reason.

    `length`: all `max_tokens` placeholder words. `stop`: the reply ends where the
    first stop string begins; the stop string is not sent, and the token it begins
    in is cut there (it was generated, so it is counted, even if nothing of it is left).
    """
    words = [WORDS[i % len(WORDS)] for i in range(max_tokens)]
    text = "".join(words)
    cut = min((at for s in stops if (at := text.find(s)) >= 0), default=-1)
    if cut < 0:
        return words, "length"
    pieces, start = [], 0
    for word in words:  # every token up to the one the stop string begins in
        pieces.append(word[: max(0, cut - start)])
        start += len(word)
        if start > cut:
            break
    return pieces, "stop"


def frame(data: dict[str, Any]) -> str:
    """One server-sent event."""
    return f"data: {json.dumps(data)}\n\n"


DONE = "data: [DONE]\n\n"


@dataclass(frozen=True)
class Shape:
    """One endpoint's reply shape: its object names, its id prefix, and how a choice carries text."""

    whole_object: str
    chunk_object: str
    id_prefix: str
    chat: bool

    def choice(self, text: str, finish: str | None, streamed: bool) -> dict[str, Any]:
        if not self.chat:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        if streamed:
            return {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
        message = {"role": "assistant", "content": text}
        return {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}


CHAT = Shape("chat.completion", "chat.completion.chunk", "chatcmpl", chat=True)
COMPLETION = Shape("text_completion", "text_completion", "cmpl", chat=False)


@dataclass(frozen=True)
class Reply:
    """A reply besides its booking: its shape, its text, the request's wishes, the fault drawn for it."""

    shape: Shape
    model: str
    tokens: list[str]
    finish: str
    stream: bool = False
    include_usage: bool = False
    continuous_usage: bool = False
    fault: str | None = None
    created: int = field(default_factory=lambda: int(time.time()))

    def envelope(self, booking: Booking, obj: str) -> dict[str, Any]:
        rid = f"{self.shape.id_prefix}-felab-{booking.rid}"
        return {"id": rid, "object": obj, "created": self.created, "model": self.model}

    def whole(self, booking: Booking) -> dict[str, Any]:
        """The reply in one piece (not streamed)."""
        choice = self.shape.choice("".join(self.tokens), self.finish, streamed=False)
        return {
            **self.envelope(booking, self.shape.whole_object),
            "choices": [choice],
            "usage": booking.usage(),
        }

    def chunk(self, booking: Booking, choices: list[dict[str, Any]], sent: int) -> str:
        """One streamed chunk, with the usage key as the request asked (`sent`: reply tokens so far)."""
        data = {**self.envelope(booking, self.shape.chunk_object), "choices": choices}
        if self.continuous_usage:
            prompt = booking.prompt_tokens
            data["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": sent,
                "total_tokens": prompt + sent,
            }
        elif self.include_usage:
            data["usage"] = None
        return frame(data)

    def opening(self, booking: Booking) -> str | None:
        """Chat's role chunk, sent with the first token as llama.cpp and vLLM send it (a legacy
        completion has none)."""
        if not self.shape.chat:
            return None
        role = {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
        return self.chunk(booking, [role], 0)

    def token(self, booking: Booking, i: int) -> str:
        """The chunk of reply token i (the last one carries the finish_reason)."""
        last = i == len(self.tokens) - 1
        choice = self.shape.choice(self.tokens[i], self.finish if last else None, streamed=True)
        return self.chunk(booking, [choice], i + 1)

    def usage(self, booking: Booking) -> str:
        """The last chunk before [DONE] when include_usage is set: the whole usage, no choices."""
        return frame(
            {**self.envelope(booking, self.shape.chunk_object), "choices": [], "usage": booking.usage()}
        )
