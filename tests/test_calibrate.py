"""felab calibrate: the fit on numbers worked out by hand, a practice server with known settings
measured back, profiles read strictly, and one clear message for each thing that can go wrong.

A practice server is a fake whose timing is known exactly: calibrating it must give its own
settings back. Over real HTTP that is asserted only where the machine's speed plays no part
(how it counts tokens, its cache, its seats); the timed terms are asserted exactly on a virtual
clock (test_calibrate_virtual.py). The fits on hand-made numbers state their tolerances.
"""

from __future__ import annotations

import dataclasses
import http.server
import os
import random
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import KIT, run_felab

from felab.calibrate import fit, prompts
from felab.calibrate.command import together_line
from felab.calibrate.fit import Observation
from felab.calibrate.plan import Measurements
from felab.calibrate.probes import Sample, row_targets
from felab.calibrate.profile import (
    LCP_CACHE_TOKENS,
    Profile,
    cache_settings,
    fit_terms,
    rows_after_opening,
    rows_evidence,
    to_toml,
    twin_rounds,
    write,
)
from felab.mock_server import terms
from felab.mock_server.booking import PracticeModel, Prompt
from felab.mock_server.cache import PrefixCache
from felab.mock_server.config import DEFAULTS, Settings
from felab.mock_server.launch import free_port, practice_server
from felab.mock_server.profile import SCHEMA, ProfileError, read_settings, timing_of, tomllib
from felab.mock_server.step import Step, prompt_steps
from felab.mock_server.timing import TimingModel
from felab.mock_server.tokens import id_block_keys

PROFILES = KIT / "data" / "profiles"


# ── the fit, on numbers worked out by hand ────────────────────────────────────


def rates(**given: Any) -> SimpleNamespace:
    """The settings the registry reads (terms.Rates: every field of TimingModel), these given, the
    others 0 or off."""
    base = dataclasses.asdict(TimingModel(0.0, 40_000.0, 200.0))
    return SimpleNamespace(**base | given)


def lone(u: int, c: int, r: SimpleNamespace, overhead_ms: float = 12.0, off: float = 0.0) -> Observation:
    """A prompt of `u` new tokens after `c` cached, read alone, timed by the registry (off by `off`)."""
    steps = tuple(prompt_steps(u, c))
    return Observation((overhead_ms + 1000 * sum(terms.step_seconds(s, r) for s in steps)) * (1 + off), steps)


def gap(contexts: tuple[int, ...], r: SimpleNamespace, off: float = 0.0) -> Observation:
    """A reply's time per token with these streams decoding, timed by the registry (off by `off`)."""
    step = Step(decodes=contexts)
    return Observation(1000 * terms.step_seconds(step, r) * (1 + off), (step,), overhead=False)


def solved(observations: list[Observation], r: Any = None) -> fit.TermsFit:
    """The one fit, each half (alternate observations) held out for the other."""
    r = r or fit.structure(None, 0)
    halves = (fit.Data.of(observations[0::2], r), fit.Data.of(observations[1::2], r))
    return fit.fit_terms(fit.Data.of(observations, r), halves)


SHAPES = [
    (100, 0),
    (900, 0),
    (3000, 0),
    (6000, 0),
    (400, 2000),
    (400, 5000),
    (20, 1600),
    (25, 3200),
    (18, 5100),
]
"""Cold prompts, long new parts after an opening, short questions after one."""


def test_the_fit_gives_back_every_term_it_was_made_from() -> None:
    # Prefill with attention and a cost per cached token (now added to attention, not max-ed
    # with it: both are recovered), decode with streams at once and after long prompts.
    truth = rates(attention_ns=25.0, cached_token_us=20.0, decode_slowdown=0.2, decode_context_ns=600.0)
    prompts = [lone(u, c, truth) for u, c in SHAPES]
    gaps = [gap((c,) * k, truth) for c in (60, 1600, 3200, 5100) for k in (1, 2, 4)]
    got = solved(prompts + gaps)
    assert got.overhead_ms == pytest.approx(12.0, rel=1e-6)
    want = {
        "prefill_tps": 40_000.0,
        "prefill_attention_ns": 25.0,
        "masked_attention_ns": 0.0,
        "cached_token_us": 20.0,
        "decode_tps": 200.0,
        "decode_slowdown": 0.2,
        "decode_context_ns": 600.0,
    }
    assert got.settings() == pytest.approx(want, rel=1e-6)  # (3 significant digits: exact here)
    # The one term not in the truth (a causal engine's): at 0, or a rounding below it, and said.
    assert [line for line in got.left_out if not line.startswith("masked_attention_ns ")] == []


def test_masked_attention_is_told_from_attention_by_the_openings() -> None:
    # MLX on a CPU: each piece (2,048 tokens at most) costs u·(c + u) pairs, not u·(c + u/2): attention
    # and masked attention both 30 ns. Cold prompts alone give only their sum (c = 0: both u²/2);
    # questions after a cached opening (c large) give attention alone, so both come back exactly.
    # (Five terms: enough shapes that each half of them, held out for the other, tells them apart.)
    truth = rates(attention_ns=30.0, masked_attention_ns=30.0)
    shapes = SHAPES + [
        (500, 0),
        (1500, 0),
        (2100, 0),
        (4500, 0),
        (30, 2400),
        (40, 4000),
        (22, 4400),
        (35, 2800),
    ]
    got = solved([lone_in(u, c, truth, 2048) for u, c in shapes])
    assert got.settings()["prefill_attention_ns"] == pytest.approx(30.0, rel=1e-6)
    assert got.settings()["masked_attention_ns"] == pytest.approx(30.0, rel=1e-6)
    # A causal engine's (llama.cpp's) measurements give it 0, and the other terms exactly.
    causal = solved([lone(u, c, rates(attention_ns=30.0)) for u, c in shapes])
    assert causal.settings()["masked_attention_ns"] == 0.0
    assert causal.settings()["prefill_attention_ns"] == pytest.approx(30.0, rel=1e-6)


def lone_in(u: int, c: int, r: SimpleNamespace, piece: int) -> Observation:
    """As `lone`, the prompt read in pieces of `piece` tokens."""
    steps = tuple(prompt_steps(u, c, piece))
    return Observation(12.0 + 1000 * sum(terms.step_seconds(s, r) for s in steps), steps)


def test_a_term_the_data_does_not_have_is_zero_not_negative() -> None:
    # A linear server measured with a little noise: attention would fit slightly negative.
    r = rates(prefill_tokens_per_s=5000.0)
    noisy = [
        lone(u, 0, r, 10.0, off) for u, off in [(100, 0.005), (1000, -0.01), (3000, 0.01), (6000, -0.02)]
    ]
    got = solved(noisy)
    assert got.settings()["prefill_attention_ns"] == 0.0
    assert got.settings()["prefill_tps"] == pytest.approx(5000, rel=0.02)
    assert any(line.startswith("prefill_attention_ns came out below 0") for line in got.left_out)


def test_a_term_fitted_beyond_its_settings_bound_is_left_out_and_said() -> None:
    # On a busy machine calibrate fitted a decode slowdown of 11.3 where the setting's bound is 10,
    # and stopped with a ValueError traceback as it built the twin from it.
    rows = [{fit.OVERHEAD: 0.0, "decode_rate": 1.0, "decode_slowdown": float(k % 4)} for k in range(16)]
    ms = [1.0 + 20.0 * r["decode_slowdown"] for r in rows]  # a slowdown of 20 (ms per stream / ms)
    full = fit.Data(rows, ms, [1.0] * 16)
    halves = (fit.Data(rows[::2], ms[::2], [1.0] * 8), fit.Data(rows[1::2], ms[1::2], [1.0] * 8))
    got = fit.fit_terms(full, halves)
    said = "decode_slowdown was left out: it fitted where no setting may be (--decode-slowdown must be"
    assert any(line.startswith(said) for line in got.left_out), got.left_out
    assert dataclasses.replace(DEFAULTS, **got.settings()).decode_slowdown == 0.0  # a twin that can be built


def test_a_term_that_does_not_improve_the_held_out_error_is_dropped_and_said() -> None:
    # A server with no cost per cached token, its calls after an opening 3% slower or faster at
    # random: fitted on all of them, the cached-token term takes a little of that noise (it comes
    # out above 0), but fitted on one half it does not predict the other, so it goes, and is said.
    r = rates(attention_ns=25.0)
    noise = random.Random(3)
    shapes = SHAPES + [(30, 2400), (40, 4000), (22, 4400), (35, 2800)]
    observed = [lone(u, c, r, off=noise.uniform(-0.03, 0.03) if c else 0.0) for u, c in shapes]
    everything = fit.Data.of(observed, fit.structure(None, 0))
    assert everything.solve(["overhead", "prefill_rate", "attention", "cached_floor"])["cached_floor"] > 0
    got = solved(observed)
    assert "cached_floor" not in got.x and got.settings()["cached_token_us"] == 0.0
    said = [line for line in got.left_out if line.startswith("cached_token_us fitted at")]
    assert said and "did not make the held-out error of the TTFTs 2% smaller" in said[0]
    # The same calls from a server with 20 µs per cached token: it improves the held-out error, kept.
    real = rates(attention_ns=25.0, cached_token_us=20.0)
    kept = solved([lone(u, c, real, off=noise.uniform(-0.03, 0.03) if c else 0.0) for u, c in shapes])
    assert kept.settings()["cached_token_us"] == pytest.approx(20.0, rel=0.15)


def test_a_decode_term_is_judged_by_the_replies_gaps_not_hidden_by_the_prompts_noise() -> None:
    # 20 ns per context token: 2% of a gap after 5,100 tokens, on gaps measured within 0.3%, and
    # prompts 15% off at random. Judged on every time, the prompts' noise hid what it does to the
    # gaps (7.54% with it, 7.55% without: dropped); the gaps share no term with the TTFTs.
    truth = rates(attention_ns=25.0, decode_context_ns=20.0)
    rng = random.Random(1)
    prompts = [lone(u, c, truth, off=rng.uniform(-0.15, 0.15)) for u, c in SHAPES * 3]
    gaps = [gap((c,), truth, off=rng.uniform(-0.003, 0.003)) for c in (60, 1600, 3200, 5100)]
    got = solved(prompts + gaps)
    assert got.settings()["decode_context_ns"] == pytest.approx(20.0, rel=0.05)
    assert not [line for line in got.left_out if line.startswith("decode_context_ns")]


ROWS_OPENING = 1934
"""The rows probe's opening, cached: its calls' new parts come after it."""


def rows_probe(r: SimpleNamespace, noise: float = 0.0, seed: int = 0) -> list[Observation]:
    """Cold prompts of 4 lengths, then the rows probe's calls (probes.row_targets, a few tokens off
    each) after ROWS_OPENING cached tokens, timed by the registry with `r` (5 ms overhead), each
    off by up to `noise` (a share) at random."""
    rng = random.Random(seed)
    cold = [lone(u, 0, r, 5.0) for u in (100, 900, 3000, 4400)]
    calls = [(t + rng.randrange(-3, 4), ROWS_OPENING) for t in row_targets(4480)]
    return cold + [lone(u, c, r, 5.0, rng.uniform(-noise, noise)) for u, c in calls]


def structured(observations: list[Observation]) -> fit.TermsFit:
    """The fit with its piece and tile sizes searched (fit.fit_structure)."""
    return fit.fit_structure(observations, (observations[0::2], observations[1::2]), rows=True)[0]


LLAMA_CPU = rates(
    prefill_tokens_per_s=50_000.0, attention_ns=36.0, ubatch_tokens=512, tile_tokens=64, untiled_ns=620.0
)
"""llama.cpp on a CPU as measured here: pieces of 512, tiles of 64 rows, 620 ns per row and context token."""


@pytest.mark.parametrize("piece", [512, 256, 1024, None])
@pytest.mark.parametrize("tile", [32, 64])
def test_the_rows_probe_gives_back_the_piece_and_tile_sizes(piece: int | None, tile: int) -> None:
    r = SimpleNamespace(**vars(LLAMA_CPU) | {"ubatch_tokens": piece, "tile_tokens": tile})
    exact = structured(rows_probe(r))
    assert (exact.ubatch_tokens, exact.tile_tokens) == (piece, tile)
    assert exact.settings()["untiled_ns"] == pytest.approx(620, rel=1e-3)
    got = structured(rows_probe(r, noise=0.05))  # a shared machine's few %
    assert (got.ubatch_tokens, got.tile_tokens) == (piece, tile)
    assert got.settings()["untiled_ns"] == pytest.approx(620, rel=0.15)


def test_no_slow_last_piece_means_no_term() -> None:
    # A GPU engine, or the practice server's defaults: time grows smoothly with the new part.
    smooth = SimpleNamespace(**vars(LLAMA_CPU) | {"tile_tokens": 0})
    got = structured(rows_probe(smooth, noise=0.05))
    assert got.tile_tokens == 0 and "untiled" not in got.x
    assert not {"untiled_ns", "tile_tokens", "ubatch_tokens"} & set(got.settings())


def test_the_rows_probe_counts_only_calls_that_found_its_opening_cached() -> None:
    # Calls sent to another seat (nothing cached) or reported without a count say nothing about
    # their new part alone: they are left out, and with too few left, the term is not fitted.
    def call(u: int, cached: int | None) -> Sample:
        ms = lone(u, cached or 0, LLAMA_CPU, 5.0).ms
        return Sample(4 * (u + (cached or 0)), u + (cached or 0), cached, ms, 2)

    cold = [[call(u, 0)] for u in (100, 900, 3000, 4400)]
    good = [call(t, ROWS_OPENING) for t in row_targets(4480)]
    strays = [call(300, 0), call(2400, None), call(40, 1200)]
    m = Measurements(None, call(100, 0), cold, rows=[*good, *strays])  # type: ignore[arg-type]
    assert rows_after_opening(m) == good
    got, _ = fit_terms(m)
    assert (got.ubatch_tokens, got.tile_tokens) == (512, 64)
    assert got.settings()["untiled_ns"] == pytest.approx(620, rel=1e-3)
    few = Measurements(None, call(100, 0), cold, rows=[*good[:5], *strays])  # type: ignore[arg-type]
    assert fit_terms(few)[0].tile_tokens == 0
    assert "not fitted: 5 of 8 calls found the opening cached" in rows_evidence(few, *fit_terms(few))


def test_decode_terms_from_replies_alone_at_once_and_after_long_prompts() -> None:
    # 5 ms a token alone; 20% more per further stream; 600 ns per token of each stream's context.
    truth = rates(decode_slowdown=0.2, decode_context_ns=600.0, cached_token_us=20.0)
    observed = [lone(u, c, truth) for u, c in SHAPES]
    gaps = [gap((60,) * k, truth) for k in (1, 2, 4)] + [gap((c,), truth) for c in (1600, 3200, 5100)]
    got = solved(observed + gaps).settings()
    assert (got["decode_tps"], got["decode_slowdown"], got["decode_context_ns"]) == pytest.approx(
        (200, 0.2, 600)
    )
    # Faster after a long prompt is noise, not a negative term: left out.
    faster = [gap((60,), truth)] + [gap((c,), rates(decode_tokens_per_s=210.0)) for c in (1600, 3200, 5100)]
    assert solved(observed + faster).settings()["decode_context_ns"] == 0.0


def test_cache_kind_whole_blocks_or_longest_common_prefix() -> None:
    blocks = [(2100, 1600, 50.0), (2500, 2048, 40.0), (3700, 3200, 50.0), (4000, 3584, 45.0)]
    found = fit.cache_finding(blocks, 800.0)
    assert (found.reuse, found.kind, found.block_tokens) == ("yes", "blocks", 64)
    prefix = [(2100, 1641, 50.0), (2500, 2043, 40.0), (3700, 3211, 50.0), (4000, 3598, 45.0)]
    assert fit.cache_finding(prefix, 800.0).kind == "seat-prefix"
    nothing = [(2100, 0, 790.0), (2500, 3, 800.0)]
    assert fit.cache_finding(nothing, 800.0).reuse == "no"
    unreported = [(2100, None, 60.0), (2500, None, 70.0)]
    assert (fit.cache_finding(unreported, 800.0).reuse, fit.cache_finding(unreported, 800.0).kind) == (
        "yes",
        "unknown",
    )


def test_longest_common_prefix_with_no_seats_is_kept_to_the_token() -> None:
    # mlx_lm.server's cache (a trie of whole prompts) finds the longest common prefix: a question
    # after a 2,519-token opening reads 16 new tokens there. The twin keeps such a cache in blocks,
    # and whole blocks of 16 left it 8 to 12 new tokens more (+10 to +42% TTFT on mlx_lm.server).
    prefix = [(2100, 1641, 50.0), (2500, 2043, 40.0), (3700, 3211, 50.0), (4000, 3598, 45.0)]
    settings = cache_settings(fit.cache_finding(prefix, 800.0), seats=None)
    assert settings["cache_mode"] == "blocks"
    cache = PrefixCache(settings["cache_blocks"], settings["block_tokens"])
    opening = [*range(2519)]
    cache.insert(id_block_keys([*opening, 7001, 7002], settings["block_tokens"]), 0.0)
    question = [*opening, *range(9000, 9016)]
    new = cache.uncached_tokens(len(question), id_block_keys(question, settings["block_tokens"]), 1.0)
    assert new == 16
    assert settings["cache_blocks"] * settings["block_tokens"] == LCP_CACHE_TOKENS  # its capacity, as before


def together(*ttfts: float, tokens: int = 2600) -> list[Sample]:
    """One round of prompts sent at once, as the probe records them (cold, 8-token replies)."""
    return [Sample(tokens * 4, tokens, 0, t, 8) for t in ttfts]


def fitted_batch(*ttfts: float) -> tuple[int | None, float, list[list[float]]]:
    """The batch size fitted to one round, the twin at 10 ms + 10,000 tokens/s (0.1 ms a token):
    the size, its error, the twin's first tokens (the slowdown: `fitted_slowdown`)."""
    got = fitted(*ttfts)
    return got.tokens, got.error_pct, got.twin_ms


def fitted(*ttfts: float) -> fit.BatchFit:
    settings = {"overhead_ms": 10.0, "prefill_tps": 10_000.0}
    rounds = [together(*ttfts)]
    return fit.batch_tokens([ttfts], lambda b, s: twin_rounds(settings, 0.0, rounds, b, s))


def test_prompts_sent_at_once_give_the_batch_size_the_twin_books_nearest() -> None:
    # 4 x 2,600 tokens: one after another, each after its own prefill (260 ms each) ...
    assert fitted_batch(270, 530, 790, 1050)[:2] == (None, 0.0)
    # ... in batches of 2,048: the ends of batches 2, 3, 4 and 6 (token 4,096, 6,144, 8,192, 10,400),
    # but each batch after a first token holds a reply token of every stream still writing (8-token
    # replies, one token a batch: loop.py), each taking one of the 2,048, and 2.5 ms more (400
    # tokens/s, once a batch): batch 3, a's token and 2,047 prompt tokens (6,168: b's first); 4,
    # a's and b's and 2,046 (8,239: c's); 5, three tokens and d's 2,045; 6, three and d's last 166
    # (10,309 + 191 = 10,500)
    b, err, twin = fitted_batch(419.6, 626.8, 833.9, 1060.0)
    assert (b, err) == (2048, pytest.approx(0.0, abs=0.01)) and twin == [
        pytest.approx([419.6, 626.8, 833.9, 1060.0])
    ]
    assert fitted_batch(430, 610, 840, 1040)[0] == 2048  # a few ms of noise on each
    assert fitted_batch(320, 620, 830, 1050)[0] == 1024  # the ends of tokens 3,072, 6,144, 8,192, 10,400
    # All together (MLX: 4 first tokens at once): a step that takes every prompt waiting, whole
    # (ALL_AT_ONCE), puts all 4 in one step of 10,400 tokens: 10 ms of overhead, then 10,400 /
    # 10,000 s: exactly their 1,050 ms. Before it, the largest batch (8,192) put 3 together and
    # the 4th after, off by more than 5% whatever the slowdown.
    together_ = fitted(1050, 1050, 1050, 1050)
    assert together_.tokens == fit.ALL_AT_ONCE and together_.error_pct == pytest.approx(0.0, abs=0.01)
    assert len(set(together_.twin_ms[0])) == 1
    assert fitted(419.6, 626.8, 833.9, 1060.0).slowdown == 0  # batches alone: no slowdown


def test_batches_shared_by_prompts_that_take_longer_give_the_slowdown() -> None:
    # 4 x 2,600 tokens in batches of 2,048 that take 20% longer when they hold parts of two
    # prompts. Batch 1 holds a's first 2,048 tokens alone (204.8 ms, after 10 ms); batches 2 to 4
    # are shared (a|b, b|c, c|d: 1.2 x 204.8 ms each); d's last 2,208 tokens are alone again.
    # Each batch after a first token writes a reply token of every stream still writing (8-token
    # replies: one a batch), each taking one of the 2,048, and 2.5 ms more (400 tokens/s, once a
    # batch): batch 3 a's (b|c 2,047), 4 a's and b's (c|d 2,046), 5 and 6 three (d's 2,045, d's 166).
    shared = [10 + 204.8 + 1.2 * 204.8, 460.56 + 1.2 * 204.7 + 2.5, 708.7 + 1.2 * 204.6 + 2.5]
    ends = [*shared, shared[-1] + 204.5 + 2.5 + 16.6 + 2.5]
    got = fitted(*ends)
    assert (got.tokens, got.slowdown) == (2048, 0.2) and got.error_pct == pytest.approx(0, abs=0.01)
    # The twin's lane takes it as a setting: the same first tokens, booked
    s = Settings(prefill_tps=10_000.0, overhead_ms=10.0, batch_tokens=2048, batch_slowdown=0.2)
    model = PracticeModel(s)
    booked = [model.book(Prompt(2600, ()), 8, 0.0, 0.0) for _ in range(4)]  # (each moves the ones before)
    assert [b.ttft_s * 1000 for b in booked] == pytest.approx(ends)


def test_the_together_line_names_the_fit_and_says_when_it_is_poor() -> None:
    found = {"batch_tokens_error_pct": 1.2, "together_ttft_ms": [290, 430], "together_twin_ms": [280, 420]}
    line = together_line(2, 2048, found)
    assert "batches of 2,048 tokens" in line and "290, 430 ms measured, the twin 280, 420 ms" in line
    assert "No batch size" not in line
    assert "No batch size" in together_line(2, "none", found | {"batch_tokens_error_pct": 40.0})
    shared = together_line(2, 2048, found, 0.2)
    assert "a batch shared by several prompts 20% longer (batch_tokens 2048, batch_slowdown 0.2)" in shared


def test_characters_are_counted_as_the_practice_server_counts_them() -> None:
    messages = [{"role": "system", "content": "abc"}, {"role": "user", "content": "hello"}]
    assert prompts.chars_of(messages) == len("<|system|>\nabc\n<|user|>\nhello\n<|assistant|>\n")


# ── profiles: written, read back, refused with one message ───────────────────


def test_a_written_profile_reads_back_as_the_same_settings(tmp_path: Path) -> None:
    settings = {"overhead_ms": 7.5, "prefill_tps": 51000.0, "cache_mode": "seat-prefix", "seats": 4}
    p = Profile(
        {"schema": SCHEMA, "engine": 'llama.cpp "b1"', "date": "2026-12-01"}, settings, {"r": [1.5, 2.0]}
    )
    path = write(p, tmp_path / "p.toml")
    assert read_settings(path) == settings
    assert tomllib.loads(to_toml(p))["profile"]["engine"] == 'llama.cpp "b1"'


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[profile\nschema = 1", "is damaged: it is not valid TOML"),
        ("[settings]\nprefill_tps = 1000.0\n", "is not a profile: it has no [profile] table"),
        ('[project]\nname = "felab"\n', "is not a profile: it has no [profile] table"),  # not "damaged"
        ("[profile]\nschema = 3.0\n[settings]\n", "its [profile] schema is 3.0, not a whole number"),
        ("[profile]\n[settings]\n", "its [profile] has no schema"),
        (f"[profile]\nschema = {SCHEMA + 1}\n[settings]\n", "was written by a newer felab"),
        (
            "[profile]\nschema = 1\n[settings]\nwarp_factor = 9\n",
            "sets warp_factor, which this practice server",
        ),
        (
            "[profile]\nschema = 1\n[settings]\nprefill_tps = -5.0\n",
            "holds a value the practice server refuses",
        ),
        ("[profile]\nschema = 1\n", "has no [settings] table"),
    ],
)
def test_a_bad_profile_is_refused_with_one_message(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=said.replace("[", r"\[").replace("]", r"\]")):
        read_settings(path)


def test_a_missing_profile_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="no profile at .*felab calibrate --target llamacpp"):
        read_settings(tmp_path / "nowhere.toml")


def test_a_kit_path_typed_in_a_lesson_folder_names_the_one_meant(monkeypatch: pytest.MonkeyPatch) -> None:
    # `make mock PROFILE=data/profiles/lesson-mac.toml` in lessons/06-…: the path is read from
    # there, and the advice names the file from there; followed, it reads. Before: "use a
    # shipped one from data/profiles/", which is not there.
    lesson = KIT / "lessons" / "06-prefix-caching"
    monkeypatch.setenv("FELAB_CALLER_DIR", str(lesson))
    with pytest.raises(ProfileError) as refused:
        read_settings(lesson / "data" / "profiles" / "lesson-mac.toml")
    meant = re.search(r"Did you mean (\S+)\?", str(refused.value))
    assert meant is not None and meant.group(1) == "../../data/profiles/lesson-mac.toml", str(refused.value)
    assert read_settings(lesson / meant.group(1))["prefill_tps"] > 0


def test_a_profile_whose_tokenizer_is_not_here_says_so_before_any_request(tmp_path: Path) -> None:
    # A profile made on another machine names its tokenizer there. Before: `calibrate --check`
    # sent its first requests (billed, on a paid target), then the twin refused to start with
    # "start without --tokenizer", a flag nobody gave. Now the server and the check say so first,
    # nothing sent (no server listens at the check's address: it stops before connecting).
    made = (
        (PROFILES / "lesson-mac.toml")
        .read_text()
        .replace("[settings]\n", '[settings]\ntokenizer = "/Users/someone/models/tokenizer.json"\n', 1)
    )
    path = tmp_path / "other-machine.toml"
    path.write_text(made)
    assert read_settings(path)["tokenizer"] == "/Users/someone/models/tokenizer.json"  # it reads
    served = subprocess.run(
        [sys.executable, "-m", "felab.mock_server", "--profile", str(path), "--port", "9"],
        cwd=KIT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    checked = run_felab(
        "calibrate", "--check", str(path), "--target", "mock", "--base-url", "http://127.0.0.1:9/v1"
    )
    for out in (served, checked):
        said = " ".join(out.stderr.split())
        assert out.returncode != 0 and "Traceback" not in said, said
        assert "/Users/someone/models/tokenizer.json, which is not on this machine" in said, said
        assert "delete that line" in said and "--tokenizer" not in said
    path.write_text(made.replace('tokenizer = "/Users/someone/models/tokenizer.json"\n', ""))
    assert "tokenizer" not in read_settings(path)  # following it: the profile reads, by characters


def typed_in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m felab ARGS` run at the kit's root, as make runs it, for a learner who typed it
    in `folder` (FELAB_CALLER_DIR); its results go there too."""
    env = {**os.environ, "FELAB_CALLER_DIR": str(folder), "FELAB_RESULTS_DIR": str(folder / "results")}
    return subprocess.run(
        [sys.executable, "-m", "felab", *args], cwd=KIT, capture_output=True, text=True, timeout=120, env=env
    )


def test_calibrates_paths_are_read_from_the_folder_it_was_typed_in(tmp_path: Path) -> None:
    # `make calibrate ARGS="--check mine.toml"` in a lesson folder runs at the kit's root: the
    # profile is found in the learner's folder (FELAB_CALLER_DIR), as PROFILE= and TRACE= are.
    # Before: "no profile at mine.toml". Here it goes on to the server, which is not running.
    (tmp_path / "mine.toml").write_text((PROFILES / "lesson-mac.toml").read_text())
    out = typed_in(
        tmp_path,
        "calibrate",
        "--check",
        "mine.toml",
        "--target",
        "mock",
        "--base-url",
        "http://127.0.0.1:9/v1",
    )
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "no profile at" not in said and "nothing is listening" in said, said


def test_a_replays_profile_is_read_from_the_folder_it_was_typed_in(tmp_path: Path) -> None:
    # `make replay ARGS="--profile mine.toml"` in a lesson folder runs at the kit's root: the
    # profile is found where it was typed (FELAB_CALLER_DIR). Before: "no profile at mine.toml".
    (tmp_path / "mine.toml").write_text((PROFILES / "lesson-mac.toml").read_text())
    out = typed_in(tmp_path, "replay", "--profile", "mine.toml", "--limit", "3")
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(not Path("/dev/fd").is_dir(), reason="no /dev/fd to name a pipe by")
def test_a_profile_from_a_pipe_reads_as_often_as_asked() -> None:
    # `--profile <(cat p.toml)`: the server reads its profile twice (settings, then its twin's
    # name); a pipe gives its text once. Before: the second read found it empty ("damaged"),
    # a traceback. And a device that never ends is refused, not read into memory.
    read, write = os.pipe()
    os.write(write, (PROFILES / "lesson-mac.toml").read_bytes())
    os.close(write)
    try:
        path = Path(f"/dev/fd/{read}")
        assert read_settings(path) == read_settings(path) == read_settings(PROFILES / "lesson-mac.toml")
    finally:
        os.close(read)
    with pytest.raises(ProfileError, match="over 1 MiB"):
        read_settings(Path("/dev/zero"))


def test_the_shipped_profiles_read_and_the_defaults_one_is_the_defaults() -> None:
    defaults = read_settings(PROFILES / "practice-defaults.toml")
    assert defaults == {k: getattr(DEFAULTS, k) for k in defaults}
    mac = read_settings(PROFILES / "lesson-mac.toml")
    # The lesson: about 1,050 tokens a second; a 3,028-token opening takes roughly 3 seconds.
    cold = timing_of(mac).alone_ms(3028)  # the registry's terms (TimingModel reads them)
    assert 2800 <= cold <= 3100
    assert mac["context_tokens"] // mac["seats"] == 4096  # 16384 4: the lesson's seats
    for path in PROFILES.glob("*.toml"):
        assert "sources" in tomllib.loads(path.read_text()), (
            f"{path.name} must say where its figures come from"
        )


def test_check_refuses_a_bad_profile_before_it_sends_anything(tmp_path: Path) -> None:
    path = tmp_path / "newer.toml"
    path.write_text(f"[profile]\nschema = {SCHEMA + 1}\n")
    out = run_felab(
        "calibrate", "--check", str(path), "--target", "llamacpp", "--base-url", "http://127.0.0.1:9/v1"
    )
    assert out.returncode == 2
    assert "written by a newer felab" in out.stderr and "Traceback" not in out.stderr


# ── a practice server with known settings, measured back ─────────────────────

KNOWN = {
    "overhead_ms": 10.0,
    "prefill_tps": 10_000.0,
    "decode_tps": 200.0,
    "block_tokens": 32,
    "cached_token_us": 20.0,
    "decode_context_ns": 2000.0,
}


LLAMA_LIKE = (
    "--batch-tokens=2048",
    "--seats=4",
    "--context-tokens=32768",
    "--ubatch-tokens=512",
    "--tile-tokens=64",
    "--untiled-ns=600",
)
"""llama.cpp's batches and seats (the kit's -c 32768 -np 4), and its slow last piece of few rows."""


@pytest.mark.parametrize(("more", "batch"), [((), None), (LLAMA_LIKE, 2048)], ids=["none", "llama-like"])
def test_calibrating_a_practice_server_over_http_writes_a_profile_it_reads(
    tmp_path: Path, more: tuple[str, ...], batch: int | None
) -> None:
    flags = [f"--{k.replace('_', '-')}={v:g}" for k, v in KNOWN.items()] + list(more)
    out_file = tmp_path / "twin.toml"
    with practice_server(*flags) as url:
        out = run_felab(
            "calibrate", "--target", "mock", "--base-url", url, "--out", str(out_file), timeout=240
        )
    assert out.returncode == 0, out.stdout + out.stderr
    steps = 7 if batch else 6  # with seats, one more: an opening pushed out of every seat
    assert f"1/{steps}" in out.stdout and f"{steps}/{steps}" in out.stdout
    assert "prefill_attention_ns" in out.stdout
    got = read_settings(out_file)
    # Exact: how the server counts tokens and what its cache keeps.
    assert got["chars_per_token"] == pytest.approx(4.0, rel=0.01)
    # Whole blocks of 32, unless every cached count happened to be a multiple of 64 or 128 too
    # (then the evidence cannot tell 32 from them, and calibrate takes the largest, as it says).
    found = tomllib.loads(out_file.read_text(encoding="utf-8"))["measured"]["cache_evidence"]
    counts = [int(c.replace(",", "")) for c in re.findall(r"\d[\d,]*", found.split(":")[0])]
    assert all(c % 32 == 0 for c in counts)
    larger = [b for b in (64, 128, 256, 512, 1024) if all(c % b == 0 for c in counts)]
    assert (got["cache_mode"], got["block_tokens"]) == ("blocks", max(larger, default=32))
    # The timed terms are not asserted here: over real HTTP on a busy 2-core machine they carry
    # its noise (the overhead came out 0.0 against 10 under load: issue 29). The same pipeline on
    # a virtual clock gives them back exactly (test_calibrate_virtual.py). Here: it completes,
    # and writes a profile the practice server reads, with the seats it was started with.
    whole = tomllib.loads(out_file.read_text())
    assert whole["profile"]["engine"] == "felab practice server"
    assert got.get("seats") == (4 if batch else None)
    # With seats it looked for a cache beyond them: this server's blocks keep the opening, but a
    # host cache is a seat-prefix server's tier, so none is written.
    assert whole["measured"].get("host_cache") == ("yes" if batch else None)
    assert "host_cache_tokens" not in got
    assert isinstance(whole["measured"]["reference_tokens"], int)
    assert {"machine", "date", "method", "model"} <= set(whole["profile"])
    # How it counts tokens (counting.py): no tokenizer file named here (the practice server's model
    # id is no path), so characters fitted on varied text, its error by kind on held-out text: 4
    # characters a token on every kind, as the practice server counts.
    assert "tokenizer" not in got and "fitted on varied text" in whole["measured"]["token_count"]
    assert set(whole["measured"]["token_count_error_pct"]) == {"prose", "code", "numbers", "script"}
    assert all(abs(e) < 1 for e in whole["measured"]["token_count_error_pct"].values())
    assert "tokens: counted from characters, 4.00 a token" in out.stdout


# ── one clear message for each server calibrate cannot measure ───────────────


def test_a_server_that_is_down_gets_the_start_advice() -> None:
    out = run_felab("calibrate", "--target", "llamacpp", "--base-url", f"http://127.0.0.1:{free_port()}/v1")
    assert out.returncode == 2
    assert "Could not connect to the llamacpp server" in out.stderr and "Traceback" not in out.stderr


class NotOpenAI(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"<html><body>a router's login page</body></html>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web_page() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def test_a_server_that_is_not_openai_compatible_is_named_as_such(web_page: str) -> None:
    out = run_felab("calibrate", "--target", "llamacpp", "--base-url", web_page)
    assert out.returncode == 2
    assert "a web server is there, but not one that speaks OpenAI's API" in " ".join(out.stderr.split())
    assert "Traceback" not in out.stderr


def test_a_server_too_small_for_the_probes_says_so() -> None:
    with practice_server("--context-tokens", "1000") as url:
        out = run_felab("calibrate", "--target", "mock", "--base-url", url)
    assert out.returncode == 2
    assert "context is too small for calibrate's probe prompts" in out.stderr, out.stdout + out.stderr


def test_too_few_requests_allowed_says_how_many_are_needed() -> None:
    with practice_server() as url:
        out = run_felab("calibrate", "--target", "mock", "--base-url", url, "--max-requests", "5")
    assert out.returncode == 2 and "calibrate needs at least" in out.stderr


def test_a_server_too_slow_for_max_minutes_is_stopped_early_and_nothing_is_written(tmp_path: Path) -> None:
    # 2,000 tokens/s: the plan would take over a minute here; --max-minutes 0.5 stops it after its
    # first prompts (a slower machine only makes the projection longer). Before: no such option.
    out_file = tmp_path / "twin.toml"
    with practice_server("--prefill-tps=2000") as url:
        out = run_felab(
            "calibrate", "--target", "mock", "--base-url", url, "--out", str(out_file), "--max-minutes", "0.5"
        )
    said = " ".join(out.stderr.split())
    assert out.returncode == 2, out.stdout + out.stderr
    assert "this server is too slow to calibrate within --max-minutes 0.5" in said and "Traceback" not in said
    assert "nothing was written" in said and not out_file.exists()
    advice = re.search(r"`(python -m felab calibrate [^`]*)`", said)
    assert advice, said  # the learner's own flags, the bound raised
    assert f"--base-url {url} --out {out_file} --max-minutes " in advice[1]
    assert "calibrating it takes about" in out.stdout and "3/6" not in out.stdout  # stopped in step 2


@pytest.mark.parametrize("answer", ["n\n", "y\n", ""])
def test_a_paid_target_without_a_terminal_to_ask_sends_nothing(
    monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    # No terminal (a pipe, CI): nothing is sent, whatever the pipe holds, and the message says
    # so. Before: an empty stdin read as Ctrl+C ("interrupted", status 130).
    import subprocess
    import sys

    hits: list[str] = []

    class Counter(NotOpenAI):
        def do_POST(self) -> None:  # noqa: N802
            hits.append(self.path)
            self.send_response(500)
            self.end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-test-key")
    monkeypatch.setenv("FIREWORKS_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        out = subprocess.run(
            [sys.executable, "-m", "felab", "calibrate", "--target", "fireworks"],
            cwd=KIT,
            input=answer,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.shutdown()
    assert out.returncode == 2, out.stdout + out.stderr
    assert "it sends at most" in out.stdout and "bill your account" in out.stdout
    assert "nothing was sent (not confirmed)" in out.stderr and hits == []
    assert "interrupted" not in out.stdout + out.stderr


def test_the_benchs_calibrate_phase_runs_at_a_tiny_size() -> None:
    # make bench's phase, practice server only (llama.cpp is make test-engines' business), 2 rounds:
    # it prints the report card and what calibrate found next to what the server was started with.
    out = subprocess.run(
        [sys.executable, "-m", "felab.bench", "--tiny", "--phase", "calibrate"],  # --quick --practice-only
        cwd=KIT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "kinds of work have the twin's median TTFT within" in out.stdout
    assert "started with" in out.stdout and "cached_token_us" in out.stdout and "load average" in out.stdout
