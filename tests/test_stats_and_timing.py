"""Percentiles (numpy's linear definition) and the practice server's timing arithmetic."""

from __future__ import annotations

import dataclasses

import pytest

from felab.mock_server.config import DEFAULTS
from felab.mock_server.loop import Loop
from felab.mock_server.timing import TimingModel
from felab.stats import percentile, ratio


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([1, 2, 3, 4], 50, 2.5),  # numpy.percentile([1,2,3,4], 50)
        ([1, 2, 3, 4], 25, 1.75),
        ([1, 2, 3, 4], 95, 3.85),
        ([10, 1, 7], 50, 7),  # order of the input does not matter
        ([15, 20, 35, 40, 50], 40, 29.0),
        ([5], 99, 5),
        ([3, 9], 0, 3),
        ([3, 9], 100, 9),
    ],
)
def test_percentile_matches_numpy_linear(values: list[float], p: float, expected: float) -> None:
    assert percentile(values, p) == pytest.approx(expected)


def test_percentile_of_nothing_is_none_not_zero() -> None:
    assert percentile([], 50) is None


def test_percentile_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        percentile([1, 2], 101)


def test_ratio_guards_missing_and_zero() -> None:
    assert ratio(10, 4) == 2.5
    assert ratio(None, 4) is None
    assert ratio(1, 0) is None


def test_lesson_defaults_give_the_lesson_numbers() -> None:
    model = DEFAULTS.timing
    cold = model.overhead_ms / 1000 + model.prefill_s(3028)
    warm = model.overhead_ms / 1000 + model.prefill_s(40)
    assert cold == pytest.approx(1.226, abs=0.001)  # "call 1 about 1.2 s"
    assert warm == pytest.approx(0.031, abs=0.001)  # "calls 2-12 about 30 ms"


def test_a_last_piece_of_few_rows_costs_a_pass_over_the_context_per_row() -> None:
    # llama.cpp on a CPU: pieces of 512, tiles of 64; a piece of fewer rows costs k·rows·context.
    llama = {"prefill_tps": 50_000.0, "ubatch_tokens": 512, "tile_tokens": 64, "untiled_ns": 620.0}
    cpu = dataclasses.replace(DEFAULTS, **llama).timing
    assert cpu.untiled_rows(2590) == 30  # 5 pieces of 512, then 30
    assert cpu.untiled_rows(2660) == 0  # the last piece has 100 rows: tiled
    assert cpu.untiled_rows(2560) == 0  # no last piece: 5 whole ones
    assert cpu.untiled_s(2590) == pytest.approx(620e-9 * 30 * 2590)
    # A 20-token question after 2,500 cached tokens: its 20 rows each pass over 2,520 tokens.
    assert cpu.untiled_s(20, 2500) == pytest.approx(620e-9 * 20 * 2520)
    assert cpu.prefill_s(20, 2500) == pytest.approx(cpu.read_s(20, 2500) + cpu.untiled_s(20, 2500))
    assert cpu.prefill_s(20, 2500) > cpu.prefill_s(100, 2500)  # fewer new tokens, longer: the tooth
    # No pieces (none): the whole prompt is one piece, slow only when it is short.
    whole = dataclasses.replace(cpu, ubatch_tokens=None)
    assert (whole.untiled_rows(30), whole.untiled_rows(2590)) == (30, 0)
    # Off by default: lesson 06's numbers do not move.
    assert DEFAULTS.timing.untiled_s(20, 2500) == 0.0


def test_the_prefill_lane_serves_prompts_one_after_another() -> None:
    # the lesson's engine, one whole prompt a step; each ready 10 ms after it arrives; 1,000 tokens/s
    lane = Loop(None, TimingModel(overhead_ms=10.0, prefill_tokens_per_s=1000.0, decode_tokens_per_s=400.0))
    a = lane.book(0.01, now=0.0, new=500, cached=0, rank=None, reply=1)  # 0.01 + 0.5
    b = lane.book(0.01, now=0.0, new=500, cached=0, rank=None, reply=1)  # waits for a
    c = lane.book(5.01, now=5.0, new=100, cached=0, rank=None, reply=1)  # arrives to an idle lane
    assert a.end == pytest.approx(0.51)
    assert b.start == pytest.approx(0.51)
    assert b.end == pytest.approx(1.01)
    assert c.end == pytest.approx(5.11)
