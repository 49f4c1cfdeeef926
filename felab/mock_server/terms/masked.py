"""Masked attention: a piece's new tokens computed against each other as a whole square.

A causal kernel reads each new token against the tokens before it only: a piece of u new tokens
after c costs u·(c + u/2) pairs (terms/attention.py). An engine that computes the piece's scores
as a full rectangle and masks the upper half afterwards does u·(c + u) pairs: u²/2 more, thrown
away. mlx_lm on a CPU does this (its attention falls back to a matrix product and a mask), and
reads a prompt in pieces of 2,048 (its --prefill-step-size), so a long prompt costs less than its
length squared would say. Measured on mlx_lm.server (the kit's tiny model): 1,000 tokens 341 ms,
2,000 1,025 ms, 4,000 2,755 ms; u·(c + u) per piece of 2,048 gives 341, 1,025 and 2,736.

Cold prompts alone cannot tell this term from attention (with c = 0 both are u²/2); a question
after a cached opening can (c large, u small), so the fit keeps it only where the openings and
the cold prompts disagree about attention's cost. On llama.cpp it comes out 0 and is left out.
"""

from felab.mock_server.terms.term import Term

TERM = Term(
    name="masked",
    settings=("masked_attention_ns",),
    basis=lambda step, rates: sum(p.new * p.new / 2 for p in step.pieces),
    coefficient=lambda rates: rates.masked_attention_ns * 1e-9,
    values=lambda c: {"masked_attention_ns": c["masked"] * 1e9},
    probe="cold, openings",
    meaning="a piece's new tokens are computed against each other as a whole square, half masked",
    formula="masked_ns · Σ new² / 2",
)
