"""The flags of every setting, written from its one declaration in config.py.

A `Settings` field says its default, its help and its bounds once. From that this
module gives:

    read(field, text)      the value a learner typed (`2500`, `never`, `429,cut`)
    spell(field, value)    the value as a learner would type it (inverse of read)
    problem(field, value)  what is wrong with a value, naming its flag (None: nothing)
    server_options         the click options of `python -m felab.mock_server`
    twin_help_option       its `--help-twin`: the twin's settings, which `--help` leaves out
    sweep_fields           the settings `felab replay` takes (a comma-separated list sweeps one)
    command_line(s)        the flags that start a practice server with settings `s`

So the server, the replay and the real-time replay's server can never disagree on a
flag's name, default or meaning.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable
from typing import Any

import click

from felab.mock_server.config import DEFAULTS, MODEL, Settings, flag, kind, noun, spell
from felab.mock_server.profile import PROFILE_PATH

Field = dataclasses.Field


def fields(scope: str | None = None) -> list[Field]:
    """The declared settings, in declaration order; of one scope (MODEL or SERVER) if named."""
    return [f for f in dataclasses.fields(Settings) if scope is None or f.metadata["scope"] == scope]


def twin_fields() -> list[Field]:
    """The settings of a calibrated twin (declared `twin=True`): calibrate writes them, learners don't."""
    return [f for f in fields() if f.metadata["twin"]]


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
    """Decorate a click command with one option per setting, each defaulting to DEFAULTS'.

    A twin's setting is a hidden option: click still reads it (from the command line, or from a
    profile through the default map), but `--help` does not list it; `--help-twin` does."""
    for field in reversed(fields()):
        option = click.option(
            flag(field),
            field.name,
            type=SettingType(field),
            default=spell(field, getattr(DEFAULTS, field.name)),  # read back as the field reads it
            show_default=True,
            help=field.metadata["help"],
            hidden=field.metadata["twin"],
        )
        f = option(f)
    return f


TWIN_HELP = (
    "The settings of a calibrated twin. `felab calibrate` measures them on a real server and writes "
    "them in a profile (--profile FILE); with each at its default the server is lesson 06's model. "
    "They are flags too, and a flag given next to a profile wins. How each is measured: "
    "docs/practice-server.md, 'The formula, term by term'."
)


def show_twin_help(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """`--help-twin`: print the twin's settings as `--help` prints the others, then exit."""
    if not value or ctx.resilient_parsing:
        return
    twin = {f.name for f in twin_fields()}
    rows = []
    for p in ctx.command.params:
        if p.name in twin:
            shown = copy.copy(p)  # a hidden option has no help record; its visible copy does
            shown.hidden = False  # type: ignore[attr-defined]
            record = shown.get_help_record(ctx)
            if record:
                rows.append(record)
    formatter = ctx.make_formatter()
    formatter.write_usage(ctx.command_path, "[OPTIONS]")
    formatter.write_paragraph()
    formatter.write_text(TWIN_HELP)
    with formatter.section("Twin settings"):
        formatter.write_dl(rows)
    click.echo(formatter.getvalue(), nl=False, color=ctx.color)
    ctx.exit()


def twin_help_option(f: Callable) -> Callable:
    """Decorate a click command with `--help-twin`, which lists the settings `--help` leaves out."""
    return click.option(
        "--help-twin",
        is_flag=True,
        is_eager=True,
        expose_value=False,
        callback=show_twin_help,
        help="Show the settings of a calibrated twin (set by `felab calibrate` in a profile) and exit.",
    )(f)


def sweep_fields() -> list[Field]:
    """The settings `felab replay` takes: those that shape the model (scope MODEL)."""
    return fields(MODEL)


def sweep_values(f: Field, text: str) -> list[Any]:
    """The comma-separated values of one replay flag, each read as its field reads one."""
    parts = [part.strip() for part in text.split(",")]
    if not all(parts):
        example = ",".join(f.metadata["choices"][:2]) if f.metadata["choices"] else "1,8,18"
        raise ValueError(f"{flag(f)} has an empty item in {text!r}: give each value, e.g. {example}")
    return [read(f, part) for part in parts]


def to_settings(values: dict[str, Any], base: Settings = DEFAULTS) -> Settings:
    """`base` with these fields changed; a click.UsageError naming the flag if a value is refused."""
    try:
        return dataclasses.replace(base, **values)
    except ValueError as exc:
        raise click.UsageError(str(exc) + profiles_part(str(exc))) from None


def profiles_part(message: str) -> str:
    """` (--cache-mode seat-prefix is profile lesson-mac's: …)` when a flag the refusal names was
    set by the command's --profile, not typed: a learner who typed `--seats none` next to it
    must learn where the other half of the conflict came from."""
    ctx = click.get_current_context(silent=True)
    path = ctx.meta.get(PROFILE_PATH) if ctx else None
    if ctx is None or path is None:
        return ""
    declared = {f.name: f for f in fields()}
    from_it = [
        p
        for p in ctx.command.params
        if p.name in declared
        and p.name in ctx.params
        and ctx.get_parameter_source(p.name) == click.core.ParameterSource.DEFAULT_MAP
        and re.search(rf"{re.escape(p.opts[0])}(?![\w-])", message)
    ]
    given = [f"{p.opts[0]} {spell(declared[p.name], ctx.params[p.name])}" for p in from_it if p.name]
    if not given:
        return ""
    return f" (profile {path.stem} sets {', '.join(given)}; a flag typed next to it wins)"


def command_line(s: Settings, scope: str | None = None) -> list[str]:
    """The flags that start a practice server with settings `s` (those that differ from DEFAULTS)."""
    out = []
    for f in fields(scope):
        value = getattr(s, f.name)
        if value != getattr(DEFAULTS, f.name):
            out += [flag(f), spell(f, value)]
    return out


__all__ = [
    "command_line", "flag", "read", "server_options", "spell", "sweep_fields", "twin_fields",
    "twin_help_option",
]  # fmt: skip
