"""A list in a flag sweeps it: every combination of the values given is one configuration.

    --replicas 1,8,18 --route random,affinity,prefix   ->  9 configurations

Each configuration is the practice server's own `Settings` (config.py), so a flag means
here what it means to `python -m felab.mock_server`, and its default is read from
`DEFAULTS`, never written again. Two values are the replay's own spelling:
`--cache-blocks unlimited` (a cache larger than any trace) and `--cache-ttl never`.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import click

from felab.mock_server.config import DEFAULTS, Settings

UNLIMITED = sys.maxsize
"""`--cache-blocks unlimited`: no trace has that many blocks, so nothing is ever evicted."""


@dataclass(frozen=True)
class Knob:
    """One sweepable flag: its name, the Settings field it sets, and how a value is read."""

    flag: str
    field: str
    read: Callable[[str], Any]
    column: str
    """Its column in the table."""


def whole(text: str) -> int:
    return int(text)


def blocks(text: str) -> int:
    return UNLIMITED if text.lower() in ("unlimited", "inf") else int(text)


def ttl(text: str) -> float | None:
    return None if text.lower() in ("never", "none") else float(text)


KNOBS = (
    Knob("--replicas", "replicas", whole, "replicas"),
    Knob("--route", "route", str, "route"),
    Knob("--cache-blocks", "cache_blocks", blocks, "cache blocks"),
    Knob("--cache-ttl", "cache_ttl_s", ttl, "TTL s"),
    Knob("--prefill-tps", "prefill_tps", float, "prefill tok/s"),
    Knob("--overhead-ms", "overhead_ms", float, "overhead ms"),
    Knob("--decode-tps", "decode_tps", float, "decode tok/s"),
)


def default_text(knob: Knob) -> str:
    """A flag's default as the learner would type it (from DEFAULTS)."""
    value = getattr(DEFAULTS, knob.field)
    if value is None:
        return "never"
    return f"{value:g}" if isinstance(value, float) else str(value)


def values(knob: Knob, text: str) -> list[Any]:
    """The comma-separated values of one flag, each read as its field wants."""
    try:
        return [knob.read(part.strip()) for part in text.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a list of values, e.g. 1,8,18", param_hint=knob.flag
        ) from None


def configurations(given: dict[str, str], base: Settings) -> tuple[list[Settings], list[Knob]]:
    """Every combination of the flags' values, and which flags vary (the swept ones).

    `given`: each knob's field -> the flag's text. A value the server would refuse is a
    usage error naming it.
    """
    lists = {k.field: values(k, given[k.field]) for k in KNOBS}
    swept = [k for k in KNOBS if len(lists[k.field]) > 1]
    out = []
    for combo in itertools.product(*lists.values()):
        try:
            out.append(replace(base, **dict(zip(lists, combo, strict=True))))
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    return out, swept
