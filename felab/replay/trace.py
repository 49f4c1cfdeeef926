"""Reading a trace: Mooncake's format, one request a line, checked as it streams by.

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ..., 2354]}

- `timestamp`: when the request arrived, in milliseconds from the start (never going back);
- `input_length`, `output_length`: the prompt and the reply, in tokens;
- `hash_ids`: one id per block of the prompt (512 tokens in Mooncake's traces), in order; the
  last block may be partial. Mooncake's ids are *remapped block hashes* (FAST25-release/README.md
  in kvcache-ai/Mooncake): each id stands for its block together with everything before it, as a
  vLLM block hash does, so two prompts share a prefix exactly as far as their leading ids agree.
  (In the conversation trace every id always follows the same id at the same position: 0 of
  288,500 blocks say otherwise.)
- optional: `session_id` (the kit's own traces), sent as the session value for `--route affinity`.

The file is read in chunks (plain, `.xz` or `.gz`), so a trace of any length costs no more
memory than a chunk and one line (at most LINE_LIMIT_BYTES). A bad line stops the replay with
one message that names the line: not JSON, nested too deeply, numbers too long, a field missing
or out of range.
The block size is not written in the format; `block_tokens()` works it out from the first lines.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import lzma
import math
import os
import sys
import time
import zlib
from array import array
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from felab.errors import FelabError
from felab.paths import KIT_ROOT, from_here, learner_folder, make_target, results_dir

MOONCAKE = KIT_ROOT / "data" / "traces" / "mooncake-conversation.jsonl.xz"
"""The trace the kit ships: one hour of a chat service (Mooncake, Apache-2.0; data/traces/README.md)."""

INFER_LINES = 1000
"""How many leading lines `block_tokens()` reads to work out the block size."""

LINE_LIMIT_BYTES = 1 << 20
"""The longest line a trace may have (1 MiB): 100,000 six-digit block ids take about 800 KB.
A longer line stops the replay with a message, so a damaged file cannot fill the memory."""

CHUNK_BYTES = 1 << 20
"""The file is read (and decompressed) this many bytes at a time."""

MAX_TOKENS = 10**9
"""More prompt or reply tokens than any model reads: a larger length is a damaged line."""

MAX_TIMESTAMP_MS = 2**53
"""Timestamps must be exact as floats (285,000 years of milliseconds)."""

BLANK = frozenset(b" \t\n\r\x0b\x0c")
"""The bytes `bytes.strip()` takes for white space."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One line of a trace, in seconds and tokens."""

    line: int
    """Its line in the file (blank lines count)."""
    before: int
    """How many requests come before it (`--limit before` replays them)."""
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: array[int]
    """Its block ids, 8 bytes each (`array('q')`), not a Python int object each."""
    session: str | None = None


def shown(path: Path) -> str:
    """A path as a learner would type it from the folder they are in."""
    return os.path.relpath(path, learner_folder())


def must_exist(path: Path) -> Path:
    """The path, if a file is there; else the message that says where traces come from."""
    if not path.is_file():
        raise FelabError(
            f"There is no trace at {path} (paths are taken from the folder you are in). Pass the path "
            f"of a JSON-lines trace in Mooncake's format: the kit ships one, "
            f"`{from_here('make replay')} TRACE={shown(MOONCAKE)}`, and "
            f"`{from_here('.venv/bin/python -m felab agent-trace')}` writes one to "
            f"{shown(results_dir() / 'agent-trace.jsonl')}."
        )
    return path


def open_binary(path: Path, data: bytes | None = None) -> tuple[io.BufferedIOBase, BinaryIO, int]:
    """The trace's bytes, decompressed on the fly if it ends in .xz or .gz; the raw (compressed)
    stream under it, whose position says how far the reading is; and the raw size.

    `data`: the file's bytes as stored, already in memory (a Dask worker gets them once, by
    scatter); `path` still names the trace in messages and picks the decompressor.
    """
    if data is None:
        must_exist(path)
    raw = io.BytesIO(data) if data is not None else path.open("rb")
    size = len(data) if data is not None else path.stat().st_size
    if path.suffix == ".xz":
        return lzma.LZMAFile(raw), raw, size
    if path.suffix == ".gz":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw, size
    return raw, raw, size


class Progress:
    """A line on stderr every few seconds while a long read goes on (how far, in the file as stored)."""

    EVERY_S = 2.0

    def __init__(self, path: Path, raw: BinaryIO, size: int, show: bool) -> None:
        self.path, self.raw, self.size, self.show = path, raw, size, show
        self.next_at = time.monotonic() + self.EVERY_S

    def chunk(self, line: int) -> None:
        if not self.show or time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + self.EVERY_S
        done = self.raw.tell() / self.size if self.size else 1.0
        stored = "compressed, " if self.path.suffix in (".xz", ".gz") else ""
        print(
            f"  reading {self.path.name}: {done:.0%} of its {self.size / 1e6:,.1f} MB ({stored}"
            f"line {line:,}) ...",
            file=sys.stderr,
            flush=True,
        )


def lines(path: Path, f: io.BufferedIOBase, progress: Progress) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every line that is not blank, read in 1 MiB chunks.

    Blank lines are counted (messages name lines as an editor numbers them) but never
    looked at one by one: between two lines with text, the next byte that is not white
    space is found by `next_text` and the line ends before it are counted, both in C. So
    memory is a chunk plus one line, and a file of empty lines reads about as fast as it
    decompresses.
    A line longer than LINE_LIMIT_BYTES stops the reading, whatever it holds.
    """
    number, buf = 0, b""
    while True:
        chunk = f.read(CHUNK_BYTES)
        buf, pos, eof = (buf + chunk if buf else chunk), 0, not chunk
        while (at := next_text(buf, pos)) >= 0:
            if (before := buf.rfind(b"\n", pos, at)) >= 0:  # blank lines, then this one
                number += buf.count(b"\n", pos, before + 1)
                pos = before + 1
            end = buf.find(b"\n", at)
            if end < 0 and not eof:
                break  # this line goes on in the next chunk
            end = len(buf) if end < 0 else end
            if end - pos > LINE_LIMIT_BYTES:
                raise too_long(path, number + 1)
            number += 1
            yield number, buf[pos:end]
            pos = end + 1
        else:  # the rest of the chunk is blank: count its line ends, keep the unfinished line
            if (last := buf.rfind(b"\n", pos)) >= 0:
                number += buf.count(b"\n", pos, last + 1)
                pos = last + 1
        buf = buf[pos:]
        if len(buf) > LINE_LIMIT_BYTES:
            raise too_long(path, number + 1)
        progress.chunk(number)
        if eof:
            return


def next_text(buf: bytes, pos: int) -> int:
    """Where the first byte that is not white space is, at `pos` or after it (-1: none).

    A line of text usually starts right there. Otherwise a run of blanks is skipped with
    `bytes.lstrip` (C) over windows that double, 256 bytes to 1 MiB: a short run costs
    little, a long one about a copy of it (a regular expression tried at every byte was
    six times slower than decompressing).
    """
    if pos < len(buf) and buf[pos] not in BLANK:
        return pos
    window = 256
    while pos < len(buf):
        piece = buf[pos : pos + window]
        if rest := len(piece.lstrip()):
            return pos + len(piece) - rest
        pos, window = pos + len(piece), min(2 * window, CHUNK_BYTES)
    return -1


def too_long(path: Path, line: int) -> FelabError:
    return FelabError(
        f"{path} line {line:,} is longer than {LINE_LIMIT_BYTES:,} bytes, the most a trace line may be "
        f"(a request with 100,000 six-digit block ids is about 800 KB): this is not a trace, or the "
        f"line is damaged. Check the file (`head -c 300 {shown(path)}`)."
    )


def limit_advice(path: Path, before: int) -> str:
    """How to replay the requests before a bad line, in the command the learner typed: a flag for
    `python -m felab replay`, an ARGS word for `make replay`."""
    requests = f"{before:,} request{'s' if before > 1 else ''}"
    if make_target() == "replay":  # flags go in ARGS
        command = f'{from_here("make replay")} TRACE={shown(path)} ARGS="--limit {before}"'
        return (
            f"To replay the {requests} before it, add --limit {before} to ARGS: `{command}` "
            f"(with your other ARGS)."
        )
    return f"To replay the {requests} before it, add `--limit {before}`."


def bad_line(path: Path, line: int, what: str, before: int) -> FelabError:
    """One bad line: say which, what is wrong, and how to replay the requests before it."""
    advice = limit_advice(path, before) if before else "Fix that line and run again."
    return FelabError(f"{path} line {line}: {what}. {advice}")


def load(text: bytes) -> Any:
    """One line's JSON; ValueError with what is wrong, in a few words."""
    try:
        return json.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to be a trace line") from None
    except ValueError:  # Python refuses integers of more than 4,300 digits (sys.int_info)
        raise ValueError("a number with too many digits to be a trace's") from None


FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
"""What every line of a Mooncake trace holds (session_id is optional)."""


def _fields(obj: Any, bad: Callable[[str], FelabError]) -> tuple[Any, Any, Any, Any]:
    """The four fields Mooncake's format requires of a line's object (not yet checked)."""
    if not isinstance(obj, dict):
        raise bad("not a JSON object")
    for name in FIELDS:
        if name not in obj:
            raise bad(f"the field `{name}` is missing")
    return obj["timestamp"], obj["input_length"], obj["output_length"], obj["hash_ids"]


def _has_bool(text: bytes, ids: list) -> bool:
    """Whether `ids` holds a true or a false (Python's ints too, so array() takes them): looked for
    only on a line whose text has one (a replay reads 300,000 ids)."""
    return (b"true" in text or b"false" in text) and any(type(i) is bool for i in ids)


def parse(path: Path, line: int, text: bytes, after_s: float, before: int) -> TraceRequest:
    """One line, checked: the fields Mooncake's format requires, with sane values."""

    def bad(what: str) -> FelabError:
        return bad_line(path, line, what, before)

    try:
        obj: Any = load(text)
    except ValueError as exc:
        raise bad(str(exc)) from None
    ts, n_in, n_out, ids = _fields(obj, bad)
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not 0 <= ts < MAX_TIMESTAMP_MS:
        raise bad(f"`timestamp` must be milliseconds, 0 or more (and under 2^53), not {ts!r:.40}")
    if ts / 1000 < after_s:
        raise bad(f"`timestamp` {ts} is earlier than the line before it (sort the trace)")
    for name, value, least in (("input_length", n_in, 1), ("output_length", n_out, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_TOKENS:
            wanted = f"a whole number of tokens, {least} to {MAX_TOKENS:,}"
            raise bad(f"`{name}` must be {wanted}, not {value!r:.40}")
    if not isinstance(ids, list) or _has_bool(text, ids):
        raise bad("`hash_ids` must be a list of whole numbers")
    try:
        keys = array("q", ids)  # 8 bytes an id, not a Python int object each
    except TypeError:  # a float, a string, a list, null
        raise bad("`hash_ids` must be a list of whole numbers") from None
    except OverflowError:
        raise bad("`hash_ids` must be whole numbers that fit in 64 bits") from None
    session = obj.get("session_id")
    return TraceRequest(line, before, ts / 1000, n_in, n_out, keys, None if session is None else str(session))


def read_trace(
    path: Path, limit: int | None = None, data: bytes | None = None, progress: bool = True
) -> Generator[TraceRequest, None, None]:
    """The trace's requests in order, each line checked as it is read (blank lines skipped).

    `data`: the file's stored bytes, if they are already in memory (see `open_binary`);
    `progress`: a line on stderr every few seconds while a long read goes on.
    """
    found, after_s = 0, 0.0
    f, raw, size = open_binary(path, data)
    with contextlib.closing(raw), contextlib.closing(f):
        try:
            for number, text in lines(path, f, Progress(path, raw, size, progress)):
                request = parse(path, number, text, after_s, found)
                after_s, found = request.arrival_s, found + 1
                yield request
                if limit is not None and found >= limit:
                    return  # before reading on: what comes after the limit is never looked at
        except (OSError, EOFError, lzma.LZMAError, zlib.error) as exc:
            raise FelabError(f"{path} could not be read to its end ({exc}): is the file complete?") from None
    if not found:
        raise FelabError(
            f"{path} holds no requests: a trace is one JSON object per line (Mooncake's format)."
        )


REMEMBER_REQUESTS = 100_000
"""A sweep keeps a trace of at most this many requests in memory after its first pass (about
50 MB for Mooncake's lines, 490 bytes a request); a longer one is read again for each
configuration."""

_remembered: dict[tuple, list[TraceRequest]] = {}
"""This process's one remembered trace: (what identifies it) -> its requests."""


def requests(
    path: Path,
    limit: int | None = None,
    data: bytes | None = None,
    progress: bool = True,
    remember: bool = False,
) -> Iterator[TraceRequest]:
    """`read_trace`, for a sweep (`remember`): the first pass in this process keeps the requests
    (when there are at most REMEMBER_REQUESTS), and the next configurations take them from
    memory instead of decompressing and checking every line again (for the kit's trace, that
    is most of a run's CPU time). A pass that stops early (a bad line) keeps nothing."""
    if not remember:
        yield from read_trace(path, limit, data, progress)
        return
    stored = ("bytes", hashlib.blake2b(data).digest()) if data is not None else stamp(path)
    key = (str(path), limit, stored)
    if key in _remembered:
        yield from _remembered[key]
        return
    kept: list[TraceRequest] | None = []
    for request in read_trace(path, limit, data, progress):
        if kept is not None:
            kept.append(request)
            kept = kept if len(kept) <= REMEMBER_REQUESTS else None
        yield request
    if kept is not None:
        _remembered.clear()  # one trace at a time
        _remembered[key] = kept


def forget() -> None:
    """Drop the remembered trace (a benchmark that times reading it)."""
    _remembered.clear()


def stamp(path: Path) -> tuple:
    """What tells this file from a changed one (size and modification time), if it is there."""
    try:
        st = path.stat()
    except OSError:
        return ("missing",)
    return ("file", st.st_size, st.st_mtime_ns)


def fits(request: TraceRequest, block: int) -> bool:
    """Does this request have one id per block of `block` tokens, the last one partial or not?"""
    return len(request.hash_ids) == math.ceil(request.input_tokens / block)


def block_tokens(path: Path, limit: int | None = None) -> int:
    """The trace's block size: the power of two that gives every one of the first lines its ids.

    A request of L tokens in blocks of B has ceil(L / B) ids; 6,758 tokens with 14 ids
    allows only B = 512 among the powers of two. If the first lines leave more than one
    size possible (all prompts shorter than one block, say), the caller must say.
    """
    with contextlib.closing(read_trace(path, min(limit or INFER_LINES, INFER_LINES))) as lines:
        head = list(lines)
    sizes = [b for b in (2**k for k in range(17)) if all(fits(r, b) for r in head)]
    if len(sizes) == 1:
        return sizes[0]
    what = "no power of two fits them all" if not sizes else f"{', '.join(map(str, sizes[:4]))} ... all fit"
    raise FelabError(
        f"Could not tell the block size of {path} from its first {len(head):,} lines ({what}). "
        f"Say it: add `--block-tokens 512` (Mooncake's) or the size the trace was made with."
    )


def check_blocks(path: Path, request: TraceRequest, block: int) -> None:
    """Stop at a line whose ids do not match the block size (one id per block, the last partial)."""
    if not fits(request, block):
        want = math.ceil(request.input_tokens / block)
        what = f"{len(request.hash_ids)} hash_ids for {request.input_tokens:,} input tokens"
        raise bad_line(path, request.line, f"{what}, but {block}-token blocks make {want}", request.before)
