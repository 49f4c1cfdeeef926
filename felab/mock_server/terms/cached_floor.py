"""Cached floor: reusing a cached prefix is not free.

A prompt that finds c tokens cached pays cached_token_us for each, once, in its first piece:
the engine copies or re-reads them (llama.cpp's --cache-ram copy back into a seat, vLLM's
offloaded blocks). 0 unless a fit finds it improves the held-out error.
"""

from felab.mock_server.terms.term import Term

TERM = Term(
    name="cached_floor",
    settings=("cached_token_us",),
    basis=lambda step, rates: float(sum(p.cached for p in step.pieces if p.opens)),
    coefficient=lambda rates: rates.cached_token_us * 1e-6,
    values=lambda c: {"cached_token_us": c["cached_floor"] * 1e6},
    probe="openings",
    meaning="each cached token a prompt reuses costs a little",
    formula="cached_token_us · cached tokens (a prompt's first piece)",
)
