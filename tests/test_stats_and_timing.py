"""Percentiles (numpy's linear definition) and the practice server's timing arithmetic."""

from __future__ import annotations

import pytest

from felab.mock_server.config import DEFAULTS
from felab.mock_server.timing import PrefillLane
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


def test_the_prefill_lane_serves_prompts_one_after_another() -> None:
    lane = PrefillLane()  # each prompt ready 10 ms after it arrives; 1,000 tokens/s
    a = lane.book(0.01, 0.5, now=0.0)  # 0.01 + 0.5
    b = lane.book(0.01, 0.5, now=0.0)  # waits for a
    c = lane.book(5.01, 0.1, now=5.0)  # arrives to an idle lane
    assert a.end == pytest.approx(0.51)
    assert b.start == pytest.approx(0.51)
    assert b.end == pytest.approx(1.01)
    assert c.end == pytest.approx(5.11)
