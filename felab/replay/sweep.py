"""A list in a flag sweeps it: every combination of the values given is one configuration.

    --replicas 1,8,18 --route random,affinity,prefix   ->  9 configurations

Each configuration is the practice server's own `Settings` (config.py), and the flags are
written from the same declarations as the server's (mock_server/flags.py): a flag means
here what it means to `python -m felab.mock_server`, with the same default, spellings
(`--cache-blocks unlimited`, `--cache-ttl never`) and bounds. Every setting that shapes the
model is a flag here; a new one is one field in `Settings`.
"""

from __future__ import annotations

import itertools
from dataclasses import Field, dataclass
from typing import Any

import click

from felab.mock_server.config import DEFAULTS, UNLIMITED, Settings
from felab.mock_server.flags import flag, spell, sweep_fields, sweep_values, to_settings

ALWAYS = ("replicas", "route", "cache_blocks")
"""The settings every table shows, first and in this order; any other shows when it is swept."""


@dataclass(frozen=True)
class Knob:
    """One setting as replay shows it: its flag, its Settings field, its column in the tables."""

    declared: Field

    @property
    def field(self) -> str:
        return self.declared.name

    @property
    def flag(self) -> str:
        return flag(self.declared)

    @property
    def column(self) -> str:
        return self.declared.metadata["column"] or self.field.replace("_", " ")

    @property
    def help(self) -> str:
        return self.declared.metadata["help"]

    def spell(self, value: Any) -> str:
        return spell(self.declared, value)


def _order(f: Field) -> int:
    return ALWAYS.index(f.name) if f.name in ALWAYS else len(ALWAYS)


KNOBS = tuple(Knob(f) for f in sorted(sweep_fields(), key=_order))


def default_text(knob: Knob) -> str:
    """A flag's default as the learner would type it (from DEFAULTS)."""
    return knob.spell(getattr(DEFAULTS, knob.field))


def values(knob: Knob, text: str) -> list[Any]:
    """The comma-separated values of one flag, each read as its field reads one."""
    try:
        return sweep_values(knob.declared, text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=knob.flag) from None


def configurations(given: dict[str, str], base: Settings) -> tuple[list[Settings], list[Knob]]:
    """Every combination of the flags' values, and which flags vary (the swept ones).

    `given`: each knob's field -> the flag's text (a field left out keeps `base`'s value).
    A value the server would refuse is a usage error naming its flag.
    """
    lists = {k.field: values(k, given[k.field]) for k in KNOBS if given.get(k.field) is not None}
    swept = [k for k in KNOBS if len(lists.get(k.field, ())) > 1]
    combos = itertools.product(*lists.values())
    return [to_settings(dict(zip(lists, combo, strict=True)), base) for combo in combos], swept


def recorded(s: Settings) -> dict[str, Any]:
    """The settings that shape a replay, as its row records them (`unlimited` spelled out); the
    block size is the row's own field (known in both modes: the trace's text is cut by it)."""
    shown = (k.field for k in KNOBS if k.field != "block_tokens")
    return {f: "unlimited" if getattr(s, f) == UNLIMITED else getattr(s, f) for f in shown}
