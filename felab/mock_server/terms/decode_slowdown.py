"""Decode slowdown: each further stream in a decode step makes the step longer.

k streams decoding at once: each token gap is (1 + decode_slowdown·(k − 1)) / decode rate.
"""

from felab.mock_server.terms.term import Term

TERM = Term(
    name="decode_slowdown",
    settings=("decode_slowdown",),
    basis=lambda step, rates: float(max(len(step.decodes) - 1, 0)),
    coefficient=lambda rates: rates.decode_slowdown / rates.decode_tokens_per_s,
    values=lambda c: (
        {"decode_slowdown": c["decode_slowdown"] / c["decode_rate"]} if c.get("decode_rate") else {}
    ),
    probe="decode",
    meaning="each further stream decoding slows the step",
    formula="decode_slowdown / decode rate · (streams − 1)",
    streams_only=True,
)
