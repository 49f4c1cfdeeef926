"""Batch slowdown: a step holding pieces of several prompts takes longer than its parts.

llama.cpp splits such a batch into smaller equal pieces per seat, each a pass of its own; so
its prompt tokens cost batch_slowdown more each (relative to the prefill rate).
"""

from felab.mock_server.terms.term import Term

TERM = Term(
    name="batch_slowdown",
    settings=("batch_slowdown",),
    basis=lambda step, rates: float(step.new_tokens if len(step.pieces) > 1 else 0),
    coefficient=lambda rates: rates.batch_slowdown / rates.prefill_tokens_per_s,
    values=lambda c: (
        {"batch_slowdown": c["batch_slowdown"] / c["prefill_rate"]} if c.get("prefill_rate") else {}
    ),
    probe="together",
    meaning="a step shared by several prompts costs more per token",
    formula="batch_slowdown / prefill rate · new tokens   (steps with several prompts)",
)
