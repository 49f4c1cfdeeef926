"""Why the twin missed a kind of work, read from the profile's terms (the held-out phase prints it).

A miss (the twin's median more than 10% or the floor from the real server's) has one of these
causes, tried in this order:

    noise    no larger than the real server's own spread between its rounds: a second run of the
             same work would move the real median as far, so the profile cannot be blamed;
    count    the twin counted the prompts' tokens differently from the real server (by more than
             3%, the same way as the miss, and by a third of it at least: a twin that counts more
             is slower): its tokenizer or characters-per-token ratio is off for this text;
    alike    the kind's prompts, read alone, miss the same way: the cold kind nearest their size
             (within 1.5x) missed by as much (within 5 points, the same sign). The steps they share
             are priced as the server shares them; what is off is the prompts' own price, and that
             kind's line says why (2 and 4 prompts at once on one seat, 2026-12-07: -20% and -19%,
             beside a cold kind of their size at -19%, a spread of the server's own);
    carried  most of the twin's time is a wait behind a cold prompt (a warm question sent 100 ms
             after one), and the cold kind nearest that prompt's size missed by a third as many
             ms at least, the same way: the wait carries the cold prompt's error whole, so a -20%
             on a 200 ms prompt is -40 ms on a question of 100 (np1, 2026-12-07: the question's
             first token comes 13 to 30 ms after the cold prompt's, in llama-server's log);
    waiting  most of the twin's time is spent behind other prompts' steps (the kind sends prompts
             together): the miss is in how steps are shared (the loop, batch_slowdown), not in the
             price of any one prompt;
    a term   the work priced alone on an idle engine is mostly one cost term, and the miss would
             close if that term cost so much more (or less). Where no term could close it (it would
             have to more than double, or go below nothing) it is a mechanism the twin lacks. A
             miss over 3 times calibrate's own median residual is said to be about the work (what
             ran before it) more than the term: the same terms fitted calibrate's prompts.

The prices are the registry's own (felab/mock_server/terms/): each term's coefficient from the
profile's settings times its basis summed over the prompt's steps, so the shares add up to the
twin's time for the work alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from felab.calibrate.probes import Sample
from felab.mock_server import terms
from felab.mock_server.profile import timing_of
from felab.mock_server.step import Step, prompt_steps, reply_context

COUNT_TOLERANCE = 0.03
"""How far the two token counts may differ before the count is the cause."""
WAITING_SHARE = 0.5
"""The twin's median is mostly waiting when more than this share of it is not the price alone."""
ALIKE_POINTS = 0.05
"""A kind misses as its prompts alone do when its error is within this of a cold kind's."""
ALIKE_SIZE = 1.5
"""...and that cold kind's prompts are within this factor of its own (uncached tokens)."""


@dataclass(frozen=True)
class Alone:
    """A kind of cold prompts read alone, as the alike cause compares with it."""

    kind: str
    tokens: int
    """Its prompts' median uncached tokens (the real server's count)."""
    error: float
    """The twin's median against the real one, a share (-0.19: 19% short)."""
    said: str | None = None
    """Why it missed (this module's line), or None: it was within target."""
    short_ms: float = 0.0
    """How many ms the twin's median fell short of the real one (negative: it was slower)."""

    @classmethod
    def of(cls, kind: str, real: float, twin: float, samples: list[Sample], said: str | None) -> Alone:
        """A cold kind from its medians (real and twin, ms), the real server's samples and its line."""
        error = (twin - real) / real if real else 0.0
        return cls(kind, median_uncached(samples), error, said, real - twin)


def median_uncached(samples: list[Sample]) -> int:
    """The uncached prompt tokens at the median (the lower middle of an even count; 0 if none)."""
    sizes = sorted(s.uncached for s in samples)
    return sizes[(len(sizes) - 1) // 2] if sizes else 0


def priced_ms(sample: Sample, settings: Mapping[str, Any], per_token: bool = False) -> dict[str, float]:
    """What the twin charges for `sample`'s work alone, ms by term (those that charge anything): its
    prompt's steps and the request's overhead; or, `per_token`, one reply token's decode step."""
    timing = timing_of(dict(settings))
    if per_token:
        steps = [Step(decodes=(reply_context(sample.prompt_tokens, sample.output_tokens),))]
        parts: dict[str, float] = {}
    else:
        steps = prompt_steps(sample.uncached, sample.cached_tokens or 0, settings.get("batch_tokens"))
        parts = {"overhead": timing.overhead_ms}
    coefficients = terms.coefficients(timing)
    for step in steps:
        for name, units in terms.basis(step, timing).items():
            parts[name] = parts.get(name, 0.0) + 1000 * coefficients[name] * units
    return {name: ms for name, ms in parts.items() if ms}


def median_sample(samples: list[Sample], value: Callable[[Sample], float | None]) -> Sample | None:
    """The sample at the median of `value` (the lower middle one of an even count)."""
    valued = sorted((v, i) for i, s in enumerate(samples) if (v := value(s)) is not None)
    return samples[valued[(len(valued) - 1) // 2][1]] if valued else None


def cause(
    real: float,
    twin: float,
    real_itself: float | None,
    samples: tuple[list[Sample], list[Sample]],
    settings: Mapping[str, Any],
    per_token: bool = False,
    fitted_pct: float | None = None,
    cold: Sequence[Alone] = (),
    behind: int | None = None,
) -> str:
    """One line: why the twin's median `twin` missed the real `real` on this kind of work.
    `samples` are the real server's and the twin's; `real_itself` the real server's spread;
    `fitted_pct` how far calibrate's fit missed its own cold prompts (the median, %); `cold`
    the kinds of cold prompts read alone in the same run (the alike cause); `behind` the tokens
    of the cold prompt this kind waits behind, if it does (the carried cause)."""
    error = (twin - real) / real if real else 0.0
    if real_itself is not None and abs(error) <= real_itself:
        spread = f"the real server's own spread between rounds ({real_itself:.0%})"
        return f"noise: {error:+.0%} is no more than {spread}"
    counted = count_cause(*samples, error)
    if counted and not per_token:
        return counted
    like = None if per_token else alike_cause(error, samples[0], cold)
    if like:
        return like
    value = (lambda s: s.tpot_ms) if per_token else (lambda s: s.ttft_ms)
    middle = median_sample(samples[1], value)
    if middle is None:
        return "unknown: the twin has no timed sample of this kind"
    parts = priced_ms(middle, settings, per_token)
    alone = sum(parts.values())
    if not per_token and twin - alone > WAITING_SHARE * twin:
        return carried_cause(real - twin, behind, cold) or waiting_cause(twin, alone, settings)
    said = term_cause(real - twin, parts, per_token)
    if fitted_pct is not None and not per_token and 100 * abs(error) > 3 * max(fitted_pct, 1.0):
        said += (
            f"; yet the same terms fitted calibrate's own cold prompts within {fitted_pct:g}% (median): "
            f"this work differs from calibrate's (what ran on the seat before it, the machine's load) "
            f"more than the term is off"
        )
    return said


def count_cause(real: list[Sample], twin: list[Sample], error: float) -> str | None:
    """The count cause, if the twin's median prompt differs from the server's by over 3%, the same
    way as the miss (`error`, a share), and by a third of it or more."""
    a = sorted(s.prompt_tokens for s in real)
    b = sorted(s.prompt_tokens for s in twin)
    if not a or not b or not a[len(a) // 2]:
        return None
    mine, theirs = b[len(b) // 2], a[len(a) // 2]
    off = (mine - theirs) / theirs
    if abs(off) <= COUNT_TOLERANCE or off * error <= 0 or abs(off) < abs(error) / 3:
        return None
    return (
        f"count: the twin counted {abs(off):.0%} {'more' if off > 0 else 'fewer'} prompt tokens than the "
        f"server (median {mine:,} against {theirs:,}): the profile's token count is off for this text"
    )


def nearest_cold(alone: Sequence[Alone], tokens: int) -> Alone | None:
    """The cold kind whose prompts are nearest `tokens` in size, if within ALIKE_SIZE of it."""
    near = [
        a
        for a in alone
        if min(a.tokens, tokens) > 0 and max(a.tokens, tokens) <= ALIKE_SIZE * min(a.tokens, tokens)
    ]
    return min(near, key=lambda a: abs(math.log(a.tokens / tokens)), default=None)


def alike_cause(error: float, real: list[Sample], alone: Sequence[Alone]) -> str | None:
    """The alike cause, if a cold kind of about the same prompts (`alone`) missed by as much, the
    same way, as this kind (`error`, a share; `real`, the real server's samples of it)."""
    nearest = nearest_cold(alone, median_uncached(real))
    if nearest is None or error * nearest.error <= 0 or abs(error - nearest.error) > ALIKE_POINTS:
        return None
    why = nearest.said.split(":")[0] if nearest.said else "within target"
    return (
        f"alike: {error:+.0%}, as its prompts read alone ({nearest.kind}: {nearest.error:+.0%}, {why}): "
        f"the steps they share are priced as the server shares them; the prompts' own price is what is off"
    )


def carried_cause(short_ms: float, behind: int | None, alone: Sequence[Alone]) -> str | None:
    """The carried cause, if the twin waited behind a cold prompt of `behind` tokens and the cold
    kind nearest it (within 1.5x) fell short the same way by a third of `short_ms` at least (the
    count cause's share)."""
    nearest = nearest_cold(alone, behind or 0)
    if nearest is None or nearest.short_ms * short_ms <= 0 or abs(nearest.short_ms) < abs(short_ms) / 3:
        return None
    return (
        f"carried: the twin waits behind a cold prompt of ~{behind:,} tokens, and {nearest.kind} "
        f"missed by {nearest.short_ms:+.0f} ms ({nearest.error:+.0%}): the wait carries that whole, "
        f"{abs(nearest.short_ms):.0f} of this kind's {abs(short_ms):.0f} ms"
    )


def waiting_cause(twin: float, alone: float, settings: Mapping[str, Any]) -> str:
    """The waiting cause: the twin's median is mostly time behind other prompts' steps."""
    slowdown = settings.get("batch_slowdown", 0.0)
    return (
        f"waiting: {twin - alone:.0f} of the twin's {twin:.0f} ms is waiting behind other prompts' steps "
        f"(alone it prices the work at {alone:.0f} ms): the miss is in how steps are shared "
        f"(batch_tokens {settings.get('batch_tokens')}, batch_slowdown {slowdown})"
    )


def term_cause(gap: float, parts: dict[str, float], per_token: bool) -> str:
    """The term cause: the term that prices most of the work, and how much it would have to move."""
    alone = sum(parts.values())
    top = max(parts, key=lambda k: parts[k])
    change = gap / parts[top] if parts[top] else float("inf")
    unit = "a reply token" if per_token else "the work alone"
    mix = ", ".join(f"{k} {v / alone:.0%}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]) if v)
    priced = f"the twin prices {unit} at {alone:.1f} ms ({mix})"
    if -1 < change <= 1:
        return f"term {top}: {priced}; the miss closes if {top} costs {change:+.0%}"
    return (
        f"mechanism: {priced}; {top} would have to cost {change:+.0%} to close it: no one term can, the "
        f"server does something here the twin does not model"
    )
