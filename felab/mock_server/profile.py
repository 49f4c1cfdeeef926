"""A timing profile: a file of practice-server settings, measured on one real server.

`python -m felab calibrate` measures a server (llama.cpp on your laptop, say) and
writes what it found as a small TOML file; `--profile FILE` on the practice
server and on `felab replay` reads it back as *defaults*: a flag given next to it
still wins. The file's shape:

    [profile]                       # what it is: schema version, engine, model, date, machine, method
    schema = 3
    [settings]                      # the practice server's settings, by their names in config.py
    prefill_tps = 52000.0
    prefill_attention_ns = 31.5
    [fit] [measured] [sources]      # for people: residuals, raw figures, where each figure comes from
    # end of the felab profile      # the last line: a file without it was cut short

Reading is strict, because a wrong profile would quietly make a wrong twin: a file that
is not TOML, has no `[profile]` with a schema this kit reads, names a setting this
practice server does not have (the message names its line and the setting it probably
meant), holds a value out of bounds, or was cut short, is refused with one message
(`ProfileError`) saying what to do.

A file cut short at the end of a line is still valid TOML, and the settings it lost would
silently be the practice server's defaults; so a whole profile is recognised by its last
line, `END_LINE`, which calibrate always writes last (schema 2). A schema-1 profile (before
that line: the shipped ones and older calibrate runs) is whole when another table follows
its `[settings]`, as every schema-1 writer wrote one (`[fit]`, `[sources]`).

Schema 3 is the cost terms' registry (felab/mock_server/terms/), where two settings changed
meaning: `cached_token_us` is added to attention (it was the larger of the two), and
`batch_slowdown` costs each prompt token of a batch shared by several prompts (it stretched
the whole batch). A profile from an earlier felab that sets either is refused, with the
calibrate command that measures its server again (`old_meaning`); one that sets neither means
the same today and is read as it is.

The standard library reads TOML from Python 3.11 (tomllib); 3.10 uses tomli, the same code
as a package.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from felab.mock_server.config import DEFAULTS, Settings
from felab.mock_server.timing import TimingModel

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SCHEMA = 3
"""The profile layout this kit writes and reads. A later kit that changes it writes a larger number.
3: cached_token_us and batch_slowdown as the cost terms mean them (`REGISTRY`). 2: the file ends
with END_LINE. 1: the same tables, without it (still read: see the docstring)."""
REGISTRY = 3
"""The first schema whose cached_token_us and batch_slowdown mean what the cost terms say."""
CHANGED = ("cached_token_us", "batch_slowdown")
"""The settings whose meaning changed at schema REGISTRY: in an earlier profile, refused unless 0."""
END_LINE = "# end of the felab profile (a copy without this last line was cut short)"
"""The last line of every profile calibrate writes (schema 2): how a whole one is recognised."""
END_MARK = "# end of the felab profile"
"""What the last line must start with (the rest of END_LINE is for people)."""


class ProfileError(ValueError):
    """A profile this kit cannot use; the message says why and what to do."""


KIT_ROOT = Path(__file__).resolve().parents[2]
"""The kit's folder (felab.paths.KIT_ROOT, which the practice server may not import: it imports
nothing of the learner's library, tests/test_docs.py)."""
SHIPPED = KIT_ROOT / "data" / "profiles" / "lesson-mac.toml"
"""The profile the lesson ships: the example Mac's llama.cpp."""


def learner_folder() -> Path:
    """The folder the learner typed the command in: FELAB_CALLER_DIR, which the Makefile passes on,
    else the working folder (as felab.paths.learner_folder())."""
    named = os.environ.get("FELAB_CALLER_DIR", "")
    return Path(named).resolve() if named and Path(named).is_dir() else Path.cwd().resolve()


def _meant(path: Path) -> str:
    """ " Did you mean …?" when `path`, read from the learner's folder, names a file of the kit
    read from its root (`data/profiles/…` typed in a lesson folder), else ""."""
    here = learner_folder()
    try:
        inside = (here / path).resolve().relative_to(here)
    except ValueError:
        return ""
    meant = KIT_ROOT / inside
    return f" Did you mean {os.path.relpath(meant, here)}?" if here != KIT_ROOT and meant.is_file() else ""


def load(path: Path) -> dict[str, Any]:
    """The whole profile as TOML tables, its `[profile]` schema checked."""
    return parse(path)[1]


MAX_PROFILE_BYTES = 1 << 20
"""A profile is a few kB; a file over 1 MiB is not one, and is not read to find out (`/dev/zero`
would never end; calibrate's --out will not replace one: calibrate/save.py)."""
_READ_ONCE: dict[str, str] = {}
"""The text of each profile given as a pipe (`--profile <(…)`), which can be read only once, by
path: the server reads its profile twice (its settings, then its twin's name)."""


def _text(path: Path) -> str:
    """A profile file's text (OSError, UnicodeDecodeError or ProfileError if it is none)."""
    if str(path) in _READ_ONCE:
        return _READ_ONCE[str(path)]
    with path.open("rb") as f:
        data = f.read(MAX_PROFILE_BYTES + 1)
    if len(data) > MAX_PROFILE_BYTES:
        raise ProfileError(f"the profile {path} is over 1 MiB, so it is no profile (they are a few kB).")
    text = data.decode("utf-8")
    if not path.is_file():  # a pipe, or a device
        _READ_ONCE[str(path)] = text
    return text


def parse(path: Path) -> tuple[str, dict[str, Any]]:
    """The profile's text, and its TOML tables with the `[profile]` schema checked."""
    try:
        text = _text(path)
    except FileNotFoundError:
        raise ProfileError(
            f"no profile at {path}.{_meant(path)} Write one with `python -m felab calibrate --target "
            f"llamacpp` (it says where it saved it), or use a shipped one: "
            f"{os.path.relpath(SHIPPED, learner_folder())} (the lesson's Mac)."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"the profile {path} cannot be read ({exc}).") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(
            f"the profile {path} is damaged: it is not valid TOML ({exc}). Calibrate again to write a "
            f"new one, or restore it from where you copied it."
        ) from None
    except RecursionError:  # tomllib reads nested arrays and tables by recursion
        raise ProfileError(
            f"the profile {path} is damaged: it nests arrays or tables too deeply to read, which no "
            f"profile does. Calibrate again to write a new one, or restore it from where you copied it."
        ) from None
    check_schema(path, data)
    return text, data


def check_schema(path: Path, data: dict[str, Any]) -> None:
    """A `[profile]` table with a schema this kit reads, or the ProfileError that says what is wrong."""
    about = data.get("profile")
    if not isinstance(about, dict):  # TOML, but another file's (pyproject.toml, a run's record)
        raise ProfileError(
            f"{path} is not a profile: it has no [profile] table, which every profile `felab calibrate` "
            f"writes begins with. Give a profile: one calibrate saved "
            f"({os.path.relpath(KIT_ROOT / 'results' / 'profiles', learner_folder())}/), or a shipped "
            f"one: {os.path.relpath(SHIPPED, learner_folder())}."
        )
    schema = about.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool) or schema < 1:
        what = "has no schema" if schema is None else f"schema is {schema!r}, not a whole number of 1 or more"
        raise ProfileError(
            f"the profile {path} is damaged: its [profile] {what} (calibrate writes `schema = {SCHEMA}`). "
            f"Calibrate again to write a new one, or restore it from where you copied it."
        )
    if schema > SCHEMA:
        raise ProfileError(
            f"the profile {path} was written by a newer felab (profile schema {schema}; this kit reads "
            f"schema {SCHEMA}). Update the kit (`git pull`, then `make setup`), or calibrate again with "
            f"this one."
        )


def lines(text: str) -> list[str]:
    return text.splitlines()


def line_of(text: str, table: str, key: str) -> int | None:
    """The line number (from 1) of `key = ...` in `[table]`, or None."""
    inside = False
    for number, line in enumerate(lines(text), start=1):
        head = re.match(r"\s*\[\s*([^\]]+?)\s*\]", line)
        if head:
            inside = head.group(1).strip('"') == table
        elif inside and re.match(rf"\s*\"?{re.escape(key)}\"?\s*=", line):
            return number
    return None


def unknown_setting(path: Path, text: str, key: str, known: list[str]) -> str:
    """The message for a setting this server does not have: its line, and the setting it probably
    meant (a typo, `seat` for `seats`), or where the settings are listed."""
    line = line_of(text, "settings", key)
    where = f" (line {line})" if line else ""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    meant = (
        f"Did you mean {close[0]}? Fix that line"
        if close
        else (
            "No setting has a name close to it (`python -m felab.mock_server --help` lists them, "
            "`--cache-blocks` for cache_blocks): fix that line"
        )
    )
    return (
        f"the profile {path} sets {key}, which this practice server does not have{where}. {meant}, "
        f"or calibrate again."
    )


def cut_short(path: Path, text: str, data: dict[str, Any]) -> str | None:
    """Why this profile looks cut short (see the module's docstring), or None if it is whole."""
    filled = [(n, line) for n, line in enumerate(lines(text), start=1) if line.strip()]
    last_n, last = filled[-1] if filled else (0, "")
    schema = data["profile"]["schema"]
    if schema >= 2:
        if last.startswith(END_MARK):
            return None
        why = f"it ends at line {last_n} (`{last.strip()[:60]}`) without its closing line `{END_MARK}`"
    else:
        if list(data)[-1:] != ["settings"]:
            return None
        why = f"it ends inside [settings] at line {last_n} (`{last.strip()[:60]}`), with no table after it"
    return (
        f"the profile {path} was cut short: {why}, so settings after that line may be missing and would "
        f"silently be the practice server's defaults. Copy it again whole, or calibrate again."
    )


def read_settings(path: Path) -> dict[str, Any]:
    """The profile's `[settings]`: setting name -> value, each checked as the server checks a flag;
    then the file checked whole (its last line), so a cut one is never served with defaults."""
    text, data = parse(path)
    values = data.get("settings")
    if not isinstance(values, dict):
        raise ProfileError(f"the profile {path} is damaged: it has no [settings] table. Calibrate again.")
    known = [f.name for f in dataclasses.fields(Settings)]
    unknown = [k for k in values if k not in known]  # in the file's order: the first named first
    if unknown:
        raise ProfileError(unknown_setting(path, text, unknown[0], known))
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    values = {k: worded(k, v) for k, v in values.items()}  # TOML has no null: `batch_tokens = "none"`
    try:
        dataclasses.replace(DEFAULTS, **values)
    except (ValueError, TypeError) as exc:
        raise ProfileError(
            f"the profile {path} holds a value the practice server refuses: {str(exc).rstrip('.')}. "
            f"Fix that line, or calibrate again."
        ) from None
    cut = cut_short(path, text, data)
    if cut:
        raise ProfileError(cut)
    old = old_meaning(path, data, values)
    if old:
        raise ProfileError(old)
    return values


def absent_tokenizer(path: Path, values: dict[str, Any]) -> str | None:
    """Why a profile's twin cannot count tokens on this machine (its `tokenizer` file, recorded
    where it was made, is not here), or None. Asked before a server starts or a check sends
    anything; `read_settings` alone reads the file, wherever it was made."""
    tokenizer = values.get("tokenizer")
    if not isinstance(tokenizer, str) or Path(tokenizer).expanduser().exists():
        return None
    return (
        f"the profile {path} counts tokens with the engine's tokenizer, {tokenizer}, which is not "
        f"on this machine. Copy that file here (the model file the server loaded, or its "
        f"tokenizer.json) and set the profile's `tokenizer = ...` line to where it is; or delete "
        f"that line, and the twin counts tokens from characters (`chars_per_token`), less exactly."
    )


def old_meaning(path: Path, data: dict[str, Any], values: dict[str, Any]) -> str | None:
    """Why this profile, from an earlier felab, would give a wrong twin: it sets a setting whose
    meaning changed (`CHANGED`); None if it sets none of them (it means today what it meant).
    The advice is calibrate's command for the server the profile names, as far as it names it."""
    about = data["profile"]
    changed = [k for k in CHANGED if values.get(k)]
    if about["schema"] >= REGISTRY or not changed:
        return None
    target, url = about.get("target"), about.get("measured_at")
    named = isinstance(target, str) and re.fullmatch(r"[a-z][a-z0-9_-]*", target)
    command = f"python -m felab calibrate --target {target if named else 'llamacpp'}"
    if isinstance(url, str) and re.fullmatch(r"https?://[\w.:/-]+", url):
        command += f" --base-url {url}"
    which = "" if named else " (with the --target of the server it was measured on)"
    if " --base-url " in command:  # where it was measured, which may not be where it runs now
        which += " (--base-url is the address it was measured at: give the server's address now if it moved)"
    return (
        f"the profile {path} was made by an earlier felab (profile schema {about['schema']}), and it "
        f"sets {' and '.join(changed)}, which this kit reads differently: cached_token_us is now added "
        f"to attention's cost, not the larger of the two, and batch_slowdown costs each prompt token of "
        f"a shared batch, not the whole batch. Its twin would be wrong. Run `{command}` again{which} "
        f"to measure the server anew."
    )


def timing_of(settings: dict[str, Any]) -> TimingModel:
    """The timing model a profile's settings (`read_settings`' values) give; the rest the defaults."""
    return dataclasses.replace(DEFAULTS, **settings).timing


PROFILE_HELP = (
    "a profile from `felab calibrate` (TOML): its settings become these flags' defaults; "
    "a flag given as well still wins"
)


def worded(name: str, value: Any) -> Any:
    """The value a word stands for where the setting declares it (`"none"`: None), else the value."""
    words = next(f.metadata["words"] for f in dataclasses.fields(Settings) if f.name == name)
    return words[value.lower()] if isinstance(value, str) and value.lower() in words else value


def spelled(value: Any) -> str:
    """A setting's value as a flag's text (a default_map value is read as if typed; None: `none`)."""
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return repr(value) if isinstance(value, float) else str(value)


def profile_option(skip: tuple[str, ...] = (), note: str = "") -> Callable[[Callable], Callable]:
    """A decorator that gives a click command `--profile FILE`, read before its other flags.

    The profile's settings become the command's defaults (click's `default_map`, keyed by the
    settings' names, which are the flags' parameter names), so a flag typed next to it wins.
    A setting the command has no flag for is kept in `ctx.meta[UNFLAGGED]` for it to apply;
    `skip` names settings this command keeps its own (replay: the trace's block size)."""

    def load(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if not value:
            return
        path = learner_folder() / value  # as typed there (`make replay ARGS=...` runs at the kit's root)
        try:
            values = read_settings(path)
        except ProfileError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
        ctx.meta[PROFILE_PATH] = path  # the server says which twin it is (twin.py)
        values = {k: v for k, v in values.items() if k not in skip}
        names = {p.name for p in ctx.command.params}
        flagged = {k: spelled(v) for k, v in values.items() if k in names}
        ctx.default_map = {**(ctx.default_map or {}), **flagged}
        ctx.meta[UNFLAGGED] = {k: v for k, v in values.items() if k not in names}

    return click.option(
        "--profile",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=load,
        help=PROFILE_HELP + note,
    )


UNFLAGGED = "felab.profile.unflagged"
"""ctx.meta key: the profile's settings that have no flag on this command."""

PROFILE_PATH = "felab.profile.path"
"""ctx.meta key: the profile file given, as typed (the server says which twin it is, twin.py, and its
banner repeats the profile's `[fit] warnings`)."""


def warnings_of(path: Path) -> list[str]:
    """The doubts calibrate wrote into a profile (`[fit] warnings`), to be said wherever it is used."""
    fitted = load(path).get("fit")
    found = fitted.get("warnings") if isinstance(fitted, dict) else None
    return [str(w) for w in found] if isinstance(found, list) else []
