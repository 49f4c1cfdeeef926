"""One step of an engine: the batch it runs in one forward pass, described by what it holds.

A real engine is a loop (llama.cpp's slot loop, vLLM's and SGLang's schedulers): each step it
forms a batch from its running requests, runs it, and emits what the step produced. The batch
is prompt tokens of requests still reading their prompts, in pieces, and one token for each
request already writing its reply:

    Step(pieces=(Piece(new=512, context=1024, opens=False),), decodes=(3100, 250))

is a step that reads 512 prompt tokens of one request (1,024 of its tokens are already in the
KV cache) and writes a reply token for two streams, with 3,100 and 250 tokens of context.

What a step costs is the sum of the cost terms (felab/mock_server/terms/): each term is a
coefficient times a basis function of the step (new tokens, attention pairs, decode streams,
...). So the twin prices any batch the loop forms, and calibrate fits the coefficients from
client-side timings with one least-squares fit over the same basis functions.
"""

from __future__ import annotations

from typing import NamedTuple


class Piece(NamedTuple):
    """Prompt tokens of one request read in a step. (A named tuple, not a frozen dataclass: as
    immutable, and some six times cheaper to make, which counts where a replay forms 76,000 steps.)"""

    new: int
    """Prompt tokens read in this step."""
    context: int = 0
    """Tokens of the same request already in the KV cache before them (its cached prefix, and
    the pieces read in earlier steps)."""
    opens: bool = True
    """Whether this is the first piece of its prompt read (where its cached prefix is met)."""
    cached: int = 0
    """Tokens of its prompt found in the cache (the same for all its pieces)."""
    seq: int | None = None
    """Its seat's number on an engine with a KV cache per seat (llama-server -np N), which
    decides the ubatches it shares (terms/untiled.py); None: it shares none."""


class Step(NamedTuple):
    """One forward pass: the prompt pieces it reads, and the context of each stream it decodes
    (a named tuple, as `Piece`)."""

    pieces: tuple[Piece, ...] = ()
    decodes: tuple[int, ...] = ()
    """One entry per stream writing a reply token in this step: the tokens of context it attends."""
    decode_seqs: tuple[int | None, ...] = ()
    """Their seats' numbers, in order (as `Piece.seq`); empty: none known."""

    @property
    def new_tokens(self) -> int:
        """Prompt tokens read in this step."""
        pieces = self.pieces
        return pieces[0].new if len(pieces) == 1 else sum([p.new for p in pieces])  # (no generator:
        # a decode step has none, and a replay prices 100,000)


def prompt_steps(uncached: int, cached: int = 0, batch_tokens: int | None = None) -> list[Step]:
    """The steps of one prompt alone on an idle engine: its uncached tokens in pieces of up to
    `batch_tokens` (llama.cpp's -b; None: all in one step), each after the tokens before it."""
    size = batch_tokens or max(uncached, 1)
    steps: list[Step] = []
    done = 0
    while done < uncached or not steps:
        new = min(size, uncached - done)
        steps.append(Step((Piece(new, cached + done, opens=not done, cached=cached),)))
        done += new
    return steps


def reply_context(prompt_tokens: int, reply_tokens: int) -> int:
    """The context a reply's tokens attend to, on average: its prompt, and half the reply before
    them (token i attends to the prompt and the i tokens written before it). A 200-token reply
    after a 100-token prompt decodes at a mean context of 199, not 100: with a context term that
    is the difference between a gap right and a gap 30% short (docs/runs, the held-out phase)."""
    return prompt_tokens + max(reply_tokens - 1, 0) // 2
