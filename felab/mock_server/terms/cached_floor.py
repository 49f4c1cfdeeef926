"""Cached floor: reusing a cached prefix is not free.

A prompt that finds c tokens cached pays cached_token_us for each, once, in its first piece:
the engine copies or re-reads them (llama.cpp's --cache-ram copy back into a seat, vLLM's
offloaded blocks). 0 unless a fit finds it improves the held-out error.
"""

from felab.mock_server.step import Step
from felab.mock_server.terms.term import Rates, Term


def reused(step: Step, rates: Rates) -> float:
    """The cached tokens of the prompts whose first piece the step holds (one piece, most steps:
    read without a generator, the same count)."""
    pieces = step.pieces
    if len(pieces) == 1:
        return float(pieces[0].cached) if pieces[0].opens else 0.0
    return float(sum([p.cached for p in pieces if p.opens]))


TERM = Term(
    name="cached_floor",
    settings=("cached_token_us",),
    basis=reused,
    coefficient=lambda rates: rates.cached_token_us * 1e-6,
    values=lambda c: {"cached_token_us": c["cached_floor"] * 1e6},
    probe="openings",
    meaning="each cached token a prompt reuses costs a little",
    formula="cached_token_us · cached tokens (a prompt's first piece)",
)
