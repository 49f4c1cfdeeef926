"""Recording results: one JSON line per run, appended to `results/<key>.jsonl`.

A line is written whole, with one `write()` on a file opened for appending,
and flushed to disk before `record()` returns. An interrupted run therefore
keeps every row it recorded, and a half-written line never appears.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from pathlib import Path
from typing import Any

from felab.paths import results_dir

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

RECORDED: list[Path] = []
"""The file of every row this process recorded, in order: what a stopped run can truthfully report."""


def results_path(key: str) -> Path:
    """The file that holds the records of `key` (for example `06-prefix`)."""
    if not _KEY.match(key):
        raise ValueError(f"record key {key!r} must be letters, digits, '.', '_' or '-'")
    return results_dir() / f"{key}.jsonl"


def record(key: str, row: dict[str, Any]) -> Path:
    """Append `row` (which must name its `target` and `model`) with a UTC timestamp."""
    missing = [k for k in ("target", "model") if k not in row]
    if missing:
        raise ValueError(f"a recorded row needs {', '.join(missing)}")
    path = results_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = {"ts": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **row}
    data = (json.dumps(line, ensure_ascii=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    RECORDED.append(path)
    return path


def read_records(key: str) -> list[dict[str, Any]]:
    """Every row recorded under `key`, oldest first; a damaged line is skipped."""
    path = results_path(key)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
