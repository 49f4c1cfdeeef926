"""Tables for people (tabulate); JSON lines for machines live in results.py."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

NUMBER_TEXT = re.compile(r"-?[0-9][0-9,]*(\.[0-9]+)?")
"""A number already written as text (`4,096`): it aligns as a number."""


def is_number(value: Any) -> bool:
    if isinstance(value, str):
        return NUMBER_TEXT.fullmatch(value) is not None
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def alignment(columns: Sequence[Sequence[Any]]) -> list[str]:
    """Each column's alignment: right for a column of numbers, so a missing value's `n/a` stands
    under the numbers' last digits (tabulate would put it on the left), left for text."""
    return ["right" if any(is_number(v) for v in column) else "left" for column in columns]


def table(rows: Sequence[dict[str, Any]], floatfmt: str = ".1f") -> str:
    """Rows of dicts as a plain-text table; missing values show as `n/a`, right-aligned with numbers."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    align = alignment([[r.get(k) for r in rows] for k in keys])
    return tabulate(rows, headers="keys", floatfmt=floatfmt, missingval="n/a", colalign=align)
