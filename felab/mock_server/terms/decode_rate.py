"""Decode rate: a step that writes reply tokens costs 1 / decode_tokens_per_s.

One stream alone writes decode_tokens_per_s tokens a second: each token is a step.
"""

from felab.mock_server.terms.term import Term

TERM = Term(
    name="decode_rate",
    settings=("decode_tps",),
    basis=lambda step, rates: 1.0 if step.decodes else 0.0,
    coefficient=lambda rates: 1 / rates.decode_tokens_per_s,
    values=lambda c: {"decode_tps": 1 / c["decode_rate"]} if c["decode_rate"] > 0 else {},
    probe="decode",
    meaning="a step that writes reply tokens",
    formula="1 / decode rate   (a step with any stream decoding)",
    streams_only=True,
)
