"""Recording results: one JSON line per run, appended to `results/<key>.jsonl`.

A line is written whole, with one `write()` on a file opened for appending,
and flushed to disk before `record()` returns. An interrupted run therefore
keeps every row it recorded, and a half-written line never appears. No key is
ever written: every string in the row goes through `redact()` first.

Reading is forgiving, and says so. A file can still be damaged (a disk that
filled up, a line edited by hand, a copy from another machine): `read_records()`
keeps every good line and skips each bad one, naming it on stderr once per run
(`results/06-prefix.jsonl:7: skipped, not JSON ...`). A row is good when it is a
JSON object whose fields the kit groups by are strings: `target` (always there),
and `model`, `order`, `ts` when present (`model` and `order` may be null).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from felab.paths import results_dir
from felab.redact import redact_all

KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""A record key: letters, digits, '.', '_' or '-' (it names a file under results/)."""

RECORDED: list[Path] = []
"""The file of every row this process recorded, in order: what a stopped run can truthfully report."""


def results_path(key: str) -> Path:
    """The file that holds the records of `key` (for example `06-prefix`)."""
    if not KEY_PATTERN.match(key):
        raise ValueError(f"record key {key!r} must be letters, digits, '.', '_' or '-'")
    return results_dir() / f"{key}.jsonl"


def record(key: str, row: dict[str, Any]) -> Path:
    """Append `row` (which must name its `target` and `model`) with a UTC timestamp."""
    missing = [k for k in ("target", "model") if k not in row]
    if missing:
        raise ValueError(f"a recorded row needs {', '.join(missing)}")
    path = results_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = redact_all({"ts": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **row})
    data = (json.dumps(line, ensure_ascii=False) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # the last line was cut short (a full disk, a kill): start a new one
        while data:  # a write may take only part of it
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    RECORDED.append(path)
    return path


TEXT_FIELDS = {"target": False, "model": True, "order": True, "ts": False}
"""Fields read as text (grouped by, compared, shown): each must be a string; True: null allowed too."""

_told: set[tuple[str, int]] = set()
"""Bad lines already named in this run (each is named once, however often it is read)."""


def read_records(key: str) -> list[dict[str, Any]]:
    """Every good row recorded under `key`, oldest first; each bad line is skipped and named on stderr."""
    path = results_path(key)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        _skip(path, 0, f"could not be read ({exc.strerror or exc})")
        return []
    rows = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        row, why = parse_row(raw)
        if row is None:
            _skip(path, number, why)
        else:
            rows.append(row)
    return rows


def parse_row(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """One line as a row, or None and why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "its bytes are not UTF-8 text"
    try:
        row = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; so is a 5,000-digit number
        return None, "not JSON (a line cut short, or edited by hand)"
    if not isinstance(row, dict):
        return None, f"JSON, but {type(row).__name__} where a row (an object) belongs"
    if "target" not in row:
        return None, "a row without its `target`"
    for name, nullable in TEXT_FIELDS.items():
        value = row.get(name)
        if name in row and not isinstance(value, str) and not (nullable and value is None):
            return None, f"`{name}` is {type(value).__name__}, not a string"
    return row, ""


def _skip(path: Path, number: int, why: str) -> None:
    if (str(path), number) in _told:
        return
    _told.add((str(path), number))
    where = f"{path}:{number}" if number else str(path)
    print(f"warning: {where}: skipped, {why}; the other lines are kept.", file=sys.stderr)
