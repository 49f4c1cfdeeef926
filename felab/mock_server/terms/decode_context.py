"""Decode context: a reply token attends to its whole context, so a long prompt slows decode.

Each stream's token in a step costs decode_context_ns per token of its context.
"""

from felab.mock_server.terms.term import Term

TERM = Term(
    name="decode_context",
    settings=("decode_context_ns",),
    basis=lambda step, rates: float(sum(step.decodes)),
    coefficient=lambda rates: rates.decode_context_ns * 1e-9,
    values=lambda c: {"decode_context_ns": c["decode_context"] * 1e9},
    probe="decode",
    meaning="each reply token attends to its context",
    formula="decode_context_ns · Σ context of the streams decoding",
    streams_only=True,
)
