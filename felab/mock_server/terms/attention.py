"""Attention: each new prompt token attends to every token before it.

A piece of u new tokens after c in context costs attention_ns × u·(c + u/2): token i attends to
c + i tokens, and the sum of c+1 ... c+u is u·(c + u/2) to within u/2. So a long cold prompt
grows faster than linearly, and a question read after a long cached opening costs more per
token than the same question read cold. Split into pieces, the sum over pieces is the same as
the prompt's whole u·(c + u/2).
"""

from felab.mock_server.step import Step
from felab.mock_server.terms.term import Rates, Term


def pairs(step: Step, rates: Rates) -> float:
    """Σ new · (context + new / 2) over the step's pieces: the attention pairs it computes. Most
    steps hold one piece, read without a generator (a replay prices 120,000 steps); the same sum."""
    pieces = step.pieces
    if len(pieces) == 1:
        p = pieces[0]
        return p.new * (p.context + p.new / 2)
    return sum([p.new * (p.context + p.new / 2) for p in pieces])


TERM = Term(
    name="attention",
    settings=("prefill_attention_ns",),
    basis=pairs,
    coefficient=lambda rates: rates.attention_ns * 1e-9,
    values=lambda c: {"prefill_attention_ns": c["attention"] * 1e9},
    probe="cold, openings",
    meaning="each new token attends to the tokens before it",
    formula="attention_ns · Σ new · (context + new / 2)",
)
