"""The registry of cost terms: what one engine step costs, as a sum of terms.

    step seconds = Σ over terms  coefficient(settings) × basis(step)

Each term is one small object in its own file (`Term`): the settings it reads, its basis
function of a step (new prompt tokens, attention pairs, decode streams, ...), the calibrate
probe that exposes it, and what it means. The step's time is the sum; a prompt alone costs the
sum over its steps (`prompt_seconds`). Because every term is linear in its coefficient, the
time of any request is a linear function of the coefficients, given the steps it waited for:
calibrate fits them all with one weighted least-squares fit over the basis sums.

Adding a term: write its file (a `TERM`, a `Term` from terms/term.py, imported from there: the
term's file never imports this registry), and add it to `TERMS` below. Nothing else changes: the
twin prices steps with `step_seconds`, the fit reads `basis`, the docs list `TERMS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from felab.mock_server.step import Step, prompt_steps
from felab.mock_server.terms.term import Rates, Term


def _registry() -> tuple[Term, ...]:
    from felab.mock_server.terms import (
        attention,
        batch_slowdown,
        cached_floor,
        decode_context,
        decode_rate,
        decode_slowdown,
        masked,
        prefill_rate,
        untiled,
    )

    return (
        prefill_rate.TERM,
        attention.TERM,
        masked.TERM,
        cached_floor.TERM,
        untiled.TERM,
        batch_slowdown.TERM,
        decode_rate.TERM,
        decode_slowdown.TERM,
        decode_context.TERM,
    )


TERMS: tuple[Term, ...] = _registry()
"""Every cost term, in the order the docs list them."""


def basis(step: Step, rates: Rates) -> dict[str, float]:
    """Each term's basis function of `step`, by name."""
    return {t.name: t.basis(step, rates) for t in TERMS}


def coefficients(rates: Rates) -> dict[str, float]:
    """Each term's coefficient (seconds per unit of its basis), by name."""
    return {t.name: t.coefficient(rates) for t in TERMS}


def pricer(rates: Rates) -> Callable[[Step], float]:
    """What a step costs under these settings: the sum of its terms, each coefficient worked out
    once (a term at 0 is not asked its basis: a replay prices every request, and with the
    lesson's settings most terms are 0). The engine loop keeps one for all its steps.

    The terms last in `TERMS` that read only the streams decoding (`Term.streams_only`) are worked
    out once for each streams tuple: the loop forms a prompt's steps back to back with the same
    one (loop.py, `_run_on`), so a replay asks them for 60,000 steps and works them out for
    14,000. They are added in the same order, so each step's sum is the same to the last bit."""
    priced = [(t, c) for t in TERMS if (c := t.coefficient(rates))]
    cut = len(priced)
    while cut and priced[cut - 1][0].streams_only:
        cut -= 1
    general = [(t.basis, c) for t, c in priced[:cut]]
    streams = [(t.basis, c) for t, c in priced[cut:]]
    last: list = [None, []]  # the decodes tuple priced last (held, so its id is not reused), its parts

    def price(step: Step) -> float:
        total = 0.0
        for basis, c in general:  # (a loop, not sum over a generator: a replay prices 300,000 steps)
            total += c * basis(step, rates)
        if step.decodes is not last[0]:
            last[:] = step.decodes, [c * basis(step, rates) for basis, c in streams]
        for part in last[1]:
            total += part
        return total

    return price


def step_seconds(step: Step, rates: Rates) -> float:
    """What `step` costs: the sum of its terms."""
    return pricer(rates)(step)


def prompt_seconds(uncached: int, cached: int, rates: Rates, batch_tokens: int | None = None) -> float:
    """A prompt alone on an idle engine: the sum over its steps (step.prompt_steps)."""
    return prompt_price(pricer(rates), uncached, cached, batch_tokens)


def prompt_price(
    price: Callable[[Step], float], uncached: int, cached: int, batch_tokens: int | None = None
) -> float:
    """`prompt_seconds` with a pricer already made (`pricer`: the loop and the timing model keep
    one, and ask this for every request)."""
    return sum(map(price, prompt_steps(uncached, cached, batch_tokens)))


def settings_from(coefs: Mapping[str, float]) -> dict[str, Any]:
    """The settings that give these coefficients (the fit's answer, as a profile writes it)."""
    out: dict[str, Any] = {}
    for t in TERMS:
        if t.name in coefs:
            out.update(t.values(coefs))
    return out
