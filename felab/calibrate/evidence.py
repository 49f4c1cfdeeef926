"""How far a calibration can be trusted: the repeats' spread, the machine's load, values no engine has.

A fit always gives numbers. Whether they describe the server depends on what they were
fitted from, and calibrate can see that itself:

- **The repeats' spread.** Each cold length is sent several times back to back, the same
  work each time. On a quiet machine the repeats agree within a few %; on a busy one the
  same 1,900-token prompt took 570 ms and then 3,787. A repeat more than BUSY_SHARE away
  from its length's median is one the machine or the server disturbed; when more than
  BUSY_COUNT_SHARE of them are, the medians (the fit's points) are not the server's speed.
- **The machine's load** (`os.getloadavg`, against its cores): other programs share the
  CPU with the server and with the clock that times it.
- **The machine's speed within the calibration.** The reference length's cold prompts are sent
  again after every other timing probe; taking more than DRIFT times (or less than 1/DRIFT) what they
  took at the start, they say the machine slowed or sped up while calibrate measured (a VM's
  neighbours, a laptop's power saving: no load average shows those), so the fit mixes two speeds.
- **Values no real engine has.** A prefill rate over MAX_PREFILL_TPS (the fit sets 1e9
  when the time did not grow with the prompt at all). Such a profile is refused, not written.
- **Prefill too small to see**: under PREFILL_VISIBLE of the longest prompt's time, the
  rate cannot be told from the noise of the rest (a fast engine behind a slow network).
- **The fit's own error.** A cold length the fitted formula misses by more than
  FIT_ERROR_PCT, or an overhead fitted at 0 while the shortest prompts take clearly
  longer than the formula gives them (OVERHEAD_SHORT_RATIO): these three are written, with a warning
  that calibrate prints, that the profile keeps in `[fit] warnings` and that `--check`
  repeats.

The bounds and why are in docs/practice-server.md ("How calibrate knows its measurement is bad").
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from felab.calibrate import fit
from felab.calibrate.plan import Measurements
from felab.calibrate.probes import Sample
from felab.mock_server.profile import timing_of, worded
from felab.mock_server.timing import TimingModel

BUSY_SHARE = 0.5
"""A repeat this far from its length's median (a share of it) was disturbed: on a quiet machine
repeats agree within a few %, so half of the time again is no noise of the server's own."""
BUSY_COUNT_SHARE = 0.1
"""More than this share of repeats disturbed (and at least 2) says the machine or server was busy."""
MAX_PREFILL_TPS = 5e6
"""Prompt tokens a second no engine reaches: a datacenter GPU prefills a small model at some
10^5 to 10^6 tokens a second; the kit's tiny model on a laptop CPU about 10^5."""
PREFILL_VISIBLE = 0.05
"""Prefill (the rate and attention terms) must be at least this share of the longest cold prompt's
time: below it, the time did not grow with the prompt's length, and the rate is noise."""
FIT_ERROR_PCT = 25.0
"""A cold length whose median the fitted formula misses by more than this (%) is not described."""
DRIFT = 1.25
"""The reference prompts sent again at the end of calibrate took more than this times (or less than
its inverse) what the same length took at the start: the machine's speed moved while it measured.
Repeats of one length on a quiet machine here agree within about 10% (105 to 118 ms at 1,899
tokens); the speed moved 0.63x to 1.65x between a calibration and a minute later."""
SPEED_MOVED = "the machine's speed moved while calibrate measured"
"""How `drift_warning` begins (the held-out phase looks for it in a profile's warnings)."""
OVERHEAD_SHORT_RATIO = 1.5
"""An overhead fitted at 0 is suspect when the shortest prompts took more than this times what the
formula gives them: the floor is clearly positive, and the fit put it elsewhere."""


def disturbed(groups: Sequence[Sequence[float]], share: float = BUSY_SHARE) -> tuple[int, int]:
    """(how many, of how many) repeats are more than `share` of their group's median away from it."""
    out = total = 0
    for g in groups:
        if len(g) < 2:
            continue
        mid = fit.median(g)
        out += sum(abs(t - mid) > share * mid for t in g)
        total += len(g)
    return out, total


def load_average() -> float | None:
    """The machine's 1-minute load average (None where the system has none)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def busy_warning(m: Measurements, load: float | None, cores: int | None = None) -> str | None:
    """The warning for a busy machine or server, from the cold repeats' spread and the load."""
    cores = cores or os.cpu_count() or 1
    n, total = disturbed([[s.ttft_ms for s in g] for g in m.cold])
    spread = total and n >= 2 and n > BUSY_COUNT_SHARE * total
    loaded = load is not None and load > cores
    if not spread and not loaded:
        return None
    said = [f"{n} of {total} repeats of a cold prompt differ by more than {BUSY_SHARE:.0%}"] if spread else []
    if load is not None:
        said.append(f"load average {load:.1f} on {cores} cores")
    return (
        f"the machine or the server was busy: {'; '.join(said)}. The fitted times hold that "
        f"business, not the server's own speed. Close other programs (and other clients of the "
        f"server), then calibrate again."
    )


def drift(m: Measurements, settings: dict[str, Any]) -> float | None:
    """How many times their time at the start the reference prompts took at the end of calibrate:
    the medians of each prompt's time over what the fitted formula gives its length (new text of
    the same length counts a few tokens more or fewer). None: not sent again."""
    after, before = m.reference_after, m.reference_before
    if not after or not before:
        return None
    timing = model_of(settings)

    def speed(g: list[Sample]) -> float:
        return fit.median([s.ttft_ms / timing.alone_ms(s.uncached, s.cached_tokens or 0) for s in g])

    start = speed(before)
    return speed(after) / start if start > 0 else None


def drift_warning(m: Measurements, settings: dict[str, Any]) -> str | None:
    """The warning for a machine whose speed moved while calibrate measured (`drift` beyond DRIFT)."""
    ratio = drift(m, settings)
    if ratio is None or 1 / DRIFT <= ratio <= DRIFT:
        return None
    tokens = m.reference_before[0].prompt_tokens  # (the length calibrate said it sent again)
    return (
        f"{SPEED_MOVED}: the reference prompts ({tokens:,} tokens, "
        f"cold) took {ratio:.2f}x at the end what they took at the start, so the fitted terms mix two "
        f"speeds (another program's work on the shared cores, a laptop's power saving). Calibrate again "
        f"when the machine is quiet, plugged in, with nothing else running."
    )


def invisible(m: Measurements, settings: dict[str, Any]) -> str | None:
    """Prefill under PREFILL_VISIBLE of the longest cold prompt's time, in words (None: visible)."""
    longest = max((g for g in m.cold if g), key=lambda g: g[0].uncached, default=None)
    if longest is None:
        return None
    u = longest[0].uncached
    ms = fit.median([s.ttft_ms for s in longest])
    prefill = prefill_ms(settings, u)
    if ms <= 0 or prefill >= PREFILL_VISIBLE * ms:
        return None
    return (
        f"prefill of {prefill:.1f} ms in the {ms:.0f} ms of a {u:,}-token cold prompt: the time "
        f"did not grow with the prompt's length"
    )


def prefill_ms(settings: dict[str, Any], tokens: int) -> float:
    """What the settings give a cold prompt of `tokens` for its prefill (the twin's formula, the
    registry's terms: no overhead), ms."""
    return 1000 * model_of(settings).prefill_s(tokens)


def model_of(settings: dict[str, Any]) -> TimingModel:
    """The timing model of a profile's settings as calibrate writes them (words such as "none" read)."""
    return timing_of({k: worded(k, v) for k, v in settings.items()})


def refusals(m: Measurements, settings: dict[str, Any]) -> list[str]:
    """Fitted values outside what any real engine does: each a reason to write no profile (a rate
    over MAX_PREFILL_TPS; with it, the invisible prefill that explains it)."""
    rate = float(settings["prefill_tps"])
    if rate <= MAX_PREFILL_TPS:
        return []
    why = invisible(m, settings)
    return [f"a prefill rate of {rate:,.0f} tokens/s (no engine reads over {MAX_PREFILL_TPS:,.0f})"] + (
        [why] if why else []
    )


def warnings(
    m: Measurements, settings: dict[str, Any], fitted: dict[str, Any], load: float | None
) -> list[str]:
    """What makes this profile doubtful, each a sentence (none: nothing seen)."""
    out = []
    out += [w for w in (busy_warning(m, load), drift_warning(m, settings)) if w]
    hidden = invisible(m, settings) if float(settings["prefill_tps"]) <= MAX_PREFILL_TPS else None
    if hidden:
        out.append(
            f"{hidden}, so the prefill rate cannot be told from the other costs' noise (a fast engine "
            f"behind a slow network, or a busy machine): the twin's prefill may be far off"
        )
    worst = float(fitted["ttft_residual_max_pct"])
    if worst > FIT_ERROR_PCT:
        out.append(
            f"the fitted formula misses a cold prompt length by {worst:.0f}% (more than {FIT_ERROR_PCT:g}%): "
            f"the server does not follow it, or its times were disturbed"
        )
    groups = [g for g in m.cold if g]
    if groups and float(fitted["overhead_fitted_ms"]) <= 0:
        short = min(groups, key=lambda g: g[0].uncached)
        ms = fit.median([s.ttft_ms for s in short])
        formula = prefill_ms(settings, short[0].uncached)
        if ms > OVERHEAD_SHORT_RATIO * formula:
            out.append(
                f"the overhead was fitted at 0, yet a {short[0].uncached:,}-token prompt took {ms:.0f} ms "
                f"against the formula's {formula:.0f}: the fixed cost was put in the other terms"
            )
    return out
