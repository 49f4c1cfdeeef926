"""Prefill rate: each prompt token read costs the same, 1 / prefill_tokens_per_s.

The lesson's whole prefill model: a cold 3,045-token prompt at 2,500 tokens/s takes 1.22 s.
"""

from felab.mock_server.terms import Term

TERM = Term(
    name="prefill_rate",
    settings=("prefill_tps",),
    basis=lambda step, rates: float(step.new_tokens),
    coefficient=lambda rates: 1 / rates.prefill_tokens_per_s,
    values=lambda c: {"prefill_tps": 1 / c["prefill_rate"]} if c["prefill_rate"] > 0 else {},
    probe="cold",
    meaning="each prompt token read costs the same",
    formula="new tokens / prefill rate",
)
