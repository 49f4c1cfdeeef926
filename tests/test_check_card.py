"""The report card's arithmetic (felab/calibrate/check.py), on samples written by hand: rounds
pooled, the real server held against itself (even rounds against odd), and what the card says
about a miss that is no larger than the server's own spread."""

from __future__ import annotations

import pytest

from felab.calibrate import check as card
from felab.calibrate.probes import Sample

COLD = card.COLD.format(2560)


def sample(ttft_ms: float, output_tokens: int = 2, total_ms: float | None = None) -> Sample:
    return Sample(10_000, 2_560, 0, ttft_ms, output_tokens, total_ms=total_ms or ttft_ms + 1)


def rounds(ttfts: list[float], kind: str = COLD) -> card.Rounds:
    """One sample of `kind` per round, and 6 follow-up calls (the time per output token row)."""
    return [
        {kind: [sample(t)], card.OPENING_FIRST_REST: [sample(30, 25, 30 + 24 * 2.0) for _ in range(6)]}
        for t in ttfts
    ]


def test_rounds_are_pooled_in_order() -> None:
    got = card.pooled(rounds([100, 110, 120]))
    assert [s.ttft_ms for s in got[COLD]] == [100, 110, 120]
    assert len(got[card.OPENING_FIRST_REST]) == 18


def test_the_real_server_against_itself_is_its_even_rounds_against_its_odd() -> None:
    # Even rounds (0, 2, 4) at 100 ms, odd rounds (1, 3) at 130: the medians differ by 30 ms,
    # over a median of all five of 100 ms: 30%.
    spread = card.itself(rounds([100, 130, 100, 130, 100]), COLD, card.ttft)
    assert spread == pytest.approx(0.30)
    assert card.itself(rounds([100]), COLD, card.ttft) is None  # one round: nothing to compare


def test_a_row_carries_the_spread_and_the_card_says_what_a_miss_within_it_means() -> None:
    # The real server: 200 ms in even rounds, 240 in odd ones (spread 40/220 = 18%); the twin
    # 190 ms every time: -14% from the real median of 220, off target but within the spread.
    real, twin = rounds([200, 240, 200, 240]), rounds([190, 190, 190, 190])
    row = card.compare(real, twin)[0]
    assert (row.kind, row.real_p50, row.twin_p50, row.within) == (COLD, 220, 190, False)
    assert row.real_itself == pytest.approx(40 / 220)
    assert row.cells()["real, even vs odd rounds"] == "18%"
    note = card.noise_note(card.compare(real, twin))
    assert "up to 18% (cold, ~2,560 tokens)" in note
    # Held to the twin's target: cold missed (18% of 220 ms, 40 ms), the opening met it (0%).
    assert "held to the twin's target, it met it on 1 of 2 kinds" in note
    assert "no more than the server moved against itself: cold, ~2,560 tokens" in note


def test_a_miss_larger_than_the_servers_own_spread_is_not_excused() -> None:
    # The real server steady at 200 ms (spread 0%), the twin at 150: -25%, the twin's error.
    rows = card.compare(rounds([200, 200, 200, 200]), rounds([150, 150, 150, 150]))
    assert not rows[0].within and rows[0].real_itself == 0
    assert "no more than the server moved" not in card.noise_note(rows)


PIECES = {"prefill_tps": 50_000.0, "ubatch_tokens": 512, "tile_tokens": 64, "untiled_ns": 600.0}
"""A profile with llama.cpp's last piece of few rows."""


def cold(prompt_tokens: int, ttft_ms: float) -> Sample:
    return Sample(4 * prompt_tokens, prompt_tokens, 0, ttft_ms, 2, total_ms=ttft_ms + 1)


def test_a_miss_where_the_prompts_ended_on_the_tooth_on_one_server_only_is_named() -> None:
    # llama.cpp counted 7 of the 10 prompts 1 to 63 tokens past 2,560 (a last piece of few
    # rows: 250 ms), the twin counted all ten 80 past (185 ms): -26%, and the card says why.
    real = [{COLD: [cold(2600 if i < 7 else 2650, 250 if i < 7 else 185)]} for i in range(10)]
    twin = [{COLD: [cold(2640, 185)]} for _ in range(10)]
    real[0][card.OPENING_FIRST_REST] = twin[0][card.OPENING_FIRST_REST] = [cold(20, 30)]
    rows = card.compare(real, twin)
    assert not rows[0].within
    note = card.pieces_note(card.pooled(real), card.pooled(twin), rows, PIECES)
    assert note is not None
    assert "cold, ~2,560 tokens: 7 of 10 on the real server, 0 on the twin" in note
    assert "fewer than 64 tokens" in note and "multiple of 512" in note
    assert "The twin counts tokens from characters" in note
    # A twin with the engine's tokenizer counts as the engine does: the note names its template instead.
    with_tokenizer = card.pieces_note(
        card.pooled(real), card.pooled(twin), rows, {**PIECES, "tokenizer": "/models/tiny.gguf"}
    )
    assert with_tokenizer is not None and "from characters" not in with_tokenizer
    assert "its chat template is not the engine's" in with_tokenizer
    # No such term in the profile, or the same count on both: nothing to say.
    assert card.pieces_note(card.pooled(real), card.pooled(twin), rows, {}) is None
    assert card.pieces_note(card.pooled(real), card.pooled(real), rows, PIECES) is None


def test_a_miss_with_one_prompt_of_ten_on_the_tooth_is_not_put_down_to_it() -> None:
    # One of ten on the tooth cannot move a median: the miss is the twin's, and the card says nothing.
    real = [{COLD: [cold(2600 if i == 0 else 2650, 250)]} for i in range(10)]
    twin = [{COLD: [cold(2640, 185)]} for _ in range(10)]
    real[0][card.OPENING_FIRST_REST] = twin[0][card.OPENING_FIRST_REST] = [cold(20, 30)]
    rows = card.compare(real, twin)
    assert not rows[0].within
    assert card.pieces_note(card.pooled(real), card.pooled(twin), rows, PIECES) is None
