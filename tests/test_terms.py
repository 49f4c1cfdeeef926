"""The registry of cost terms (felab/mock_server/terms/): each term's basis on steps worked by hand,
the sums it promises, the fit's way back from coefficients to settings, and TimingModel as a face
of it (a term added to TERMS is priced everywhere, and a prefill cut short is turned back into
tokens the same way whatever the terms). Last, the profiles written before the registry changed
what two settings mean."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from felab.mock_server import serve, terms
from felab.mock_server.config import DEFAULTS, Settings
from felab.mock_server.profile import END_LINE, SCHEMA, ProfileError, read_settings
from felab.mock_server.step import Piece, Step, prompt_steps
from felab.mock_server.terms import TERMS, Term, untiled
from felab.mock_server.timing import TimingModel

LLAMA = TimingModel(
    overhead_ms=5.0, prefill_tokens_per_s=50_000.0, decode_tokens_per_s=250.0, attention_ns=30.0,
    decode_slowdown=0.4, cached_token_us=3.0, decode_context_ns=600.0, ubatch_tokens=512,
    tile_tokens=64, untiled_ns=560.0, batch_slowdown=0.15,
)  # fmt: skip
"""Every term switched on, at values a llama.cpp twin has (no two alike, none a round 1)."""

SHARED = Step(
    (Piece(512, context=1000, opens=False, cached=600), Piece(30, context=2500, opens=True, cached=2500)),
    decodes=(3100, 250),
)
"""512 more tokens of a prompt that found 600 cached and read 400 already, the first 30 of a question
after 2,500 cached, and two streams writing reply tokens."""


def test_each_terms_basis_on_a_step_worked_by_hand() -> None:
    assert terms.basis(SHARED, LLAMA) == {
        "prefill_rate": 542,  # 512 + 30 new tokens
        "attention": 512 * (1000 + 256) + 30 * (2500 + 15),  # new · (context + new/2), each piece
        "masked": (512**2 + 30**2) / 2,  # each piece's new tokens against each other: half its square
        "cached_floor": 2500,  # only the piece that opens its prompt pays its cached tokens
        "untiled": 30 * (2500 + 30),  # 512 is a whole ubatch; 30 rows < a 64-row tile: each a pass
        "batch_slowdown": 542,  # two prompts share the step: every new token in it
        "decode_rate": 1,  # a step that writes reply tokens
        "decode_slowdown": 1,  # streams - 1
        "decode_context": 3100 + 250,  # each stream's context
    }
    alone = terms.basis(Step((Piece(100, context=0),)), LLAMA)  # a cold prompt alone, 100 rows: tiled
    assert alone == {
        **dict.fromkeys(alone, 0.0),
        "prefill_rate": 100,
        "attention": 100 * 50,
        "masked": 100 * 50,
    }
    one = terms.basis(Step(decodes=(10,)), LLAMA)  # one stream alone
    assert one == {**dict.fromkeys(one, 0.0), "decode_rate": 1, "decode_context": 10}


@pytest.mark.parametrize(
    ("seqs", "tokens", "ubatches"),
    [
        # seats 2 and 3 follow on: 17 rows of each, then the longer one alone, cut at 512
        ([2, 3], [17, 664], [[(0, 17), (1, 17)], [(1, 512)], [(1, 135)]]),
        # seats 0 and 3 do not: each alone (as a prompt alone is cut: 664 = 512 + 152)
        ([0, 3], [17, 664], [[(0, 17)], [(1, 512)], [(1, 152)]]),
        # two seats share a ubatch at most 512 / 2 rows each, until the shorter runs out (300 = 256 + 44)
        ([0, 1], [300, 1748], [[(0, 256), (1, 256)], [(0, 44), (1, 44)], [(1, 512)], [(1, 512)], [(1, 424)]]),
        # a reply token of seat 1 first in the batch: it takes seat 2's first row, not seat 0's
        ([1, 0, 2], [1, 17, 700], [[(0, 1), (2, 1)], [(1, 17)], [(2, 512)], [(2, 187)]]),
        # no seats known: every entry alone
        ([None, None], [17, 700], [[(0, 17)], [(1, 512)], [(1, 188)]]),
    ],
)
def test_a_batch_is_cut_into_ubatches_as_llama_cpp_cuts_it(
    seqs: list[int | None], tokens: list[int], ubatches: list[list[tuple[int, int]]]
) -> None:
    # llama-batch.cpp's split_equal(n_ubatch=512, sequential=true), by hand (terms/untiled.py).
    assert list(untiled.split(seqs, tokens, 512)) == ubatches


def test_rows_read_one_at_a_time_follow_the_ubatches_the_seats_make() -> None:
    # A 17-token question in seat 2 beside 664 tokens of a cold prompt in seat 3: a ubatch of 17
    # rows of each, so the cold prompt's first 17 rows are read row by row too (at its context
    # 2,053 + 17); in seat 0 the question's ubatch is its own, and the cold prompt's last 152 are tiled.
    question, cold = Piece(17, context=965, seq=2), Piece(664, context=2053, opens=False, seq=3)
    assert untiled.untiled(Step((question, cold)), LLAMA) == 17 * (965 + 17) + 17 * (2053 + 17)
    apart = Step((question._replace(seq=0), cold))
    assert untiled.untiled(apart, LLAMA) == 17 * (965 + 17)
    # a reply token in seat 1 goes first in the batch: a ubatch of one row each of seats 1, 2
    # and 3, then 16 rows each of seats 2 and 3
    shifted = Step((question, cold), decodes=(500,), decode_seqs=(1,))
    question_rows = 1 * (965 + 1) + 16 * (965 + 17)
    assert untiled.untiled(shifted, LLAMA) == question_rows + 1 * (2053 + 1) + 16 * (2053 + 17)


def test_a_step_costs_the_sum_of_coefficient_times_basis() -> None:
    coefs, basis = terms.coefficients(LLAMA), terms.basis(SHARED, LLAMA)
    assert coefs["batch_slowdown"] == pytest.approx(0.15 / 50_000)  # a share of the rate's cost
    assert coefs["decode_slowdown"] == pytest.approx(0.4 / 250)
    by_hand = (
        (542 / 50_000 + 30e-9 * basis["attention"] + 3e-6 * 2500 + 560e-9 * 30 * 2530 + 0.15 * 542 / 50_000)
        + (1 + 0.4) / 250
        + 600e-9 * 3350
    )
    assert terms.step_seconds(SHARED, LLAMA) == pytest.approx(by_hand)


def test_masked_attention_in_pieces_costs_less_than_the_whole_square() -> None:
    # MLX reads a prompt 2,048 tokens at a time, each piece a full rectangle: u·(c + u) pairs, the
    # causal attention's u·(c + u/2) and the masked term's u²/2. 4,000 tokens: 2,048·2,048 and
    # 1,952·4,000 pairs, 12.0 million, where one piece would be 16 million.
    mlx = TimingModel(0.0, 1e9, 400.0, attention_ns=100.0, masked_attention_ns=100.0)
    pieces = terms.prompt_seconds(4000, 0, mlx, 2048)
    assert pieces == pytest.approx(4000 / 1e9 + 100e-9 * (2048 * 2048 + 1952 * 4000))
    assert terms.prompt_seconds(4000, 0, mlx) == pytest.approx(4000 / 1e9 + 100e-9 * 4000 * 4000)


@pytest.mark.parametrize(("uncached", "cached", "batch"), [(2600, 0, 512), (1000, 4000, 300), (7, 50, 2)])
def test_attention_split_into_pieces_sums_to_the_whole_prompts(
    uncached: int, cached: int, batch: int
) -> None:
    # Token i of a prompt attends to cached + i tokens: the pieces' sums add up to the whole's.
    steps = prompt_steps(uncached, cached, batch)
    assert len(steps) == -(-uncached // batch) and sum(s.new_tokens for s in steps) == uncached
    pieces = sum(terms.basis(s, LLAMA)["attention"] for s in steps)
    assert pieces == pytest.approx(uncached * (cached + uncached / 2))
    attention_only = TimingModel(0.0, 2500.0, 400.0, attention_ns=30.0, cached_token_us=3.0)
    whole = terms.prompt_seconds(uncached, cached, attention_only)
    assert terms.prompt_seconds(uncached, cached, attention_only, batch) == pytest.approx(whole)
    assert whole == pytest.approx(
        uncached / 2500 + 30e-9 * uncached * (cached + uncached / 2) + 3e-6 * cached
    )


def test_settings_from_coefficients_gives_the_settings_back() -> None:
    # The fit's answer is coefficients; settings_from turns them into the settings a profile
    # writes (Settings' names), which give the same coefficients again.
    twin = Settings(
        prefill_tps=50_000.0, decode_tps=250.0, prefill_attention_ns=30.0, decode_slowdown=0.4,
        cached_token_us=3.0, decode_context_ns=600.0, untiled_ns=560.0, batch_slowdown=0.15,
    )  # fmt: skip
    got = terms.settings_from(terms.coefficients(twin.timing))
    assert set(got) == {name for t in TERMS for name in t.settings} - {"ubatch_tokens", "tile_tokens"}
    assert got == pytest.approx({name: getattr(twin, name) for name in got})
    again = dataclasses.replace(DEFAULTS, **got).timing
    assert terms.coefficients(again) == pytest.approx(terms.coefficients(twin.timing))


def fake_term() -> Term:
    """A term the registry does not have: 2 ms for each step that reads prompt tokens, 1 µs a new token."""
    return Term(
        name="launch",
        settings=("launch_us",),
        basis=lambda step, rates: float(step.new_tokens) + (2000.0 if step.pieces else 0.0),
        coefficient=lambda rates: 1e-6,
        values=lambda c: {"launch_us": c["launch"] * 1e6},
        probe="cold",
        meaning="a fixed cost for each step that reads a prompt",
        formula="launch_us · (2,000 + new tokens)",
    )


def test_a_term_added_to_the_registry_is_priced_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    # A new term is its own file and a line in TERMS; nothing else changes. Here it is one more
    # entry in TERMS (no production code edited): the step, a prompt, the timing model and the
    # fit's way back all see it.
    step, lesson = Step((Piece(300),)), DEFAULTS.timing
    before = terms.step_seconds(step, lesson), lesson.prefill_s(3045), lesson.alone_ms(50, 3000)
    monkeypatch.setattr(terms, "TERMS", (*TERMS, fake_term()))
    assert lesson.prefill_s(3045) == before[1]  # a timing model keeps the pricer it was made with,
    lesson = DEFAULTS.timing  # so the one made now sees the new term
    assert terms.basis(step, lesson)["launch"] == 2300.0
    assert terms.step_seconds(step, lesson) == pytest.approx(before[0] + 2300e-6)
    assert lesson.prefill_s(3045) == pytest.approx(before[1] + 5045e-6)  # TimingModel asks the registry
    assert lesson.alone_ms(50, 3000) == pytest.approx(before[2] + 2.05)
    assert terms.prompt_seconds(3045, 0, lesson, 1024) == pytest.approx(before[1] + (3 * 2000 + 3045) * 1e-6)
    assert terms.settings_from(terms.coefficients(lesson))["launch_us"] == pytest.approx(1.0)
    # A prefill cut short is turned back into tokens by the same routine, the new term included.
    for n in (0, 1, 999, 2047):
        assert lesson.prefilled_tokens(lesson.read_s(n)) == n
    assert lesson.computed_tokens(lesson.read_s(1000), 3045) == 1000
    assert lesson.prefilled_tokens(1999e-6) == 0  # the step's 2 ms come before its first token


def test_the_timing_model_is_a_face_of_the_registry() -> None:
    assert LLAMA.prefill_s(2590, 100) == terms.prompt_seconds(2590, 100, LLAMA)
    # One stream: today's token gap, to the last bit; k streams: the step they share.
    for model in (DEFAULTS.timing, LLAMA):
        for context in (0, 250, 5000):
            gap = (1 + model.decode_slowdown * 0) / model.decode_tokens_per_s
            assert model.token_interval_s(1, context) == gap + model.decode_context_ns * 1e-9 * context
    assert LLAMA.token_interval_s(3, 1000) == pytest.approx((1 + 0.4 * 2) / 250 + 600e-9 * 3 * 1000)
    # The lesson's numbers: a cold 3,045-token prompt 15 + 3045/2.5 ms, a warm question 15 + 50/2.5.
    assert DEFAULTS.timing.alone_ms(3045) == pytest.approx(1233.0)
    assert DEFAULTS.timing.alone_ms(50, 2995) == pytest.approx(35.0)
    assert dataclasses.replace(DEFAULTS, batch_slowdown=0.2).timing.batch_slowdown == 0.2


@pytest.mark.parametrize(("uncached", "cached"), [(2590, 0), (20, 2500), (3000, 4000), (700, 0)])
def test_a_prefill_cut_short_keeps_the_tokens_its_time_read(uncached: int, cached: int) -> None:
    # One bisection over read_s for every term (attention, the cached tokens, the last piece...):
    # the tokens computed by a time are those whose reading fits in it; the last piece of few rows
    # (2,590 = 5 x 512 + 30; 20 < a tile) counts only when the whole prefill is over.
    rows = LLAMA.untiled_rows(uncached)
    whole = LLAMA.prefill_s(uncached, cached)
    assert LLAMA.computed_tokens(whole, uncached, cached) == uncached
    assert LLAMA.computed_tokens(whole * (1 - 1e-6), uncached, cached) <= uncached - rows
    for n in sorted({0, 1, uncached // 3, uncached - rows - 1}):
        if 0 <= n < uncached - rows:
            assert LLAMA.computed_tokens(LLAMA.read_s(n, cached), uncached, cached) == n
            assert LLAMA.computed_tokens(LLAMA.read_s(n + 1, cached) - 1e-6, uncached, cached) == n
    assert LLAMA.computed_tokens(0.0, uncached, cached) == 0
    assert LLAMA.untiled_s(uncached, cached) == pytest.approx(560e-9 * rows * (cached + uncached))


# ── Profiles from before the registry ────────────────────────────────────────


def profile(tmp_path: Path, schema: int, settings: str, about: str = "") -> Path:
    path = tmp_path / "twin.toml"
    path.write_text(f"[profile]\nschema = {schema}\n{about}\n[settings]\n{settings}\n\n{END_LINE}\n")
    return path


def test_a_profile_from_before_the_registry_that_sets_a_changed_term_is_refused(tmp_path: Path) -> None:
    about = 'target = "llamacpp"\nmeasured_at = "http://127.0.0.1:8081/v1"\n'
    old = profile(tmp_path, 2, "prefill_tps = 50000.0\ncached_token_us = 46.0\n", about)
    with pytest.raises(ProfileError) as refused:
        read_settings(old)
    said = str(refused.value)
    assert "was made by an earlier felab (profile schema 2), and it sets cached_token_us," in said
    assert (
        "Run `python -m felab calibrate --target llamacpp --base-url http://127.0.0.1:8081/v1` again" in said
    )
    assert "--base-url is the address it was measured at" in said  # the server may run elsewhere now
    # Through the practice server's --profile: one message, exit 2, no traceback.
    out = CliRunner().invoke(serve.main, ["--profile", str(old)])
    assert out.exit_code == 2 and "made by an earlier felab" in out.output and "Traceback" not in out.output
    # No target or address recorded: the command still runs as given, and says what to change.
    bare = profile(tmp_path, 1, "batch_slowdown = -0.2\ncached_token_us = 2.5\n[fit]")
    with pytest.raises(
        ProfileError, match="sets cached_token_us and batch_slowdown.*--target llamacpp` again"
    ):
        read_settings(bare)


def test_a_profile_that_sets_neither_changed_term_means_the_same_and_is_read(tmp_path: Path) -> None:
    settings = "prefill_tps = 50000.0\nprefill_attention_ns = 31.5\n"
    assert (
        read_settings(profile(tmp_path, 2, settings + "cached_token_us = 0.0"))["prefill_attention_ns"]
        == 31.5
    )
    now = read_settings(profile(tmp_path, SCHEMA, settings + "batch_slowdown = 0.1\ncached_token_us = 2.5"))
    assert (now["batch_slowdown"], now["cached_token_us"]) == (0.1, 2.5)  # a profile of this kit's


def test_a_long_replys_token_gap_counts_half_the_reply_as_context() -> None:
    # Token i of a reply attends to the prompt and the i reply tokens before it, so with a context
    # term the mean gap of a 201-token reply after 100 prompt tokens is that of a context of 200
    # (step.reply_context), not 100: on llama-server (a 384-wide model) the twin's gap was 29%
    # short with the prompt alone. The booked gap, the loop's and the fit's read the same context.
    from felab.mock_server.booking import PracticeModel, Prompt
    from felab.mock_server.step import reply_context

    assert reply_context(100, 201) == 200 and reply_context(100, 1) == 100 and reply_context(100, 0) == 100
    s = dataclasses.replace(DEFAULTS, decode_tps=500.0, decode_context_ns=2000.0)
    booked = PracticeModel(s).book(Prompt(100, ()), 201, 0.0, 0.0)
    assert booked.interval_s == pytest.approx(1 / 500 + 2000e-9 * 200, rel=1e-12)
    batched = PracticeModel(dataclasses.replace(s, batch_tokens=2048)).book(Prompt(100, ()), 201, 0.0, 0.0)
    assert batched.interval_s == pytest.approx(1 / 500 + 2000e-9 * 200, rel=1e-12)
    assert getattr(batched.prefill, "gap", None) == pytest.approx(batched.interval_s, rel=1e-12)  # the loop's


def test_a_pricer_works_out_the_streams_terms_once_a_streams_tuple_and_each_step_to_the_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The loop forms a prompt's steps back to back with one streams tuple: the terms that read
    # only the streams (the last in TERMS) are worked out once for it, and added in the same order.
    asked: list[tuple[int, ...]] = []
    context = next(t for t in TERMS if t.name == "decode_context")
    counted = dataclasses.replace(
        context, basis=lambda step, rates: asked.append(step.decodes) or float(sum(step.decodes))
    )
    monkeypatch.setattr(terms, "TERMS", tuple(counted if t is context else t for t in TERMS))
    rates = dataclasses.replace(
        DEFAULTS, decode_slowdown=0.4, decode_context_ns=600.0, prefill_attention_ns=30.0
    ).timing
    streams, other = (1000, 2000), (5000,)
    steps = [Step((Piece(512, c, opens=not c),), streams) for c in (0, 512, 1024)]
    steps += [Step((Piece(512),), other), Step((Piece(100),), streams), Step((Piece(100),))]
    price = terms.pricer(rates)
    got = [price(s) for s in steps]
    assert asked == [streams, other, streams, ()]  # once for each run of one tuple
    assert got == [terms.step_seconds(s, rates) for s in steps]  # each a fresh pricer's, exactly
    assert got[0] != got[1] != got[2]  # (the pieces' terms are each step's own)
