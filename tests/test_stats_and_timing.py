"""Percentiles (numpy's linear definition) and the practice server's timing arithmetic."""

from __future__ import annotations

import pytest

from felab.stats import percentile, ratio
from felab.timing import PrefillLane, TimingModel


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
    model = TimingModel()
    cold = model.overhead_ms / 1000 + model.prefill_s(3028)
    warm = model.overhead_ms / 1000 + model.prefill_s(40)
    assert cold == pytest.approx(1.226, abs=0.001)  # "call 1 about 1.2 s"
    assert warm == pytest.approx(0.031, abs=0.001)  # "calls 2-12 about 30 ms"


def test_the_prefill_lane_serves_prompts_one_after_another() -> None:
    model = TimingModel(overhead_ms=10, prefill_tokens_per_s=1000)
    lane = PrefillLane()
    _, first_a = lane.schedule(0.0, model, 500)  # 0.01 + 0.5
    start_b, first_b = lane.schedule(0.0, model, 500)  # waits for a
    _, first_c = lane.schedule(5.0, model, 100)  # arrives to an idle lane
    assert first_a == pytest.approx(0.51)
    assert start_b == pytest.approx(0.51)
    assert first_b == pytest.approx(1.01)
    assert first_c == pytest.approx(5.11)
