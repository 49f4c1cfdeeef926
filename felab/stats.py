"""Percentiles, the way numpy computes them by default (linear interpolation).

For sorted values x[0..n-1], the p-th percentile sits at rank k = (n-1)·p/100;
between the two neighbours of k we draw a straight line. p50 is the median,
p0 the smallest value, p100 the largest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], p: float) -> float | None:
    """The p-th percentile (0..100) of `values`; `None` for no values, never a silent 0."""
    xs = sorted(values)
    if not xs:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be between 0 and 100, got {p}")
    k = (len(xs) - 1) * p / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or `None` where either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return a / b
