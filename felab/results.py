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

Each row says which server it measured, as that server reports it. `resolve()` (connect.py)
asks a local server's `GET /v1/models` and `note_served()` keeps the answer, per target, for
this run; `record()` then writes, in every row of that target:

    model          the model the server reports (llama.cpp serves its file whatever name was
                   asked: `--model llama-3.1-8b` is recorded as the model it runs)
    model_asked    the name the run asked for, only when the server reported another
    profile        a practice server started with `--profile`: the twin's profile name
    profile_engine ... and the engine that profile was measured on

    during         `calibrate` when a calibration was sending to the same server while this
                   run did (its requests share the server's seats and cache: a variable-first
                   run measured 2.5 where 1.0 is expected), so the page leaves the run out
    fleet          a run sent to a fleet's URL (`make fleet`): the fleet that served it, as
                   `sglang-router cache_aware, 4 workers` or `the kit's fleet
                   sglang-cache-aware, 4 replicas`; `profile` and `profile_engine` too when its
                   workers are twins (a router lists the model without the twin's card)

so a twin's rows are never taken for the plain practice server's (course/numbers.py groups
by `profile`), nor a fleet's (it groups by `fleet` too), and a run against another model than
asked is seen as one. A fleet is known by the state file it writes while it runs
(`results/fleet.json`, felab/fleet/processes.py): its URL on the run's port of this machine,
and its watching process still the one that wrote it (a fleet killed without its `fleet-stop`
leaves a file that names no fleet). `busy()` is how
calibrate says it is sending: a small file under `results/.busy/` while it runs, named by its
process id, so a calibration that was killed leaves a file no live process owns, and it is
passed over. A lesson script marks its run there too (`mark_lesson_run`), and its mark stays
after it with the time it ended: two lesson runs on one server whose times overlapped both say
so, whichever ended first (`overlapped`).

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
`model`, `order`, `ts`, `profile`, `fleet` when present (`model`, `order`, `profile` and
`fleet` may be null).
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import fcntl
import json
import math
import os
import re
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from felab import this_run
from felab.errors import FelabError
from felab.fleet.processes import is_ours, read_state, recorded
from felab.paths import KIT_ROOT, results_dir
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


SERVED: dict[str, tuple[str, str, dict[str, Any]]] = {}
"""Per target name: the model this run asked for, its server's address, and what it reported
(`note_served`)."""


def busy_dir() -> Path:
    return results_dir() / ".busy"


@contextlib.contextmanager
def busy(what: str, base_url: str) -> Iterator[None]:
    """While the block runs, `what` (calibrate) is sending to the server at `base_url`: a lesson
    run recorded against the same server meanwhile says so (`during`). Best effort: a folder
    that cannot be written marks nothing."""
    path = busy_dir() / f"{os.getpid()}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"what": what, "base_url": base_url}), encoding="utf-8")
    except OSError:
        pass
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


RUN_MARK: dict[str, float] = {}
"""When this process's lesson run began (`mark_lesson_run`), once its mark is made."""
MARK_KEPT_S = 86_400.0
"""How long an ended run's mark is kept (a run that began before it ended must still see it)."""


def mark_lesson_run(base_url: str) -> None:
    """A lesson script sends to `base_url` from now until it exits: its mark under
    `results/.busy/` says so, and stays after it with the time it ended. So two lesson runs on one
    server at once both say so (`during`), whichever ended first: each timed the other's requests
    too (`--order variable-first` started half a second after the opening-first run read speedup
    1.0, and both were offered as clean cold runs). Only a script of lessons/ marks (`make check`
    asks a server what it serves, and times nothing); a killed run's mark names no live process
    and no end, and is passed over."""
    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    if RUN_MARK or script is None or not script.is_relative_to(KIT_ROOT / "lessons"):
        return
    path, began = busy_dir() / f"run-{os.getpid()}.json", time.time()
    mark = {
        "what": f"another lesson run ({script.name})",
        "base_url": base_url,
        "pid": os.getpid(),
        "from": began,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for old, seen in marks("run-*.json"):  # ended long ago: no run still going began before
            if isinstance(ended := seen.get("to"), float) and ended < began - MARK_KEPT_S:
                with contextlib.suppress(OSError):  # (one that cannot go stays: the run still marks)
                    old.unlink()
        path.write_text(json.dumps(mark), encoding="utf-8")
    except OSError:
        return
    RUN_MARK["began"] = began
    atexit.register(end_mark, path, mark)


def end_mark(path: Path, mark: dict[str, Any]) -> None:
    """At exit: the run's mark keeps the time it ended (a folder gone or full by then: left as it is,
    a mark whose process no longer runs, passed over)."""
    with contextlib.suppress(OSError):
        path.write_text(json.dumps({**mark, "to": time.time()}), encoding="utf-8")


def marks(pattern: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """The marks under `results/.busy/` whose file names match `pattern`, each read (one that
    cannot be read, or is not a JSON object, is passed over)."""
    folder = busy_dir()
    for path in sorted(folder.glob(pattern)) if folder.is_dir() else []:
        try:
            mark = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(mark, dict):
            yield path, mark


def overlapped(base_url: str) -> str | None:
    """Another lesson run on the server at `base_url` that this one's time overlapped: one going
    now, or one that ended after this one began (its mark: `mark_lesson_run`), or None."""
    began: float = RUN_MARK.get("began", math.inf)
    for _, mark in marks("run-*.json") if began < math.inf else ():
        if mark.get("pid") == os.getpid() or mark.get("base_url") != base_url:
            continue
        pid, ended = mark.get("pid"), mark.get("to")
        going = ended is None and isinstance(pid, int) and alive(pid)
        if (going or (isinstance(ended, float) and ended > began)) and isinstance(mark.get("what"), str):
            return mark["what"]
    return None


def busy_with(base_url: str) -> str | None:
    """What another live process is sending to the server at `base_url` now (`busy`), or None."""
    for path, mark in marks("[0-9]*.json"):  # (calibrate's, named by its process id)
        pid = int(path.stem) if path.stem.isdigit() else 0
        if pid == os.getpid() or not alive(pid):
            continue
        if mark.get("base_url") == base_url and isinstance(mark.get("what"), str):
            return mark["what"]
    return None


def alive(pid: int) -> bool:
    """Whether a process with this id runs (signal 0 checks without sending anything)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True


def note_served(target: str, base_url: str, asked: str, models: list[dict[str, Any]] | None) -> None:
    """Keep what `target`'s server listed at GET /v1/models (None: it did not say) for the rows
    this run records for it: the model it reports, and the twin's profile if it is one; whether
    a calibration is sending to it as the run starts (`busy_with`); and the fleet it is, if its
    address is a running fleet's (`fleet_fields`)."""
    mark_lesson_run(base_url)
    during = busy_with(base_url) or overlapped(base_url)
    if models is None:
        said = {"during": during} if during else {}
        SERVED[target] = (asked, base_url, {**said, **fleet_fields(base_url, said)})
        return
    ids = [m.get("id") for m in models if isinstance(m.get("id"), str)]
    card = next((m for m in models if m.get("id") == asked), models[0] if len(models) == 1 else None)
    fields: dict[str, Any] = {}
    if asked not in ids and len(ids) == 1:  # llama.cpp answers as its one model, whatever was asked
        fields = {"model": ids[0], "model_asked": asked}
    elif asked not in ids and ids:
        fields = {"model_asked": asked, "model_listed": False}  # none of several: not what it serves
    twin = card.get("felab_twin") if card else None  # felab/mock_server/twin.py
    if isinstance(twin, dict) and isinstance(twin.get("name"), str):
        fields["profile"] = twin["name"]
        fields["profile_engine"] = twin.get("engine") if isinstance(twin.get("engine"), str) else None
    if during:
        fields["during"] = during
    SERVED[target] = (asked, base_url, {**fields, **fleet_fields(base_url, fields)})


def fleet_fields(base_url: str, fields: dict[str, Any]) -> dict[str, Any]:
    """`fleet` (and the twin its workers are, unless the server said already) when `base_url` is
    the URL of the fleet running from this kit folder; nothing otherwise."""
    state = fleet_at(base_url)
    if state is None:
        return {}
    found: dict[str, Any] = {"fleet": fleet_named(state)}
    twin = state.get("twin")
    if "profile" not in fields and isinstance(twin, dict) and isinstance(twin.get("name"), str):
        found["profile"] = twin["name"]
        found["profile_engine"] = twin.get("engine") if isinstance(twin.get("engine"), str) else None
    return found


def fleet_at(base_url: str) -> dict[str, Any] | None:
    """The state of the fleet that serves `base_url` now (`make fleet`'s `results/fleet.json`), or
    None: no fleet runs, it serves another port, or its file outlived it."""
    state = read_state()
    if state is None or not isinstance(state.get("url"), str) or not same_server(state["url"], base_url):
        return None
    watcher = next((p for p in recorded(state) if p.role == "fleet"), None)
    return state if watcher is not None and is_ours(watcher) else None


LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}


def same_server(url: str, other: str) -> bool:
    """Whether two addresses reach one server: the same port on the same host, every name of
    this machine's loopback alike (`http://localhost:8780/v1` is `http://127.0.0.1:8780/v1`)."""

    def where(address: str) -> tuple[str | None, int | None]:
        try:
            parts = urllib.parse.urlsplit(address)
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        except ValueError:  # a port that is no number
            return None, None
        host = "loopback" if parts.hostname in LOOPBACK_NAMES else parts.hostname
        return host, port

    return where(url)[0] is not None and where(url) == where(other)


def fleet_named(state: dict[str, Any]) -> str:
    """The fleet as a row names it: what it wrote (`fleet`), or for a state file without it
    (written by an older kit) its router and the count of its workers."""
    if isinstance(state.get("fleet"), str):
        return state["fleet"]
    workers = sum(1 for p in state.get("processes", []) if isinstance(p, dict) and p.get("role") != "fleet")
    return f"{state.get('router')} router, {workers} processes"


def served_fields(row: dict[str, Any]) -> dict[str, Any]:
    """What the row's server reported (see `note_served`), for a row that names the model asked;
    `during` if a calibration sent to it as the run started or sends now, as it is recorded."""
    if row["target"] not in SERVED:
        return {}
    asked, base_url, fields = SERVED[row["target"]]
    if row.get("model") != asked:
        return {}
    during = fields.get("during") or busy_with(base_url) or overlapped(base_url)
    return {**fields, **({"during": during} if during else {})}


def record(key: str, row: dict[str, Any]) -> Path:
    """Append `row` (which must name its `target` and `model`) with a UTC timestamp, and what its
    server reported it serves (the module's docstring)."""
    missing = [k for k in ("target", "model") if k not in row]
    if missing:
        raise ValueError(f"a recorded row needs {', '.join(missing)}")
    path = results_path(key)
    row = {**row, **served_fields(row)}
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


TEXT_FIELDS = {"target": False, "model": True, "order": True, "ts": False, "profile": True, "fleet": True}
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
