"""Your numbers: the latest recorded cold row of each lesson, per target, twin, fleet and order.

Every run appends a line to `results/<key>.jsonl` (key `06-prefix` belongs to
lesson 06). For the wrap-up only the latest cold run of each (target, twin, fleet, order)
counts (a run whose call 1 was already cached, `warm_start`, is flagged and
used only when there is no cold one), so that is what `make numbers` prints,
ready to copy. A twin's runs (a practice server started with --profile, which
results.py records as `profile`) are rows of their own, never the practice
server's, and so are a fleet's (a run sent to `make fleet`'s URL, which results.py
records as `fleet`: `mock via sglang-router cache_aware, 4 workers`); a lesson's fields
take only runs that are its step (`left_out`: not a twin's, not a fleet's, not --quick, not
one made while calibrate shared the server). Where runs
recorded each call's TTFT, a picture is drawn beside the results:
`results/<key>-ttft.png`, one panel per target (a twin and a fleet their own), one line per order."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from felab.course.lessons import LESSONS_DIR, discover
from felab.errors import FelabError
from felab.paths import learner_folder, results_dir
from felab.results import KEY_PATTERN, MAX_ROW_BYTES, iter_records
from felab.tables import table

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI (pyproject.toml installs it there)
    import tomli as tomllib

GROUP_BY = ("target", "profile", "fleet", "order", "mode")
"""A row replaces an earlier one when these fields match (the ones it has): lesson 06's
prefix_bench rows differ by `order`, its affinity_bench rows by `mode` (one row per mode a run);
a twin's rows (a practice server started with --profile: results.py records its `profile`) are
their own rows, never the plain practice server's; so are a fleet's (a run through `make
fleet`'s URL: results.py records its `fleet`), one group per router, policy and size."""


# ── Each lesson's numbers: which recorded value fills which field ───────────


@dataclass(frozen=True)
class Source:
    """Where a field's value comes from: the latest row of `results/<records>.jsonl` matching `where`."""

    records: str
    where: dict[str, str]
    values: tuple[str, ...]
    """The row's keys shown, in this order, joined by " / "."""
    decimals: int = 0


@dataclass(frozen=True)
class Field:
    """One of a lesson's numbers: what the learner writes down, and where the kit can find it."""

    key: str
    label: str
    hint: str
    """Shown under the input; `backticks` become code."""
    source: Source | None = None


NUMBERS_FILE = "numbers.toml"
"""A lesson's numbers, declared in its folder: `lessons/NN-slug/numbers.toml` (docs/bundle.md)."""


def declared(lessons: Path = LESSONS_DIR) -> dict[str, list[Field]]:
    """Each lesson's numbers, by lesson folder in course order: the fields of its page's "your
    numbers" form (make bundle) and of `make numbers`' "your numbers" lines, each filled by
    `measured()`. Read from every `numbers.toml` under `lessons`; a lesson without one has none."""
    return {
        lesson.name: read_fields(lesson.path / NUMBERS_FILE)
        for lesson in discover(lessons)
        if (lesson.path / NUMBERS_FILE).is_file()
    }


def read_fields(path: Path) -> list[Field]:
    """The `[[field]]` tables of one numbers.toml, in order; a clear error for a malformed one."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise FelabError(f"{path} is not valid TOML ({exc}).") from None
    fields = []
    for n, item in enumerate(data.get("field") or [], start=1):
        where = f"{path}, field {n}"
        _keys(item, where, need={"key", "label", "hint"}, may={"source"})
        source = item.get("source")
        if source is not None:
            _keys(source, f"{where}, its source", need={"records", "where", "values"}, may={"decimals"})
            source = Source(
                str(source["records"]),
                {str(k): str(v) for k, v in dict(source["where"]).items()},
                tuple(str(v) for v in source["values"]),
                int(source.get("decimals", 0)),
            )
        fields.append(Field(str(item["key"]), str(item["label"]), str(item["hint"]), source))
    if not fields:
        raise FelabError(f"{path} declares no numbers: add a [[field]] table (see docs/bundle.md).")
    return fields


def _keys(table: Any, where: str, need: set[str], may: set[str]) -> None:
    """Check a TOML table has every key in `need` and nothing outside `need | may`."""
    if not isinstance(table, dict):
        raise FelabError(f"{where} is not a table.")
    missing, unknown = need - table.keys(), table.keys() - need - may
    if missing or unknown:
        said = [f"has no {', '.join(sorted(missing))}" if missing else ""]
        said += [f"has unknown {', '.join(sorted(unknown))}" if unknown else ""]
        raise FelabError(f"{where} does not follow docs/bundle.md: it {' and '.join(s for s in said if s)}.")


def _number(value: Any) -> bool:
    """A finite number: not a bool, a string, NaN or infinity (JSON lets a damaged file hold any)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def warm(row: dict[str, Any]) -> bool:
    """Whether a run started warm: its call 1 found the opening already cached (`warm_start`)."""
    return row.get("warm_start") is True


def left_out(row: dict[str, Any], source: Source) -> str | None:
    """Why a run that matches a field's `where` is not the lesson's step, or None if it is.

    A twin's run (its `profile`) is the twin's, not the server the field names, and a fleet's
    (its `fleet`) is several servers behind a router, not that one; a `--quick` run
    has 3 questions, not the step's 12; a run `during` a calibration shared the server with it."""
    if row.get("profile") is not None and "profile" not in source.where:
        return f"it ran on a twin (profile {row['profile']}), not on {row.get('target')} itself"
    if row.get("fleet") is not None and "fleet" not in source.where:
        return f"it ran through a fleet ({row['fleet']}), not on one {row.get('target')} server"
    if row.get("quick") is True:
        return "it was a --quick run (3 calls, not the lesson's 12): run the step without --quick"
    if isinstance(row.get("during"), str):
        return f"it ran while {row['during']} was sending to the same server: run the step again alone"
    return None


def model_note(row: dict[str, Any]) -> str:
    """A run whose server reported another model than the run asked for (results.py), said so."""
    if "model_asked" not in row:
        return ""
    if row.get("model_listed") is False:
        return f"The run asked for {row['model_asked']}, which its server does not list."
    return f"The server ran {row.get('model')}, though the run asked for {row['model_asked']}."


def measured(source: Source) -> dict[str, Any] | None:
    """The value of the latest recorded cold run that matches, is the lesson's step and has every
    value, or `None`.

    A row where a value is missing (`speedup_x` is null when call 1 was warm) is passed over, and
    so is a run that is not the step (`left_out`: a twin's, a --quick one); when such a run came
    after the one used, `note` says it was left out and why. A warm run (call 1 already cached) is
    used only when no cold run was recorded, and says so in `note`; when the latest run was warm
    and an earlier cold one is used, `note` says that. `run` says which run was used.
    """
    latest_run = latest_cold = None  # read a row at a time: only these (and the last left out) are kept
    skipped: tuple[dict[str, Any], str] | None = None
    for row in iter_records(source.records):
        if all(row.get(k) == v for k, v in source.where.items()) and all(
            _number(row.get(k)) for k in source.values
        ):
            if why := left_out(row, source):
                skipped = (row, why)
                continue
            latest_run, skipped = row, None
            latest_cold = latest_cold if warm(row) else row
    if latest_run is None:
        return None
    row = latest_cold or latest_run
    notes = [warm_note(row, latest_run), model_note(row)]
    if skipped:
        notes.append(f"Your later run of {_when(skipped[0].get('ts'))} is left out: {skipped[1]}.")
    return {
        "value": " / ".join(f"{row[k]:.{source.decimals}f}" for k in source.values),
        "ts": row.get("ts"),
        "when": _when(row.get("ts")),
        "target": row.get("target"),
        "model": row.get("model"),
        "run": which_run(row, source),
        "file": f"results/{source.records}.jsonl",
        "warm": warm(row),
        "note": " ".join(n for n in notes if n),
    }


def nothing_usable(source: Source) -> str:
    """For a field `measured` leaves empty: why the latest matching run was left out, or ""."""
    latest = None
    for row in iter_records(source.records):
        if all(row.get(k) == v for k, v in source.where.items()) and (why := left_out(row, source)):
            latest = (row, why)
    return f"Your run of {_when(latest[0].get('ts'))} is left out: {latest[1]}." if latest else ""


def which_run(row: dict[str, Any], source: Source) -> str:
    """The run a field was filled from, as the page says it: `the stable-first run of 2026-12-02
    14:05 UTC`, with its twin if it ran on one."""
    kind = " ".join(str(row[k]) for k in ("order", "mode") if isinstance(row.get(k), str))
    twin = f" on the twin from profile {row['profile']}" if row.get("profile") is not None else ""
    return f"the {kind + ' ' if kind else ''}run of {_when(row.get('ts'))}{twin}"


def warm_note(shown: dict[str, Any], latest_run: dict[str, Any]) -> str:
    """What a learner must know about a figure taken from `shown` when the latest run was `latest_run`."""
    if warm(shown):
        return (
            "This run started warm (call 1 was already cached), so call 1 is no cold figure: empty the "
            "server's cache (restart it) and run again."
        )
    if latest_run is not shown:
        return (
            f"From your latest cold run; the run of {_when(latest_run.get('ts'))} started warm (call 1 "
            f"already cached) and is not used."
        )
    return ""


def _when(ts: Any) -> str:
    """`2026-11-30T04:25:00+00:00` as `2026-11-30 04:25 UTC` (the text itself if it is not a time)."""
    try:
        moment = dt.datetime.fromisoformat(str(ts))
        if moment.tzinfo is not None:
            moment = moment.astimezone(dt.timezone.utc)
    except (ValueError, OverflowError):  # not a time, or one at the edge of the calendar
        return str(ts)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def prefills(fields: list[Field]) -> dict[str, dict[str, Any] | None]:
    """Every field of a lesson with what results/ holds for it (`None`: nothing recorded yet)."""
    return {f.key: measured(f.source) if f.source else None for f in fields}


# ── Every recorded run ────────────────────────────────────────────────────────


def recorded_keys() -> list[str]:
    """Every key with records, in lesson order (`02-...` before `06-...`).

    Files the kit did not name (`06-prefix (copy).jsonl`) are left alone: no key reads them.
    """
    folder = results_dir()
    files = folder.glob("*.jsonl") if folder.is_dir() else []
    return sorted(p.stem for p in files if KEY_PATTERN.match(p.stem) and not is_trace(p))


# ── What else results/ holds: traces to replay, and replays (issue 20) ──────


def is_trace(path: Path) -> bool:
    """Whether `path` holds a trace (requests to replay: `felab agent-trace` writes one to
    results/agent-trace.jsonl), not recorded runs: its first line has Mooncake's fields and no
    `target`. Only that line is read."""
    try:
        with path.open("rb") as f:
            first = json.loads(f.readline(MAX_ROW_BYTES) or b"{}")  # one line, and a bounded one
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(first, dict) and "target" not in first and {"hash_ids", "input_length"} <= set(first)


def traces() -> list[Path]:
    """The trace files under results/ (see `is_trace`), by name."""
    folder = results_dir()
    return sorted(p for p in folder.glob("*.jsonl") if is_trace(p)) if folder.is_dir() else []


LESSON_KEY = re.compile(r"^\d{2}-")
"""A lesson's records (`06-prefix`); other keys (`replay`) are tools' records, told in one line."""


RECORDED_BY = {"calibrate-check": "calibrate --check"}
"""The command that records a key whose name is not its command's (`felab calibrate-check` is none)."""


def not_lesson_lines(found: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line for each recorded key that is no lesson's and for each trace: what it is, and
    the command that shows it (these rows have their own, wide, tables)."""
    here = learner_folder()
    lines = []
    for key in (k for k in found if not LESSON_KEY.match(k)):
        runs = sum(1 for _ in iter_records(key))  # a row at a time: any file size
        lines.append(
            f"{os.path.relpath(results_dir() / f'{key}.jsonl', here)}: {runs} row{'s' if runs != 1 else ''} "
            f"recorded by `felab {RECORDED_BY.get(key, key)}`, not a lesson's numbers (`python -m felab "
            f"numbers --csv` lists them with every column)"
        )
    for path in traces():
        lines.append(
            f"{os.path.relpath(path, here)}: a trace to replay, not recorded runs "
            f"(`python -m felab replay {os.path.relpath(path, here)} --replicas 18 --route random,affinity`)"
        )
    return lines


def _groups(
    rows: Iterable[dict[str, Any]],
) -> tuple[dict[tuple, dict[str, Any]], dict[tuple, dict[str, Any]]]:
    """One pass over `rows` (a file read a line at a time): per (target, order), the row shown
    (its last cold one; its last one if all are warm) and its latest run. Only these are kept."""
    shown: dict[tuple, dict[str, Any]] = {}
    last: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        group = tuple(row.get(k) for k in GROUP_BY)
        last[group] = row
        if not warm(row) or group not in shown or warm(shown[group]):
            shown[group] = row
    return shown, last


def latest(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last cold row of each (target, twin, fleet, order), in the order they were first seen; a group
    that only has warm runs (call 1 already cached) shows its last one."""
    return list(_groups(rows)[0].values())


def warm_lines(rows: Iterable[dict[str, Any]]) -> list[str]:
    """A note for each (target, order) whose shown row is warm, or whose latest run was."""
    shown, last = _groups(rows)
    notes = []
    for group, row in shown.items():
        said = " ".join(n for n in (warm_note(row, last[group]), model_note(row)) if n)
        if said:
            notes.append(f"note ({' '.join(str(g) for g in group if g is not None)}): {said}")
    return notes


LAST = ("model", "ts")
"""Columns shown last: what was measured matters more than when."""


def scalars(row: dict[str, Any]) -> dict[str, Any]:
    """The row without per-call lists, floats to 2 decimals, `model` and `ts` last: what a person copies."""
    kept = {k: _shown(v) for k, v in row.items() if not isinstance(v, (list, dict))}
    return {**{k: v for k, v in kept.items() if k not in LAST}, **{k: kept[k] for k in LAST if k in kept}}


def server_of(row: dict[str, Any]) -> str:
    """The server a row measured, for people: its target, the twin's profile if it ran on one, and
    the fleet if it went through one (`mock, twin lesson-mac`; `mock via sglang-router
    cache_aware, 4 workers`)."""
    twin, fleet = row.get("profile"), row.get("fleet")
    said = f"{row.get('target')}, twin {twin}" if twin is not None else str(row.get("target"))
    return f"{said} via {fleet}" if fleet is not None else said


def for_people(row: dict[str, Any]) -> dict[str, Any]:
    """`scalars(row)` with the twin and the fleet in its target column, so their rows read as their own."""
    shown = scalars(row)
    for name in ("profile", "profile_engine", "fleet"):
        shown.pop(name, None)
    return {**shown, "target": server_of(row)}


def _shown(value: Any) -> Any:
    """A float to 2 decimals; NaN and infinity (a damaged file) as no value, as JSON has none."""
    if isinstance(value, float):
        return round(value, 2) if math.isfinite(value) else None
    return value


def collect() -> dict[str, list[dict[str, Any]]]:
    """Latest cold rows of every recorded key (see `latest`)."""
    return {key: latest(iter_records(key)) for key in recorded_keys()}


def as_csv(found: dict[str, list[dict[str, Any]]]) -> str:
    """One CSV table: key, then every scalar column any row has."""
    rows = [{"key": key, **scalars(r)} for key, rs in found.items() for r in rs]
    columns: list[str] = []
    for r in rows:
        columns += [c for c in r if c not in columns]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def as_json(found: dict[str, list[dict[str, Any]]]) -> str:
    return json.dumps({key: [scalars(r) for r in rs] for key, rs in found.items()}, indent=2)


def as_text(found: dict[str, list[dict[str, Any]]]) -> str:
    """A table per key (latest cold run per target, twin, fleet and order), then each lesson's numbers
    to write down."""
    parts = []
    for key, rows in ((k, rs) for k, rs in found.items() if LESSON_KEY.match(k)):
        lesson = key.split("-", 1)[0]
        parts.append(f"lesson {lesson} · {key} (latest cold run per target, twin, fleet and order)\n")
        parts.append(table([for_people(r) for r in rows]))
        parts += [*warm_lines(iter_records(key)), ""]
    for lesson, fields in declared().items():
        parts.append(f"lesson {lesson}: your numbers, for the wrap-up\n")
        for n, (f, m) in enumerate(zip(fields, prefills(fields).values(), strict=True), start=1):
            said = f"{m['value']}   (from {m['run']} on {m['target']})" if m else "not recorded yet"
            parts.append(f"  {n}. {f.label}: {said}")
            note = m["note"] if m else nothing_usable(f.source) if f.source else ""
            if note:
                parts.append(f"     {note}")
        parts.append("")
    if others := not_lesson_lines(found):
        parts += ["also under results/:", *(f"  {line}" for line in others), ""]
    return "\n".join(parts)


def plot_ttft(key: str, rows: list[dict[str, Any]]) -> Path | None:
    """Draw each call's TTFT (one panel per target, a line per order); `None` if no calls recorded."""

    def per_call(row: dict[str, Any]) -> bool:
        calls = row.get("calls")
        if not isinstance(calls, list) or not calls:
            return False
        return all(isinstance(c, dict) and _number(c.get("ttft_ms")) and c["ttft_ms"] > 0 for c in calls)

    with_calls = [r for r in rows if per_call(r)]
    if not with_calls:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt

    targets = list(dict.fromkeys(server_of(r) for r in with_calls))  # a twin has its own panel
    fig, axes = plt.subplots(1, len(targets), figsize=(5 * len(targets), 3.6), squeeze=False)
    for ax, target in zip(axes[0], targets, strict=True):
        for r in (r for r in with_calls if server_of(r) == target):
            ttft = [c["ttft_ms"] for c in r["calls"]]
            ax.plot(range(1, len(ttft) + 1), ttft, marker="o", label=r.get("order", "run"))
        ax.set_yscale("log")
        ax.set_title(f"{target}")
        ax.set_xlabel("call")
        ax.set_ylabel("time to first token (ms, log scale)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"{key}: each call's time to first token")
    fig.tight_layout()
    path = results_dir() / f"{key}-ttft.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
