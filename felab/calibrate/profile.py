"""The profile calibrate writes: the fitted settings, and how they were found, as TOML.

    [profile]    schema, engine, model, the address measured, date, machine, method
    [settings]   the practice server's settings (config.py's names): what `--profile` sets
    [fit]        how well the formula fits what was measured (residuals, in %)
    [measured]   the raw findings behind the settings (cached counts, the 4-at-once TTFTs, ...)

Each setting's line carries its meaning as a comment, so the file explains itself.
Reading a profile back is the practice server's own business (mock_server/profile.py),
which is why this module only writes. TOML is written by hand: flat tables of numbers,
words and lists need no library, and the reader checks what was written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import math
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from felab.calibrate import evidence, fit
from felab.calibrate.plan import Measurements, Plan, reference_group
from felab.calibrate.probes import FOLLOW_UP_MAX_TOKENS, Sample
from felab.calibrate.save import write_whole
from felab.mock_server.booking import PracticeModel, Prompt
from felab.mock_server.config import DEFAULTS, Settings, unit_of
from felab.mock_server.profile import END_LINE, SCHEMA
from felab.mock_server.step import Step, prompt_steps, reply_context
from felab.mock_server.terms import Rates
from felab.paths import results_dir
from felab.redact import redact
from felab.targets import Target

SETTINGS = {f.name: f for f in dataclasses.fields(Settings)}
"""Every setting a profile may hold, by name: its declaration (default, help, unit)."""


def meaning(name: str) -> tuple[str, str]:
    """A setting's unit and what it means, as the practice server declares them (config.py's
    `setting()`: one description per setting, the same as its flag's help); ("", "") for a name
    that is not a setting."""
    f = SETTINGS.get(name)
    return (unit_of(f), f.metadata["help"]) if f else ("", "")


PREFIX_BLOCK_TOKENS = 1
"""Block size a twin of a longest-common-prefix cache gets (llama.cpp's, per seat; mlx_lm's trie):
the practice server compares a new prompt with the cache in whole blocks, so blocks of one token
find what the engine finds, to the token. It matters: a question after a cached opening is a last
piece of few rows (untiled_ns), whose cost follows its row count. On a question of 16 new tokens,
16-token blocks gave the twin 8 to 12 more (+10 to +42% TTFT on mlx_lm.server), 2-token blocks
0 or 1 more (docs/runs/2026-12-07-lcp-blocks-and-template.md). Hashing 1-token blocks costs the
twin about 0.9 ms a 4,000-token prompt, after its arrival is stamped (the booking counts from
then), so no first token comes later for it."""
LCP_CACHE_TOKENS = 65_536
"""The capacity of a longest-common-prefix cache with no seats (MLX), in tokens: the twin keeps it as
a block cache (of PREFIX_BLOCK_TOKENS each). mlx_lm.server keeps 10 prompts whatever their lengths (its
--prompt-cache-size, an LRU of whole KV caches); 65,536 tokens is 10 of about 6,500."""


@dataclass
class Profile:
    about: dict[str, Any]
    settings: dict[str, Any]
    fit: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)


def machine() -> str:
    """Where calibrate ran (for a local server, the machine measured)."""
    cpu = platform.processor() or platform.machine()
    return f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} cores"


ROWS_NEEDED = 8
"""Calls after the rows probe's opening, with that opening cached, it takes to fit the term."""


def rows_after_opening(m: Measurements) -> list[Sample]:
    """The rows probe's calls that found its opening cached: those with the most common cached
    count, if above 0 (a call that went to another seat or replica, or found nothing, reads the
    opening again and says nothing about its new part alone)."""
    counts = [s.cached_tokens for s in m.rows if s.cached_tokens]
    if not counts:
        return []
    common = max(set(counts), key=lambda c: (counts.count(c), c))  # a tie: the longer prefix
    return [s for s in m.rows if s.cached_tokens == common]


def alone(s: Sample, piece: int | None = None) -> fit.Observation:
    """A prompt read alone as the fit sees it: its TTFT and its steps (its uncached tokens after its
    cached ones, in one piece: fit.py's docstring says why the batch size does not matter here;
    `piece`: in pieces of that many, as MLX reads every prompt, MLX_STEP at a time)."""
    return fit.Observation(s.ttft_ms, tuple(prompt_steps(s.uncached, s.cached_tokens or 0, piece)))


def gap(s: Sample, streams: int) -> fit.Observation | None:
    """A reply's time per token as the fit sees it: one decode step of `streams` streams, each with
    the reply's mean context (its prompt and half the reply: step.reply_context); None for a reply
    with no gap to time."""
    t = s.tpot_ms
    if t is None or t <= 0:  # (gaps of 0: chunks read in one burst)
        return None
    context = reply_context(s.prompt_tokens, s.output_tokens)  # as the twin decodes it (step.py)
    return fit.Observation(t, (Step(decodes=(context,) * streams),), overhead=False)


def observations(m: Measurements, half: int | None = None, piece: int | None = None) -> list[fit.Observation]:
    """What the fit reads: the cold prompts (each length's repeats as one observation, their median),
    each opening sent again with new text after it, the rows probe's calls, and the replies' times
    per token (1 to 4 streams at once, and the follow-ups' after a long opening). Streams sent at
    once decode at once only as far as the server has seats: on llama-server -np 1, the 4 replies
    sent together are 4 replies of one stream each, and a fit that took them for one step of 4
    streams priced a stream's step at under a tenth of its time (docs/runs, 2026-12-06). Not the first
    call, nor an opening's cold call: a long prompt measured once can be caught by a busy moment
    and bend the cold curve, which the cold repeats give. `half` 0 or 1: that half of them, for
    the held-out error (each length's repeats alternately, or the lengths, where each was sent
    once; the other calls alternately); None: all. `piece`: as `alone`."""
    groups = [g for g in m.cold if g]
    if half is not None:
        groups = [g[half::2] for g in groups] if all(len(g) > 1 for g in groups) else groups[half::2]
    warm = [s for o in m.openings for s in o.warm if s.cached_tokens is not None]
    rows = [s for s in m.rows if s.cached_tokens is not None]
    prompts = [alone(s, piece) for s in [*warm, *rows]]
    replies = [s for o in m.openings for s in o.warm if s.output_tokens >= FOLLOW_UP_MAX_TOKENS // 2]
    seats = m.facts.seats if m.facts is not None else None  # k streams sent at once decode k at
    gaps = [gap(s, min(k, seats or k)) for k, got in m.decode.items() for s in got]  # once if seated
    gaps += [gap(s, 1) for s in replies]
    rest = prompts + [g for g in gaps if g is not None]
    return cold_lengths(groups, piece) + (rest if half is None else rest[half::2])


def cold_lengths(groups: list[list[Sample]], piece: int | None = None) -> list[fit.Observation]:
    """Each cold length's repeats as one observation: the repeat of median time (of an even number,
    the lower of the middle two), with its own length (repeats differ by a few tokens: a median
    time at another repeat's length put the point off by 2%)."""
    return [alone(sorted(g, key=lambda s: s.ttft_ms)[(len(g) - 1) // 2], piece) for g in groups]


def fit_terms(m: Measurements, piece: int | None = None) -> tuple[fit.TermsFit, fit.TermsFit]:
    """The one fit of every term (fit.fit_structure), its pieces and tiles searched where the rows
    probe has enough calls after its opening; and the fit without them. `piece`: as `alone`."""
    halves = (observations(m, 0, piece), observations(m, 1, piece))
    return fit.fit_structure(observations(m, None, piece), halves, len(rows_after_opening(m)) >= ROWS_NEEDED)


def twin_rounds(
    settings: dict[str, Any],
    delivery_ms: float,
    rounds: list[list[Sample]],
    batch: int | None,
    slowdown: float = 0.0,
) -> list[list[float]]:
    """Each round's TTFTs (ms, sorted) as the twin books them: its prompts (their uncached tokens,
    their replies) sent at once to a fresh practice-server model with these settings,
    `batch_tokens` `batch` and `batch_slowdown` `slowdown` (MLX's, every prompt waiting at once:
    its step policy too), the practice server's own delivery time added back."""
    s = dataclasses.replace(DEFAULTS, **{**settings, **batch_settings(batch, slowdown)})
    out = []
    for r in rounds:
        model = PracticeModel(s)
        got = [model.book(Prompt(x.uncached, ()), max(x.output_tokens, 1), 0.0, 0.0) for x in r]
        out.append(sorted(delivery_ms + 1000 * b.ttft_s for b in got))
    return out


MLX_STEP = 2048
"""mlx_lm.server's --prefill-step-size (2,048 by default): each prompt waiting puts up to this many
tokens in a step (mlx_lm/generate.py, BatchGenerator). Calibrate cannot ask the server for it."""


def batch_settings(batch: int | None, slowdown: float = 0.0) -> dict[str, Any]:
    """The settings that go with a batch size the search found: a size is llama.cpp's -b (step
    policy llamacpp, the default); MLX's batches (fit.ALL_AT_ONCE: every prompt waiting read at
    once) are its own policy (loop.py, POLICIES: mlx), each prompt in pieces of MLX_STEP."""
    if batch == fit.ALL_AT_ONCE:
        return {"batch_tokens": MLX_STEP, "batch_slowdown": slowdown, "step_policy": "mlx"}
    return {"batch_tokens": batch, "batch_slowdown": slowdown}


def pushed_finding(m: Measurements) -> fit.HostFinding | None:
    """What the pushed-out probe found (None: not sent, the server has no seats)."""
    if m.pushed is None:
        return None
    o, b = m.pushed.opening, m.pushed.back
    return fit.host_finding(o.prompt_tokens, m.pushed.seats, (b.cached_tokens, b.ttft_ms), o.ttft_ms)


def cache_of(m: Measurements) -> fit.CacheFinding:
    """What the openings showed about the prefix cache: reused? In whole blocks, or to the token?"""
    warm = [(s.prompt_tokens, s.cached_tokens, s.ttft_ms) for o in m.openings for s in o.warm]
    cold_open = fit.median([o.cold.ttft_ms for o in m.openings]) if m.openings else 1.0
    return fit.cache_finding(warm, cold_open)


def build(
    m: Measurements,
    target: Target,
    plan: Plan,
    seconds: float,
    requests: int,
    delivery_ms: float = 0.0,
    load: float | None = None,
    empty: int = 0,
) -> Profile:
    """The profile of what was measured: the fit, the settings it gives, the evidence.
    `delivery_ms`: what the practice server itself adds on this machine (probes.delivery_ms),
    taken out of the overhead, since the twin adds it back. `load`: the machine's load average
    while it measured; `empty`: replies that carried no text (timed by their end, or sent again). Both go into
    the evidence (`[fit] warnings`: evidence.py)."""
    found, none = fit_terms(m)
    cold = [s for group in m.cold for s in group]
    tokens = fit.fit_chars_per_token([(s.chars, s.prompt_tokens) for s in [m.first, *cold]])
    cache = cache_of(m)
    cold_rounds = [  # sent at once and read cold (a prompt sent again after an empty reply was neither)
        r
        for r in m.together
        if all((s.cached_tokens or 0) < 0.1 * s.prompt_tokens and not s.retried for s in r)
    ]
    rounds = [[s.ttft_ms for s in r] for r in cold_rounds]
    gaps = {k: [t for s in got if (t := s.tpot_ms) is not None] for k, got in m.decode.items()}
    intervals = {k: fit.median(v) for k, v in gaps.items() if v}
    intervals = {k: v for k, v in intervals.items() if v > 0}  # (gaps of 0: chunks read in one burst)

    settings: dict[str, Any] = {**fitted_settings(found, delivery_ms), "chars_per_token": fit.sig(tokens)}
    facts = m.facts
    settings |= cache_settings(cache, facts.seats)
    if facts.seats:
        settings["seats"] = facts.seats
    if facts.seat_context:
        settings["context_tokens"] = facts.seat_context * (facts.seats or 1)
    host = pushed_finding(m)
    if host is not None and host.kept == "yes" and settings.get("cache_mode") == "seat-prefix":
        # llama.cpp keeps at least its whole context (-c), more while --cache-ram's MiB allow
        settings["host_cache_tokens"] = settings.get("context_tokens", facts.seat_context or 0)
    shared, dropped = search_batch(settings, delivery_ms, cold_rounds)
    if shared.tokens == fit.ALL_AT_ONCE:  # MLX's batches: its prompts are read MLX_STEP at a time
        found, none, settings, shared, dropped = in_mlx_pieces(
            m, (found, none, settings, shared, dropped), delivery_ms, cold_rounds
        )
    batch, batch_err, twin_ms = shared.tokens, shared.error_pct, shared.twin_ms
    if batch is None:
        settings["batch_tokens"] = "none"  # TOML has no null: the flag's word
    else:
        settings |= batch_settings(batch, shared.slowdown)

    rates = fit.structure(found.ubatch_tokens, found.tile_tokens)
    piece = MLX_STEP if batch == fit.ALL_AT_ONCE else None
    residuals = [abs(r) for r in residuals_pct(cold_lengths([g for g in m.cold if g], piece), found, rates)]
    about = {
        "schema": SCHEMA,
        "engine": facts.engine,
        "target": target.name,
        "model": target.model,
        "measured_at": redact(target.base_url),  # (a password in it: never in a file)
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "method": (
            f"felab calibrate: {requests} streamed requests in {seconds:.0f} s; one least squares over the "
            f"cost terms' basis sums (felab/mock_server/terms/) of the prompts read alone (weighted by "
            f"1/(TTFT + 10 ms); each cold length the median of its repeats) and the replies' times per "
            f"token; a term kept only if it improves the held-out error (each half fitted, scored on the "
            f"other)"
        ),
    }
    fitted: dict[str, Any] = {
        "prefill_points": len(residuals),
        "ttft_residual_median_pct": fit.sig(fit.median(residuals), 2),
        "ttft_residual_max_pct": fit.sig(max(residuals), 2),
        "formula": "TTFT = overhead + the sum over the prompt's steps of each term's coefficient × basis "
        "(felab/mock_server/terms/)",
        "overhead_fitted_ms": fit.sig(found.overhead_ms),
        "delivery_subtracted_ms": fit.sig(delivery_ms),
    }
    if math.isfinite(found.held_out_pct):  # (not where a half of the measurements cannot be fitted)
        fitted["held_out_error_pct"] = fit.sig(found.held_out_pct, 2)
    doubts = evidence.warnings(m, settings, fitted, load)
    if doubts:
        fitted["warnings"] = doubts
    if load is not None:
        fitted["load_average"] = fit.sig(load, 2)
    return Profile(
        about,
        settings,
        fitted,
        {
            "rows_probe": rows_evidence(m, found, none),
            "cache_reuse": cache.reuse,
            "cache_evidence": cache.evidence,
            **({"host_cache": host.kept, "host_cache_evidence": host.evidence} if host else {}),
            "together_ttft_ms": [round(t) for r in rounds for t in sorted(r)],
            "together_twin_ms": [round(t) for r in twin_ms for t in r],
            "batch_tokens_error_pct": fit.sig(batch_err, 2)
            if rounds
            else "unknown (the prompts were cached)",
            "decode_interval_ms": {str(k): fit.sig(v) for k, v in intervals.items()},
            "prompt_tokens_seen": [s.prompt_tokens for s in cold],
            **reference(m, plan),
            "empty_replies": empty,
            "terms_left_out": [*found.left_out, *([dropped] if dropped else [])],
        },
    )


Found = tuple[fit.TermsFit, fit.TermsFit, dict[str, Any], fit.BatchFit, "str | None"]
"""What calibrate found of the terms and the steps: the fit, the fit with no piece read row by
row, the settings, how prompts sent at once share steps, and what that search left out."""


def in_mlx_pieces(
    m: Measurements, first: Found, delivery_ms: float, cold_rounds: list[list[Sample]]
) -> Found:
    """MLX's batches read each prompt MLX_STEP tokens at a time, and the masked term prices each
    piece's square: the terms fitted again with the prompts in those pieces, and the batch search
    redone with them. Kept if the search still finds MLX's batches; else `first`."""
    found, _, settings, _, _ = first
    mlx, mlx_none = fit_terms(m, MLX_STEP)
    rest = {k: v for k, v in settings.items() if k not in fitted_settings(found, delivery_ms)}
    again = {**fitted_settings(mlx, delivery_ms), **rest}
    shared, dropped = search_batch(again, delivery_ms, cold_rounds)
    return (mlx, mlx_none, again, shared, dropped) if shared.tokens == fit.ALL_AT_ONCE else first


def fitted_settings(found: fit.TermsFit, delivery_ms: float) -> dict[str, Any]:
    """The settings the terms' fit gives: the overhead (less the practice server's own delivery
    time, which the twin adds back) and each term's setting (fit.TermsFit.settings)."""
    return {"overhead_ms": fit.sig(max(0.0, found.overhead_ms - delivery_ms)), **found.settings()}


def search_batch(
    settings: dict[str, Any], delivery_ms: float, cold_rounds: list[list[Sample]]
) -> tuple[fit.BatchFit, str | None]:
    """How the prompts sent at once were shared out in steps (fit.supported_batch, the twin booking
    each round with these settings, on its seats); no batches where no round was read cold."""
    if not cold_rounds:
        return fit.BatchFit(None, 0.0, 0.0, []), None
    rounds = [[s.ttft_ms for s in r] for r in cold_rounds]
    twin = functools.partial(twin_rounds, settings, delivery_ms, cold_rounds)
    return fit.supported_batch(rounds, twin, settings.get("seats"))


def cache_settings(cache: fit.CacheFinding, seats: int | None) -> dict[str, Any]:
    """The prefix cache's settings, from what the openings showed about it."""
    out: dict[str, Any] = {}
    if cache.kind == "seat-prefix" and seats:
        out["cache_mode"] = "seat-prefix"
    elif cache.kind != "unknown":  # blocks; or a longest common prefix with no seats: small blocks
        out["cache_mode"] = "blocks"
    if cache.kind == "blocks" and cache.block_tokens:
        out["block_tokens"] = cache.block_tokens
    elif cache.kind == "seat-prefix":  # the practice server compares prompts block by block: small ones
        out["block_tokens"] = PREFIX_BLOCK_TOKENS
        if not seats:
            out["cache_blocks"] = LCP_CACHE_TOKENS // PREFIX_BLOCK_TOKENS
    if cache.reuse == "no":
        out["cache_blocks"] = 0
    return out


def residuals_pct(cold: list[fit.Observation], found: fit.TermsFit, rates: Rates) -> list[float]:
    """Each cold length's (the fitted time − measured) / measured, in %."""
    return [100 * (fit.fitted_ms(o.row(rates), found.x) - o.ms) / o.ms for o in cold]


def reference(m: Measurements, plan: Plan) -> dict[str, Any]:
    """The reference probe, for `--check` to send again first (check.reference): one cold prompt
    length, timed several times (calibrate's own repeats of it), and its prompts sent again at
    calibrate's end (`evidence.drift`). Its median then and now tells a machine (or server) that
    got slower from a profile that is wrong."""
    g = reference_group(m.cold, plan.biggest)
    if not g:
        return {}
    out: dict[str, Any] = {
        "reference_tokens": g[0].prompt_tokens,
        "reference_ttft_ms": [fit.sig(s.ttft_ms) for s in g],
    }
    if m.reference_after:  # sent again after every other timing probe (evidence.drift)
        out["reference_again_ttft_ms"] = [fit.sig(s.ttft_ms) for s in m.reference_after]
    return out


def rows_evidence(m: Measurements, found: fit.TermsFit, none: fit.TermsFit) -> str:
    """What the rows probe showed, in a line for [measured]."""
    if not m.rows:
        return "not measured"
    after = rows_after_opening(m)
    if len(after) < ROWS_NEEDED:
        return (
            f"not fitted: {len(after)} of {len(m.rows)} calls found the opening cached (the server reports "
            f"no cached tokens, or reused nothing), so their new tokens cannot be counted"
        )
    seen = ", ".join(f"{s.uncached}: {s.ttft_ms:.0f}" for s in sorted(after, key=lambda s: s.uncached))
    found_ = (
        f"pieces of {found.ubatch_tokens or 'the whole prompt'}, tiles of {found.tile_tokens}: held-out "
        f"error {found.held_out_pct:.1f}% (without the term {none.held_out_pct:.1f}%)"
        if found.tile_tokens
        else f"none costs more (no piece and tile sizes improve the held-out error, {none.held_out_pct:.1f}%)"
    )
    return f"{found_}; new tokens: TTFT ms after {after[0].cached_tokens:,} cached: {seen}"


# ── TOML, by hand ────────────────────────────────────────────────────────────

BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"a profile holds finite numbers only, not {v}")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, list | tuple):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to a profile")


def _key(k: str) -> str:
    return k if BARE_KEY.match(k) else json.dumps(k)


def to_toml(p: Profile, header: str = "") -> str:
    lines = [f"# {line}" if line else "#" for line in header.splitlines()] if header else []
    lines += [
        "# A felab timing profile: practice-server settings measured on one real server.",
        "# Use it with `python -m felab.mock_server --profile FILE` or `felab replay --profile FILE`.",
        "",
        "[profile]",
    ]
    lines += [f"{_key(k)} = {toml_value(v)}" for k, v in p.about.items()]
    lines += ["", "[settings]"]
    for k, v in p.settings.items():
        unit, means = meaning(k)
        note = f"  # {unit + ': ' if unit else ''}{means}" if means else ""
        lines.append(f"{_key(k)} = {toml_value(v)}{note}")
    for name, table_ in (("fit", p.fit), ("measured", p.measured)):
        if table_:
            lines += ["", f"[{name}]", *(f"{_key(k)} = {toml_value(v)}" for k, v in table_.items())]
    lines += ["", END_LINE]  # last: how a reader tells a whole profile from one cut short
    return "\n".join(lines) + "\n"


def default_path(target: Target) -> Path:
    """results/profiles/<target>-<date>.toml (the kit's results folder, not git)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return results_dir() / "profiles" / f"{target.name}-{stamp}.toml"


def write(p: Profile, path: Path) -> Path:
    """Write the profile whole or not at all (save.py: a temporary file, synced, renamed over it)."""
    return write_whole(path, to_toml(p))


def rows(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The settings as a table for people: name, value, unit, meaning."""
    out = []
    for k, v in settings.items():
        unit, means = meaning(k)
        if isinstance(v, float):
            value = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
        else:
            value = f"{v:,}" if isinstance(v, int) else str(v)
        out.append({"setting": k, "value": value, "unit": unit, "meaning": means})
    return out
