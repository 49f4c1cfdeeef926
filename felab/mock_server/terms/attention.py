"""Attention: each new prompt token attends to every token before it.

A piece of u new tokens after c in context costs attention_ns × u·(c + u/2): token i attends to
c + i tokens, and the sum of c+1 ... c+u is u·(c + u/2) to within u/2. So a long cold prompt
grows faster than linearly, and a question read after a long cached opening costs more per
token than the same question read cold. Split into pieces, the sum over pieces is the same as
the prompt's whole u·(c + u/2).
"""

from felab.mock_server.terms import Term

TERM = Term(
    name="attention",
    settings=("prefill_attention_ns",),
    basis=lambda step, rates: sum(p.new * (p.context + p.new / 2) for p in step.pieces),
    coefficient=lambda rates: rates.attention_ns * 1e-9,
    values=lambda c: {"prefill_attention_ns": c["attention"] * 1e9},
    probe="cold, openings",
    meaning="each new token attends to the tokens before it",
    formula="attention_ns · Σ new · (context + new / 2)",
)
