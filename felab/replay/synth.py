"""Prompts for a trace that has no text: equal hash ids become equal text, block by block.

A trace says *which* blocks two prompts share (their ids), not what they said. To send
it to a real server, each id becomes a block of text of the right length, the same
every time (no randomness):

    id 2354, 512-token block  ->  "[2354] Block text of a replayed prompt; ..." (2,048 characters)

so two prompts share text exactly as far as they share ids, and a server's prefix cache
can find exactly what the trace says it could.

Lengths are in the practice server's tokens, 4 characters each (cache.py). Its chat
template adds characters around the message (`<|user|>\\n` in front, `\\n<|assistant|>\\n`
behind, wire.py's `chat_template`, read here rather than copied). So that the server's
blocks fall on the trace's blocks, the first block gives up the template's front to it,
and the partial block at the end gives up the template's tail: the templated prompt is
4 × input_length characters, and the server's block j holds exactly the text of id j.
A prompt that ends within 3 tokens after a block boundary has no room for the tail
(15 characters, 4 tokens): it goes out up to 4 tokens longer than the trace says, with
its full blocks intact, so the cache sees what the trace says.

On a real engine the tokenizer is not 4 characters a token (this English-like filler
comes to about that on most), so prompt lengths there are close, not exact; the figures
the replay prints are what the server reported.
"""

from __future__ import annotations

import functools

from felab.mock_server.cache import CHARS_PER_TOKEN
from felab.replay.trace import TraceRequest

FILLER = "Block text of a replayed prompt; the same id always brings back the same words. "
SMALLEST_BLOCK = 16
"""Tokens: a block must hold its id's label and then some (64 characters at least)."""


@functools.cache
def template() -> tuple[str, str]:
    """What the practice server's chat template puts before and after a lone user message."""
    from felab.mock_server.wire import Message, chat_template  # pydantic: only when sending for real

    marker = "\x00"
    front, back = chat_template([Message(role="user", content=marker)]).split(marker)
    return front, back


def block_text(block_id: int, chars: int) -> str:
    """The text of one block: its id first, so two ids differ from their first characters."""
    label = f"[{block_id}] "
    repeat = chars // len(FILLER) + 1
    return (label + FILLER * repeat)[:chars]


def prompt_text(request: TraceRequest, block: int) -> str:
    """The user message for one trace request; see the module's docstring for the lengths."""
    front, back = (len(part) for part in template())
    full = request.input_tokens // block
    parts = []
    for j, block_id in enumerate(request.hash_ids[:full]):
        parts.append(block_text(block_id, block * CHARS_PER_TOKEN - (front if j == 0 else 0)))
    rest = (request.input_tokens - full * block) * CHARS_PER_TOKEN - back - (front if full == 0 else 0)
    if rest > 0:
        tail_id = request.hash_ids[full] if len(request.hash_ids) > full else -1
        parts.append(block_text(tail_id, rest))
    return "".join(parts)
