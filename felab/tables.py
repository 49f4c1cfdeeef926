"""Tables for people (tabulate); JSON lines for machines live in results.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tabulate import tabulate


def table(rows: Sequence[dict[str, Any]], floatfmt: str = ".1f") -> str:
    """Rows of dicts as a plain-text table; missing values show as `n/a`."""
    return tabulate(rows, headers="keys", floatfmt=floatfmt, missingval="n/a")
