"""Recording results: one JSON line per run, appended to `results/<key>.jsonl`.

How a row is written, and what survives a kill:

    record() opens the file with O_APPEND, takes an exclusive lock on it (flock), ends the
    file cleanly (below), writes the whole line with ONE os.write() call, fsyncs, and closes
    (which drops the lock). O_APPEND makes the kernel put each write at the end of the file
    as it is then, so two runs recording at once never write over each other; the lock
    keeps one run's repair from cutting another run's line while it is being written.

    One write() is not all-or-nothing, though. On Linux a write to a local file copies a page
    (or a larger folio) at a time and checks before each for a fatal signal (mm/filemap.c,
    generic_perform_write): SIGKILL (or the OOM killer) during the write of a row longer than
    that leaves its first part in the file. Measured here (ext4, Linux 6.18): 10 kills of 10
    landed inside a 200 MB write and left part of it; a row of a few KB is copied in
    microseconds, so a kill inside it is rare, but nothing promises it cannot happen. A full
    disk also cuts a write short, and a power cut can leave a line whose end never reached
    the disk. So a line that does not end with a newline is a write that did not finish, and
    both sides treat it so:

        reading      only lines that end with "\n" are rows: an unfinished last line is
                     passed over, silently (it may be a write in progress right now)
        record()     first ends the file cleanly, under the lock: an unfinished last line
                     that holds a whole row (a file edited by hand without its last newline)
                     gets its newline; anything else is cut off (ftruncate). A write cut
                     short by a full disk is cut off at once, and the run told so.

    So no reader ever sees a torn line, and none stays in the file past the next record().
    The limits: flock and O_APPEND behave so on a local filesystem (ext4, APFS...); on a
    network filesystem (NFS, SMB) neither is promised. An unfinished last line the next
    record() cuts off is lost: it was never a whole row.

A row is flushed to disk (fsync) before `record()` returns, so an interrupted run keeps
every row it recorded. No key is ever written: every string in the row goes through
`redact()` first. A folder that cannot be written (permissions, a full disk, a path that is
a file) stops the run with `NotRecorded` (exit 2), whose message holds the row as one JSON
line, so nothing is lost.

Reading is forgiving, and says so. A file can still be damaged (a line edited by hand, a
copy from another machine): `iter_records()` reads a line at a time (memory bounded by one
row, at most MAX_ROW_BYTES), keeps every good line and skips each bad one, naming it on
stderr once per run (`results/06-prefix.jsonl:7: skipped, not JSON ...`). A row is good when
it is a JSON object whose fields the kit groups by are strings: `target` (always there), and
`model`, `order`, `ts` when present (`model` and `order` may be null).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from felab import this_run
from felab.errors import FelabError
from felab.paths import results_dir
from felab.redact import redact_all

KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
"""A record key: letters, digits, '.', '_' or '-' (it names a file under results/)."""

MAX_ROW_BYTES = 64 * 2**20
"""A line longer than this is skipped unread (named on stderr): a lesson's row is a few KB."""


class NotRecorded(FelabError):
    """A row that could not be written; its message holds the row, so nothing is lost."""


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
    line = redact_all({"ts": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **row})
    data = (json.dumps(line, ensure_ascii=False) + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as exc:
        raise not_recorded(path, exc, data) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by close()
        end = end_cleanly(fd)
        written = os.write(fd, data)  # the whole line in one call (see the module's docstring)
        if written < len(data):  # a full disk takes part of it: take that part back
            os.ftruncate(fd, end)
            raise OSError(28, f"only {written:,} of the row's {len(data):,} bytes could be written")
        os.fsync(fd)
    except OSError as exc:
        raise not_recorded(path, exc, data) from None
    finally:
        os.close(fd)
    this_run.RECORDED.append(path)
    return path


def end_cleanly(fd: int) -> int:
    """Make the file end with a whole line, and return its size: an unfinished last line (a
    write cut short) is cut off, or given its newline if it holds a whole row."""
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return size
    start = size
    while start > 0:  # back to the last newline, a block at a time
        block = os.pread(fd, min(start, 1 << 16), max(0, start - (1 << 16)))
        cut = block.rfind(b"\n")
        if cut >= 0:
            start -= len(block) - cut - 1
            break
        start -= len(block)
    if size - start <= MAX_ROW_BYTES and parse_row(os.pread(fd, size - start, start))[0] is not None:
        os.write(fd, b"\n")  # a whole row without its newline: keep it
        return size + 1
    os.ftruncate(fd, start)
    return start


def not_recorded(path: Path, exc: OSError, data: bytes) -> NotRecorded:
    """The message for a row that could not be written: why, what to do, and the row itself."""
    folder = path.parent
    return NotRecorded(
        f"could not record this run's row in {path} ({exc.strerror or exc}). Nothing is lost: the "
        f"row is the JSON line below. Make {folder} a folder you can write to (or set "
        f"FELAB_RESULTS_DIR to one, in .env or the shell), run again, or append the line to "
        f"{path.name} there yourself. `df -h` shows whether the disk is full.\n" + data.decode().rstrip("\n")
    )


TEXT_FIELDS = {"target": False, "model": True, "order": True, "ts": False}
"""Fields read as text (grouped by, compared, shown): each must be a string; True: null allowed too."""

_told: set[tuple[str, int]] = set()
"""Bad lines already named in this run (each is named once, however often it is read)."""


def read_records(key: str) -> list[dict[str, Any]]:
    """Every good row recorded under `key`, oldest first (see `iter_records`)."""
    return list(iter_records(key))


def iter_records(key: str) -> Iterator[dict[str, Any]]:
    """Every good row recorded under `key`, oldest first, read a line at a time: each bad line
    is skipped and named on stderr; an unfinished last line (no newline yet) is passed over."""
    path = results_path(key)
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return
    except OSError as exc:
        _skip(path, 0, f"could not be read ({exc.strerror or exc})")
        return
    with f:
        for number, raw in _lines(f):
            if raw is None:
                _skip(path, number, f"longer than {MAX_ROW_BYTES:,} bytes, more than any row")
                continue
            if not raw.strip():
                continue
            row, why = parse_row(raw)
            if row is None:
                _skip(path, number, why)
            else:
                yield row


def _lines(f: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(number, line) for each line that ends with a newline, without it; None for a line
    longer than MAX_ROW_BYTES (read past, never held whole)."""
    number = 0
    while raw := f.readline(MAX_ROW_BYTES + 1):
        number += 1
        if raw.endswith(b"\n"):
            yield number, raw[:-1]
            continue
        if len(raw) <= MAX_ROW_BYTES:
            return  # the last line, unfinished: a write in progress, or cut short
        while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
            pass  # the rest of a line too long to be a row
        if rest:
            yield number, None


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
