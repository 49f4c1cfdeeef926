"""The flags of every setting, written from its one declaration in config.py.

A `Settings` field says its default, its help and its bounds once. From that this
module gives:

    read(field, text)      the value a learner typed (`2500`, `never`, `429,cut`)
    spell(field, value)    the value as a learner would type it (inverse of read)
    problem(field, value)  what is wrong with a value, naming its flag (None: nothing)
    server_options         the click options of `python -m felab.mock_server`
    sweep_fields           the settings `felab replay` takes (a comma-separated list sweeps one)
    command_line(s)        the flags that start a practice server with settings `s`

So the server, the replay and the real-time replay's server can never disagree on a
flag's name, default or meaning.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click

from felab.mock_server.config import DEFAULTS, MODEL, Settings, flag, kind, noun, spell

Field = dataclasses.Field


def fields(scope: str | None = None) -> list[Field]:
    """The declared settings, in declaration order; of one scope (MODEL or SERVER) if named."""
    return [f for f in dataclasses.fields(Settings) if scope is None or f.metadata["scope"] == scope]


def read(f: Field, text: str) -> Any:
    """The value `text` stands for; ValueError naming the flag if it is not one."""
    text = text.strip()
    words, of = f.metadata["words"], kind(f.name)
    if text.lower() in words:
        return words[text.lower()]
    if of is tuple:
        items = tuple(part.strip() for part in text.split(","))
        if not all(items):
            raise ValueError(f"{flag(f)} has an empty item in {text!r}: give each value, comma-separated")
        return items
    try:
        return of(text)
    except ValueError:
        spelled = f" or {', '.join(words)}" if words else ""
        raise ValueError(f"{flag(f)} takes {noun(of)}{spelled}, not {text!r}") from None


METAVARS = {int: "INTEGER", float: "FLOAT", tuple: "LIST"}


class SettingType(click.ParamType):
    """A click type that reads a flag's text as its field does (bounds are checked by Settings)."""

    def __init__(self, f: Field) -> None:
        of, choices = kind(f.name), f.metadata["choices"]
        self.field = f
        self.name = "[" + "|".join(choices) + "]" if choices and of is str else METAVARS.get(of, "TEXT")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default, already a value
        try:
            return read(self.field, value)
        except ValueError as exc:
            raise click.UsageError(str(exc), ctx) from None


def server_options(f: Callable) -> Callable:
    """Decorate a click command with one option per setting, each defaulting to DEFAULTS'."""
    for field in reversed(fields()):
        option = click.option(
            flag(field),
            field.name,
            type=SettingType(field),
            default=spell(field, getattr(DEFAULTS, field.name)),  # read back as the field reads it
            show_default=True,
            help=field.metadata["help"],
        )
        f = option(f)
    return f


def sweep_fields() -> list[Field]:
    """The settings `felab replay` takes: those that shape the model (scope MODEL)."""
    return fields(MODEL)


def sweep_values(f: Field, text: str) -> list[Any]:
    """The comma-separated values of one replay flag, each read as its field reads one."""
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        raise ValueError(f"{flag(f)} has an empty item in {text!r}: give each value, e.g. 1,8,18")
    return [read(f, part) for part in parts]


def to_settings(values: dict[str, Any], base: Settings = DEFAULTS) -> Settings:
    """`base` with these fields changed; a click.UsageError naming the flag if a value is refused."""
    try:
        return dataclasses.replace(base, **values)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def command_line(s: Settings, scope: str | None = None) -> list[str]:
    """The flags that start a practice server with settings `s` (those that differ from DEFAULTS)."""
    out = []
    for f in fields(scope):
        value = getattr(s, f.name)
        if value != getattr(DEFAULTS, f.name):
            out += [flag(f), spell(f, value)]
    return out


__all__ = ["command_line", "flag", "read", "server_options", "spell", "sweep_fields"]
