"""Least squares, closed form: the timing terms from what the probes measured.

Small fits, each solved exactly (normal equations, Gaussian
elimination; no numpy, which a learner's core install does not have):

    TTFT_ms ≈ overhead_ms + u · 1000 / prefill_tps + attention_ns·1e-6 · u · (c + u/2)

        u = uncached tokens (prefilled now), c = tokens already in context before them.
        Each new token attends to every token before it, so reading u tokens after c
        costs a term in u·(c + u/2) (the sum of c+1 ... c+u, over 1, per token): the
        quadratic growth of a long cold prompt and the extra cost of a question read
        after a long cached opening are the same term.

    reuse: TTFT_ms ≈ overhead_ms + u · 1000 / prefill_tps + max(attention, cached_token_us·1e-3 · c)
        after c cached tokens (timing.py's floor): each follow-up's time beyond the linear term,
        per cached token; their median (a follow-up where attention is the larger gives only
        an upper bound, and most follow-ups carry a few new tokens, where the floor holds).

    rows: TTFT_ms ≈ a + b · u + d · u² + untiled_ns·1e-6 · rows(u) · (c + u)   (one cached opening, c)
        rows(u) = u mod ubatch_tokens when below tile_tokens, else 0 (timing.py's last piece):
        each pair of candidates is fitted, and kept only if it halves the weighted squared error
        of the same fit without it (a + b·u + d·u² alone: c is the same for every call, so the attention
        term's u·c is part of b·u).

    interval(k) ≈ interval(1) · (1 + decode_slowdown · (k − 1))    k streams decoding at once
    interval(context) ≈ interval(1) + decode_context_ns·1e-6 · context     after a long prompt

    prompt_tokens ≈ characters / chars_per_token                   how the engine counts text

Timing fits are weighted by 1/(TTFT + 10 ms): the errors that count are relative (a 5 ms
miss on a 40 ms prompt matters about as much as 100 ms on 800 ms). A term that comes out
negative (noise on a machine where it is too small to see) is set to 0 and the
others fitted again without it, so every setting stays one the server accepts.

The batch size (`batch_tokens`) and how much longer a batch shared by several prompts takes
(`batch_slowdown`) have no formula to solve: each pair of candidates is tried in the twin's
own lane (profile.py books the prompts sent at once), and the nearest wins.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from felab.mock_server.timing import TimingModel

RELATIVE_FROM_MS = 10.0
"""Errors are weighed relative to TTFT + this: a few ms of a busy machine's noise on a 20 ms prompt
should not outweigh the long prompts."""


@dataclass(frozen=True)
class Point:
    """One prefill measurement: uncached tokens, tokens in context before them, TTFT (ms)."""

    uncached: int
    context: int
    ttft_ms: float


@dataclass(frozen=True)
class PrefillFit:
    overhead_ms: float
    prefill_tps: float
    """The twin's rate: per uncached token, and per prompt token (cached or not) charged to uncached ones."""
    attention_ns: float
    per_prompt_token_us: float
    """Time per prompt token cached or not (templating, tokenizing, the lookup): the practice server
    has no such term, so the twin charges it to uncached tokens only (in `prefill_tps`)."""
    residuals_pct: tuple[float, ...]
    """Each point's (the twin's prediction − measured) / measured, in %."""

    def predict_ms(self, uncached: int, context: int = 0) -> float:
        return predict_ms(self.overhead_ms, self.prefill_tps, self.attention_ns, uncached, context)


def predict_ms(
    overhead_ms: float, prefill_tps: float, attention_ns: float, uncached: int, context: int
) -> float:
    """The TTFT the prefill fit's three terms give one prompt alone (timing.py's formula without
    its floor and its last piece of few rows, which are fitted apart: `fit_reuse`, `fit_untiled`)."""
    return (
        overhead_ms
        + uncached * 1000 / prefill_tps
        + attention_ns * 1e-6 * uncached * (context + uncached / 2)
    )


def solve(a: list[list[float]], b: list[float]) -> list[float]:
    """x with a·x = b (Gaussian elimination with partial pivoting); ValueError if singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            raise ValueError("the measurements cannot tell these terms apart")
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * y for x, y in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def least_squares(rows: Sequence[Sequence[float]], y: Sequence[float], w: Sequence[float]) -> list[float]:
    """Weighted least squares: the x minimising Σ w·(row·x − y)²."""
    k = len(rows[0])
    ata = [[sum(wi * r[i] * r[j] for r, wi in zip(rows, w, strict=True)) for j in range(k)] for i in range(k)]
    aty = [sum(wi * r[i] * yi for r, yi, wi in zip(rows, y, w, strict=True)) for i in range(k)]
    # Scale each column to unit size first: tokens² and 1 differ by ten orders of magnitude.
    scale = [math.sqrt(ata[i][i]) or 1.0 for i in range(k)]
    ata = [[ata[i][j] / (scale[i] * scale[j]) for j in range(k)] for i in range(k)]
    x = solve(ata, [aty[i] / scale[i] for i in range(k)])
    return [x[i] / scale[i] for i in range(k)]


def nonnegative(rows: Sequence[Sequence[float]], y: Sequence[float], w: Sequence[float]) -> list[float]:
    """Least squares with every coefficient 0 or more: drop the most negative one, fit again."""
    active = list(range(len(rows[0])))
    while active:
        sub = [[r[i] for i in active] for r in rows]
        x = least_squares(sub, y, w)
        worst = min(range(len(x)), key=lambda i: x[i])
        if x[worst] >= 0:
            out = [0.0] * len(rows[0])
            for i, v in zip(active, x, strict=True):
                out[i] = v
            return out
        del active[worst]
    return [0.0] * len(rows[0])


def fit_prefill(points: Sequence[Point], attention: bool = True) -> PrefillFit:
    """Overhead, prefill rate, attention term (and the per-prompt-token cost) from TTFTs of
    prompts read alone: cold ones, and ones after a cached opening (which tell a cost per
    uncached token from one per prompt token, cached or not). `attention=False`: without the
    attention term (0), where the evidence cannot carry it (profile.supported_attention)."""
    if len({p.uncached for p in points}) < 3:
        raise ValueError("need prompts of at least 3 different lengths")
    rows = [
        [1.0, float(p.uncached), p.uncached * (p.context + p.uncached / 2), float(p.uncached + p.context)]
        for p in points
    ]
    y = [p.ttft_ms for p in points]
    w = [1.0 / (v + RELATIVE_FROM_MS) ** 2 for v in y]  # relative errors, short prompts' noise damped
    terms = [0, 1, 2, 3] if attention else [0, 1, 3]

    def solved(cols: list[int]) -> list[float]:
        got = nonnegative([[r[i] for i in cols] for r in rows], y, w)
        out = [0.0] * 4
        for i, v in zip(cols, got, strict=True):
            out[i] = v
        return out

    try:
        x = solved(terms)
    except ValueError:  # only cold prompts: a prompt token is an uncached token, the two are one term
        x = solved([i for i in terms if i != 3])
    overhead, per_uncached, attention_ms, per_prompt = x
    per_token = per_uncached + per_prompt
    if per_token <= 0:  # all of the time is in the attention term: keep a rate the server accepts
        per_token = 1e-6
    fit = PrefillFit(overhead, 1000 / per_token, attention_ms * 1e6, per_prompt * 1000, ())
    residuals = tuple(100 * (fit.predict_ms(p.uncached, p.context) - p.ttft_ms) / p.ttft_ms for p in points)
    return dataclasses.replace(fit, residuals_pct=residuals)


TILE_CANDIDATES = (16, 32, 64, 128, 256)
"""Tile sizes (rows) calibrate tries: llama.cpp's CPU attention takes 64 (GGML_FA_TILE_Q)."""
PIECE_CANDIDATES: tuple[int | None, ...] = (None, 2048, 1024, 512, 256)
"""Piece (ubatch) sizes it tries, None first (on a tie, the simpler model: the prompt one piece)."""
UNTILED_GAIN = 0.5
"""The term is kept only if it halves the weighted squared error of the rows probe's fit without it
(the figures printed are mean relative errors, which it need not halve)."""


@dataclass(frozen=True)
class UntiledFit:
    ubatch_tokens: int | None
    tile_tokens: int
    """0: no last piece of few rows was seen to cost more (the term is off)."""
    untiled_ns: float
    error_pct: float
    """Mean |relative error| of the rows probe's fit with the term (or without it, when off), %."""
    without_pct: float
    """The same, without the term."""

    def extra_ms(self, uncached: int, context: int) -> float:
        """What the term adds to a prompt's TTFT, ms (timing.py's `untiled_s`, where it is written)."""
        model = pieces(self.ubatch_tokens, self.tile_tokens, self.untiled_ns)
        return 1000 * model.untiled_s(uncached, context)


def pieces(ubatch_tokens: int | None, tile_tokens: int, untiled_ns: float) -> TimingModel:
    """A timing model with only the last piece of few rows (its other terms unused here)."""
    return TimingModel(
        1.0, 1.0, 1.0, ubatch_tokens=ubatch_tokens, tile_tokens=tile_tokens, untiled_ns=untiled_ns
    )


def fit_untiled(points: Sequence[Point]) -> UntiledFit:
    """ubatch_tokens, tile_tokens and untiled_ns from new parts of chosen lengths after one cached
    opening (probes.rows): every pair of candidates, the term's k by least squares with the rest."""
    y = [p.ttft_ms for p in points]
    w = [1.0 / (v + RELATIVE_FROM_MS) ** 2 for v in y]
    base = [[1.0, float(p.uncached), p.uncached * p.uncached / 2] for p in points]

    def error(rows: list[list[float]], x: list[float]) -> tuple[float, float]:
        got = [sum(a * b for a, b in zip(r, x, strict=True)) for r in rows]
        sse = sum(wi * (g - t) ** 2 for g, t, wi in zip(got, y, w, strict=True))
        return sse, 100 * sum(abs(g - t) / t for g, t in zip(got, y, strict=True)) / len(y)

    try:
        sse0, pct0 = error(base, nonnegative(base, y, w))
    except ValueError:  # too few lengths to tell the terms apart: no finding
        return UntiledFit(None, 0, 0.0, 0.0, 0.0)
    best = UntiledFit(None, 0, 0.0, pct0, pct0)
    best_sse = UNTILED_GAIN * sse0
    for piece in PIECE_CANDIDATES:
        for tile in TILE_CANDIDATES:
            if piece is not None and tile >= piece:
                continue
            unit = pieces(piece, tile, 1.0)  # 1 ns: the term's ms per ns, so its coefficient is untiled_ns
            rows = [
                [*r, 1000 * unit.untiled_s(p.uncached, p.context)] for r, p in zip(base, points, strict=True)
            ]
            if not any(r[-1] for r in rows):
                continue
            try:
                x = nonnegative(rows, y, w)
            except ValueError:  # too few lengths to tell the terms apart
                continue
            sse, pct = error(rows, x)
            if x[-1] > 0 and sse < best_sse:
                best, best_sse = UntiledFit(piece, tile, x[-1], pct, pct0), sse
    return best


def fit_slowdown(intervals: dict[int, float]) -> tuple[float, float]:
    """(decode_tps, decode_slowdown) from the time between tokens with k streams at once."""
    base = intervals[1]
    others = [(k, v) for k, v in intervals.items() if k > 1]
    if not others:
        return 1000 / base, 0.0
    num = sum((k - 1) * (v / base - 1) for k, v in others)
    den = sum((k - 1) ** 2 for k, _ in others)
    return 1000 / base, max(0.0, num / den)


def fit_reuse(fit: PrefillFit, warm: Sequence[Point]) -> float:
    """cached_token_us from calls after a cached opening: the median over them of their time beyond
    the overhead and the linear term, per cached token (0 if none was cached)."""
    implied = [
        max(0.0, p.ttft_ms - fit.overhead_ms - p.uncached * 1000 / fit.prefill_tps) / p.context * 1000
        for p in warm
        if p.context > 0
    ]
    return median(implied) if implied else 0.0


def fit_decode_context(base_ms: float, base_context: int, samples: Sequence[tuple[int, float]]) -> float:
    """decode_context_ns from (context tokens, time per output token ms) of replies after long
    prompts, against one alone after `base_context` tokens taking `base_ms`: a line through that
    point, least squares weighted by 1/interval² (relative errors), never below 0."""
    xs = [(c - base_context, t - base_ms, 1 / t**2) for c, t in samples if c > base_context and t > 0]
    den = sum(w * x * x for x, _, w in xs)
    if not den:
        return 0.0
    return max(0.0, sum(w * x * y for x, y, w in xs) / den) * 1e6


def fit_chars_per_token(samples: Sequence[tuple[int, int]]) -> float:
    """Characters per token, from (characters sent, prompt_tokens reported) pairs: their ratio of sums,
    so the long prompts, where a chat template's few extra tokens matter least, weigh most."""
    return sum(c for c, _ in samples) / sum(t for _, t in samples)


def median(values: Sequence[float]) -> float:
    xs = sorted(values)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


# ── From the measurements to the practice server's settings ─────────────────

BLOCK_SIZES = (16, 32, 64, 128, 256, 512, 1024)
"""Cache block sizes engines use (vLLM 16, the practice server 64, Mooncake 512)."""


@dataclass
class CacheFinding:
    """What the openings showed about the prefix cache."""

    reuse: str
    """"yes", "no", or "unknown"."""
    kind: str
    """"blocks" (whole blocks, hashed: vLLM, the practice server), "seat-prefix" (the longest common
    prefix with a prompt the server kept: llama.cpp per seat, SGLang, MLX), or "unknown"."""
    block_tokens: int | None
    evidence: str


def cache_finding(warm: Sequence[tuple[int, int | None, float]], cold_ms: float) -> CacheFinding:
    """From (prompt_tokens, cached_tokens, ttft_ms) of calls sent after an opening: was it reused, how?

    Whole blocks show as cached counts that are all multiples of one block size; the longest
    common prefix lands on any count (the chance that 6 of them are all multiples of 16 is
    one in 16 million)."""
    if not warm:
        return CacheFinding("unknown", "unknown", None, "no opening was sent again")
    if any(c is None for _, c, _ in warm):
        ratio = median([t for _, _, t in warm]) / cold_ms
        reuse = "yes" if ratio < 0.5 else "no"
        return CacheFinding(
            reuse, "unknown", None, f"no cached_tokens reported; sent again it took {ratio:.0%} of cold"
        )
    cached = [int(c or 0) for _, c, _ in warm]
    share = median([c / max(t, 1) for (t, _, _), c in zip(warm, cached, strict=True)])
    if share < 0.3:
        return CacheFinding("no", "unknown", None, f"a repeated opening had {share:.0%} of its prompt cached")
    counts = [c for c in cached if c > 0]
    sizes = [b for b in BLOCK_SIZES if all(c % b == 0 for c in counts)]
    shown = ", ".join(f"{c:,}" for c in counts)
    if sizes and len(counts) >= 3:
        return CacheFinding("yes", "blocks", max(sizes), f"cached {shown}: all multiples of {max(sizes)}")
    return CacheFinding(
        "yes", "seat-prefix", None, f"cached {shown}: not whole blocks (longest common prefix)"
    )


@dataclass
class HostFinding:
    """What the pushed-out probe showed: does a prompt that left every seat come back cached?"""

    kept: str
    """"yes" (from a cache beyond the seats: llama-server's --cache-ram), "no", or "unknown"."""
    evidence: str


def host_finding(
    opening_tokens: int, seats: int, back: tuple[int | None, float], cold_ms: float
) -> HostFinding:
    """From the return of an opening pushed out of its `seats` (cached tokens, TTFT) and its cold
    TTFT: kept beyond the seats if most of it came back cached (or, with no cached count
    reported, if it took under half its cold time)."""
    cached, ttft_ms = back
    where = f"an opening of {opening_tokens:,} tokens pushed out of {seats} seat{'s' if seats > 1 else ''}"
    if cached is None:
        kept = "yes" if ttft_ms < 0.5 * cold_ms else "no"
        shown = f"came back in {ttft_ms:.0f} ms (cold {cold_ms:.0f} ms; no cached count)"
        return HostFinding(kept, f"{where} {shown}")
    kept = "yes" if cached >= 0.5 * opening_tokens else "no"
    return HostFinding(
        kept, f"{where} came back with {cached:,} tokens cached in {ttft_ms:.0f} ms (cold {cold_ms:.0f} ms)"
    )


BATCH_CANDIDATES: tuple[int | None, ...] = (None, 256, 512, 1024, 2048, 4096, 8192)
"""The batch sizes calibrate tries (llama.cpp's -b is 2048 by default); None: no batches, each
prompt's first token at the end of its own prefill."""


SLOWDOWN_CANDIDATES: tuple[float, ...] = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, -0.05, -0.1, -0.2)
"""How much longer a batch shared by several prompts may take than its parts alone (0 first:
on a tie, the simpler model; below 0, an engine that reads prompts faster together)."""


@dataclass(frozen=True)
class BatchFit:
    tokens: int | None
    """The batch size (None: no batches)."""
    slowdown: float
    """How much longer a batch holding parts of several prompts takes than its parts alone."""
    error_pct: float
    """Mean relative error of the twin's first tokens against the measured ones."""
    twin_ms: list[list[float]]
    """The twin's first tokens, each round sorted."""


def batch_tokens(
    rounds: Sequence[Sequence[float]],
    twin: Callable[[int | None, float], list[list[float]]],
    slowdowns: Sequence[float] = SLOWDOWN_CANDIDATES,
) -> BatchFit:
    """How prompts sent at once were prefilled: the candidate batch size and slowdown whose first
    tokens, as the twin books them (`twin(b, s)`: each round's TTFTs in ms, sorted), are nearest
    the measured ones (each round sorted), by mean relative error (on a tie, the simpler model:
    no batches before any size, and for each size no slowdown before any)."""
    measured = [sorted(r) for r in rounds]
    best = BatchFit(None, 0.0, math.inf, [])
    for b in BATCH_CANDIDATES:
        for s in slowdowns if b is not None else (0.0,):
            predicted = twin(b, s)
            err = [
                abs(p - t) / t
                for got, r in zip(predicted, measured, strict=True)
                for p, t in zip(got, r, strict=True)
            ]
            mean = 100 * sum(err) / max(len(err), 1)
            if mean < best.error_pct:
                best = BatchFit(b, s, mean, predicted)
    return best


def rounds_spread_pct(rounds: Sequence[Sequence[float]]) -> float:
    """How much rounds of the same prompts sent at once differ among themselves: each first token
    (the rounds sorted) against the median of its place over the rounds, mean |difference| in %."""
    measured = [sorted(r) for r in rounds]
    if len(measured) < 2:
        return 0.0
    places = [median(col) for col in zip(*measured, strict=False)]
    off = [abs(t - m) / m for r in measured for t, m in zip(r, places, strict=False) if m > 0]
    return 100 * sum(off) / max(len(off), 1)


def supported_batch(
    rounds: Sequence[Sequence[float]], twin: Callable[[int | None, float], list[list[float]]]
) -> tuple[BatchFit, str | None]:
    """`batch_tokens`, with a slowdown dropped (fitted again at 0) where the evidence cannot carry it:
    at the edge of SLOWDOWN_CANDIDATES (the true value may lie beyond, or the fit follows noise: a
    busy machine gave -0.2 every time), or improving the fit by less than the rounds' own spread.
    The second value says which, for the profile and the terminal (None: kept, or there was none)."""
    best = batch_tokens(rounds, twin)
    if best.tokens is None or best.slowdown == 0:
        return best, None
    plain = batch_tokens(rounds, twin, (0.0,))
    edge = best.slowdown in (min(SLOWDOWN_CANDIDATES), max(SLOWDOWN_CANDIDATES))
    spread = rounds_spread_pct(rounds)
    gain = plain.error_pct - best.error_pct
    if not edge and gain >= spread:
        return best, None
    why = (
        f"at the edge of the range tried ({min(SLOWDOWN_CANDIDATES):g} to {max(SLOWDOWN_CANDIDATES):g})"
        if edge
        else f"it brought the twin {gain:.1f} points nearer, less than the rounds' own spread ({spread:.1f}%)"
    )
    return plain, f"batch_slowdown fitted at {best.slowdown:g} was left out: {why}"


def sig(x: float, digits: int = 3) -> float:
    """x to `digits` significant digits (a profile is a measurement, not a ten-digit constant)."""
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))
