"""Least squares, closed form: the practice server's cost terms from what the probes measured.

One weighted least-squares fit over the registry's basis functions (felab/mock_server/terms/).
Each term is a coefficient times a basis function of an engine step (step.py), so a measured
time is linear in the coefficients once the steps it spanned are known:

    TTFT of a prompt read alone ≈ overhead + Σ over its steps (step.prompt_steps) Σ coefficient · basis
    a reply's time per token    ≈ Σ coefficient · basis of Step(decodes=(its context,) · streams)

An observation is one row, [1 (the overhead; 0 for a reply's gap)] + [each term's basis summed
over its steps], and the fit solves the normal equations by Gaussian elimination (no numpy,
which a learner's core install does not have). The registry turns the coefficients back into
settings (`terms.settings_from`); the overhead is the intercept.

- Weights: 1/(TTFT + 10 ms)², 1/gap² for a reply's gap: the errors that count are relative
  (a 5 ms miss on a 40 ms prompt matters about as much as 100 ms on 800 ms).
- Never below 0: a term that comes out negative (noise, where it is too small to see) is
  dropped and the others fitted again, so every setting is one the server accepts.
- Held out: a term is kept only if it predicts what it was not fitted on. The observations are
  split in two halves (each cold length's repeats alternately, a median per half; the other
  calls alternately); each half is fitted and scored on the other, and the root mean square
  of the two weighted (so relative) errors is the held-out error. Each optional term, in the
  registry's order, is dropped unless the held-out error with it is at least KEEP_GAIN smaller
  than without it, scored on the kind of time it is in (TTFTs, or the replies' gaps: they share
  no term): a term that follows the noise between repeats does not predict the other half (the
  issue's busy machine gave a cached-token cost of 46 µs, 2 to 4 on a quiet one). The overhead
  and the two rates are always fitted. Every term dropped is said (`TermsFit.left_out`).
- Structure: a basis may read settings that are not coefficients (`ubatch_tokens`, `tile_tokens`:
  which last pieces are read row by row). Each pair of candidates is fitted as above, and the
  lowest held-out error wins if it is clearly lower than with no piece read row by row
  (STRUCTURE_SHARE).

The batch size (`batch_tokens`) and how much longer a step shared by several prompts takes
(`batch_slowdown`) are found by a search in the twin's own lane (profile.py books the prompts
sent at once; `batch_tokens` below): a prompt read alone is never in a shared step, and its
basis sums are the same for any batch size that is a multiple of its pieces.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from felab.mock_server import terms
from felab.mock_server.config import DEFAULTS, Settings, problem
from felab.mock_server.step import Step
from felab.mock_server.terms import TERMS, Rates

RELATIVE_FROM_MS = 10.0
"""Errors are weighed relative to TTFT + this: a few ms of a busy machine's noise on a 20 ms prompt
should not outweigh the long prompts."""
KEEP_GAIN = 0.02
"""A term is kept when the held-out error with it is at least this share smaller than without it."""
ROUNDING = 1e-9
"""Held-out errors (relative) closer than this are equal: the rounding of exact measurements."""
OVERHEAD = "overhead"
"""The intercept's column: a request's fixed cost, ms."""
ALWAYS = (OVERHEAD, "prefill_rate", "decode_rate")
"""Fitted whatever the held-out error says: a profile needs an overhead and both rates."""
NO_RATE = 1e9
"""The prefill rate written when the time did not grow with the prompt at all (the rate's term came out
0): a rate the server accepts, which evidence.refusals then refuses to write as a profile."""


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


@dataclass(frozen=True)
class Observation:
    """One measured time (ms) and the engine steps it spanned."""

    ms: float
    steps: tuple[Step, ...]
    overhead: bool = True
    """Whether it holds the overhead: a request's TTFT does, a gap between reply tokens does not."""

    def row(self, rates: Rates) -> dict[str, float]:
        """Its row of the fit: the overhead's 1 (or 0), and each term's basis summed over its steps."""
        out = {OVERHEAD: 1.0 if self.overhead else 0.0}
        for step in self.steps:
            for name, value in terms.basis(step, rates).items():
                out[name] = out.get(name, 0.0) + value
        return out

    @property
    def weight(self) -> float:
        return 1.0 / (self.ms + (RELATIVE_FROM_MS if self.overhead else 0.0)) ** 2


def fitted_ms(row: Mapping[str, float], x: Mapping[str, float]) -> float:
    """A row's time by the fitted coefficients: Σ coefficient × basis, the registry's formula."""
    return sum(v * row.get(name, 0.0) for name, v in x.items())


@dataclass(frozen=True)
class Data:
    """Observations as the fit reads them, for one structure (`Observation.row`)."""

    rows: list[dict[str, float]]
    ms: list[float]
    w: list[float]

    @classmethod
    def of(cls, observations: Sequence[Observation], rates: Rates) -> Data:
        return cls(
            [o.row(rates) for o in observations],
            [o.ms for o in observations],
            [o.weight for o in observations],
        )

    def solve(self, names: Sequence[str]) -> dict[str, float]:
        """Weighted least squares over these columns, never below 0: ms per unit of each term's basis
        (the overhead in ms); a column nothing measured is left out. ValueError: the observations
        cannot tell the columns apart."""
        cols: list[str] = []
        for n in names:  # measured, and not a multiple of a column before it (`alike`)
            if any(r.get(n) for r in self.rows) and not any(self.alike(n, k) for k in cols):
                cols.append(n)
        if not cols:
            return {}
        x = nonnegative([[r.get(n, 0.0) for n in cols] for r in self.rows], self.ms, self.w)
        return dict(zip(cols, x, strict=True))

    def alike(self, a: str, b: str) -> bool:
        """Whether column `a` is a multiple of column `b` in every row: the measurements cannot tell
        the two terms apart (cold prompts alone give attention and masked attention the same
        basis, u²/2), so only the first is fitted."""
        pairs = [(r.get(a, 0.0), r.get(b, 0.0)) for r in self.rows]
        ratio = next((x / y for x, y in pairs if y), None)
        return ratio is not None and all(
            math.isclose(x, ratio * y, rel_tol=1e-9, abs_tol=0) for x, y in pairs
        )

    def error(self, x: Mapping[str, float], kind: bool | None = None) -> float:
        """The root mean weighted squared error of `x`'s times: about their relative error (`kind`:
        of the TTFTs only, True, or the replies' gaps only, False)."""
        got = [
            w * (fitted_ms(r, x) - y) ** 2
            for r, y, w in zip(self.rows, self.ms, self.w, strict=True)
            if kind is None or r[OVERHEAD] == kind
        ]
        return math.sqrt(sum(got) / max(len(got), 1))


def held_out(halves: tuple[Data, Data], names: Sequence[str], kind: bool | None = None) -> float:
    """Each half fitted with these columns and scored on the other (`kind`: as `Data.error`): the
    root mean square of the two errors (inf: a half cannot tell the columns apart)."""
    try:
        first, second = halves[0].solve(names), halves[1].solve(names)
    except ValueError:
        return math.inf
    return math.sqrt((halves[1].error(first, kind) ** 2 + halves[0].error(second, kind) ** 2) / 2)


def improves(with_term: float, without: float) -> bool:
    """Whether a term's held-out error beats the error without it by KEEP_GAIN (kept, too, where the
    halves cannot be fitted without it)."""
    if math.isinf(without):
        return True
    return without - with_term > max(KEEP_GAIN * without, ROUNDING)


@dataclass(frozen=True)
class TermsFit:
    """The fit: each term's coefficient, the structure its basis read, what it left out and why."""

    x: dict[str, float]
    """ms per unit of each kept term's basis (by term name), and the overhead in ms."""
    ubatch_tokens: int | None = None
    tile_tokens: int = 0
    held_out_pct: float = 0.0
    left_out: tuple[str, ...] = ()
    """Each term dropped, in a sentence (for the profile and the terminal)."""

    @property
    def overhead_ms(self) -> float:
        return self.x.get(OVERHEAD, 0.0)

    def settings(self) -> dict[str, Any]:
        """The settings (3 significant digits) the coefficients give, by the registry: the prefill
        terms always, the row-by-row piece's where kept, decode's where measured."""
        c = {n: v / 1000 for n, v in self.x.items() if n != OVERHEAD}  # seconds per unit
        names = ["prefill_rate", "attention", "masked", "cached_floor"]
        names += ["untiled"] if c.get("untiled") else []
        names += ["decode_rate", "decode_slowdown", "decode_context"] if c.get("decode_rate") else []
        out = {k: sig(v) for k, v in terms.settings_from({n: c.get(n, 0.0) for n in names}).items()}
        out.setdefault("prefill_tps", NO_RATE)
        if c.get("untiled"):
            out |= {"tile_tokens": self.tile_tokens}
            out |= {"ubatch_tokens": self.ubatch_tokens} if self.ubatch_tokens else {}
        return out


def setting(name: str, x: Mapping[str, float]) -> tuple[str, float]:
    """A term's (first) setting and its value from the fitted `x`."""
    term = next(t for t in TERMS if t.name == name)
    key = term.settings[0]
    return key, float(term.values({n: v / 1000 for n, v in x.items()}).get(key, 0.0))


def fit_terms(full: Data, halves: tuple[Data, Data]) -> TermsFit:
    """The coefficients of every term the observations measure: fitted never below 0 on all of them,
    each optional term then kept only if it improves the held-out error (the module's docstring)."""
    x = full.solve([OVERHEAD, *(t.name for t in TERMS)])
    left = [
        f"{setting(n, x)[0]} came out below 0: left out, the other terms fitted again without it"
        for n, v in x.items()
        if v == 0.0 and n not in ALWAYS
    ]
    left += [
        f"{t.settings[0]} was left out: these measurements cannot tell it from another term (its basis "
        f"is a multiple of that term's in every one)"
        for t in TERMS
        if t.name not in x and any(r.get(t.name) for r in full.rows)
    ]
    active = [n for n, v in x.items() if v > 0]
    for name in [n for n in active if n not in ALWAYS]:
        # Scored on the kind of time its column is in: the TTFTs and the gaps share no term, so a
        # decode term changes no TTFT, and the prompts' noise must not hide what it does to the gaps.
        kind = any(r.get(name) for r in full.rows if r[OVERHEAD])
        without = [n for n in active if n != name]
        error, error_without = held_out(halves, active, kind), held_out(halves, without, kind)
        if not improves(error, error_without):
            shown, value = setting(name, x)
            left.append(
                f"{shown} fitted at {sig(value):g} was left out: it did not make the held-out error of the "
                f"{'TTFTs' if kind else 'times per reply token'} {KEEP_GAIN:.0%} smaller ({error:.2%} with "
                f"it, {error_without:.2%} without; each half of the measurements fitted, scored on the other)"
            )
            active = without
    x = full.solve(active)
    while out := next(((n, why) for n in active if n not in ALWAYS and (why := beyond_bounds(n, x))), None):
        name, why = out  # a setting the practice server would refuse: a busy machine's noise, most often
        left.append(f"{setting(name, x)[0]} was left out: it fitted where no setting may be ({why})")
        active = [n for n in active if n != name]
        x = full.solve(active)
    return TermsFit(x, held_out_pct=100 * held_out(halves, active), left_out=tuple(left))


SETTINGS = {f.name: f for f in dataclasses.fields(Settings)}


def beyond_bounds(name: str, x: Mapping[str, float]) -> str | None:
    """What the practice server would say of a term's fitted setting outside its declared bounds
    (a decode slowdown of 11.3, measured on a busy machine, where the bound is 10), or None."""
    term = next(t for t in TERMS if t.name == name)
    values = term.values({n: v / 1000 for n, v in x.items()})
    return next(
        (why for k, v in values.items() if k in SETTINGS and (why := problem(SETTINGS[k], sig(v)))), None
    )


TILE_CANDIDATES = (16, 32, 64, 128, 256)
"""Tile sizes (rows) calibrate tries: llama.cpp's CPU attention takes 64 (GGML_FA_TILE_Q)."""
PIECE_CANDIDATES: tuple[int | None, ...] = (None, 2048, 1024, 512, 256)
"""Piece (ubatch) sizes it tries, None first (the prompt one piece)."""
STRUCTURE_SHARE = 0.7
"""The best pair is taken only if its held-out error is at most this share of the error with no
piece read row by row (its square about halved): the best of 20 tries follows noise more than one
term does (5% noise gave the best pair 4 to 5% less error with no such piece at all)."""


def structure(ubatch_tokens: int | None, tile_tokens: int) -> Rates:
    """Rates with these pieces and tiles, for the basis functions (which read no coefficient)."""
    timing = dataclasses.replace(DEFAULTS.timing, ubatch_tokens=ubatch_tokens, tile_tokens=tile_tokens)
    return cast(Rates, timing)


def fit_structure(
    full: Sequence[Observation], halves: tuple[Sequence[Observation], Sequence[Observation]], rows: bool
) -> tuple[TermsFit, TermsFit]:
    """The fit with the structure of lowest held-out error (every candidate pair of piece and tile
    sizes if `rows`: the rows probe was measured), and the fit with none (no piece read row by row)."""
    grid = [(p, t) for p in PIECE_CANDIDATES for t in TILE_CANDIDATES if p is None or t < p] if rows else []
    fits: list[TermsFit] = []
    for piece, tile in [(None, 0), *grid]:
        rates = structure(piece, tile)
        try:
            got = fit_terms(Data.of(full, rates), (Data.of(halves[0], rates), Data.of(halves[1], rates)))
        except ValueError:
            if not fits:
                raise
            continue
        fits.append(dataclasses.replace(got, ubatch_tokens=piece, tile_tokens=tile))
    best = min(fits, key=lambda f: f.held_out_pct)  # the first on a tie: none
    taken = best.x.get("untiled") and best.held_out_pct <= STRUCTURE_SHARE * fits[0].held_out_pct
    return (best if taken else fits[0]), fits[0]


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


ALL_AT_ONCE = 1 << 16
"""A step that takes every prompt waiting, whole: mlx_lm.server's batched generation, where prompts
sent together are read together and get their first tokens together (measured on the kit's tiny
model, 4 sent at once: 5,145, 5,146, 5,147, 5,147 ms)."""
DEFAULT_BATCH = 2048
"""llama.cpp's -b: what calibrate writes where the prompts sent at once cannot show a batch size."""
BATCH_CANDIDATES: tuple[int | None, ...] = (None, 256, 512, 1024, 2048, 4096, 8192, ALL_AT_ONCE)
"""The batch sizes calibrate tries (llama.cpp's -b is 2048 by default); None: no batches, each
prompt's first token at the end of its own prefill; ALL_AT_ONCE: MLX's batches."""


SLOWDOWN_CANDIDATES: tuple[float, ...] = (
    *(0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0),
    *(-0.05, -0.1, -0.2),
)
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
    sizes: Sequence[int | None] = BATCH_CANDIDATES,
) -> BatchFit:
    """How prompts sent at once were prefilled: the candidate batch size and slowdown whose first
    tokens, as the twin books them (`twin(b, s)`: each round's TTFTs in ms, sorted), are nearest
    the measured ones (each round sorted), by mean relative error (on a tie, the simpler model:
    no batches before any size, and for each size no slowdown before any)."""
    measured = [sorted(r) for r in rounds]
    best = BatchFit(None, 0.0, math.inf, [])
    for b in sizes:
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
    rounds: Sequence[Sequence[float]],
    twin: Callable[[int | None, float], list[list[float]]],
    seats: int | None = None,
) -> tuple[BatchFit, str | None]:
    """`batch_tokens`, each choice kept only where the evidence carries it; the second value says
    what was not, for the profile and the terminal (None: all kept).

    - On one seat (`seats` 1) prompts sent at once take turns in it and never share a step: their
      first tokens cannot show a batch size, so it is llama.cpp's default (DEFAULT_BATCH), with no
      slowdown (the 1-seat server's search once chose 256 on noise, and its cold prompts came out
      25 to 42% long: docs/runs/2026-12-06-twin-round-2-causes.md).
    - A size other than the default must bring the twin nearer by more than the rounds' own spread.
    - A slowdown is dropped (fitted again at 0) at the edge of SLOWDOWN_CANDIDATES (the true value
      may lie beyond, or the fit follows noise: a busy machine gave -0.2 every time), or where it
      improves the fit by less than the rounds' own spread."""
    default = batch_tokens(rounds, twin, (0.0,), (DEFAULT_BATCH,))
    if seats == 1:
        return default, (
            f"batch_tokens left at llama.cpp's default, {DEFAULT_BATCH}: on one seat the prompts sent at "
            f"once take turns, so their first tokens cannot show how a step is shared"
        )
    best, why = _supported_slowdown(rounds, twin)
    gain, spread = default.error_pct - best.error_pct, rounds_spread_pct(rounds)
    if best.tokens == DEFAULT_BATCH or gain >= spread:
        return best, why
    size = (
        f"batch_tokens {best.tokens} was left at llama.cpp's default, {DEFAULT_BATCH}: it brought the twin "
        f"{gain:.1f} points nearer, less than the rounds' own spread ({spread:.1f}%)"
    )
    return default, "; ".join(filter(None, [why, size]))


def _supported_slowdown(
    rounds: Sequence[Sequence[float]], twin: Callable[[int | None, float], list[list[float]]]
) -> tuple[BatchFit, str | None]:
    """The best batch size and slowdown, the slowdown dropped where the evidence cannot carry it."""
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
