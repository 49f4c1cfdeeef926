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

The file is read line by line (plain, `.xz` or `.gz`), so a trace of any length costs no more
memory than one line. A bad line stops the replay with one message that names the line.
The block size is not written in the format; `block_tokens()` works it out from the first lines.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import lzma
import math
import os
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from felab.errors import FelabError
from felab.paths import KIT_ROOT, from_here, learner_folder, results_dir

MOONCAKE = KIT_ROOT / "data" / "traces" / "mooncake-conversation.jsonl.xz"
"""The trace the kit ships: one hour of a chat service (Mooncake, Apache-2.0; data/traces/README.md)."""

INFER_LINES = 1000
"""How many leading lines `block_tokens()` reads to work out the block size."""


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
    hash_ids: list[int]
    session: str | None = None


def shown(path: Path) -> str:
    """A path as a learner would type it from the folder they are in."""
    return os.path.relpath(path, learner_folder())


def open_text(path: Path) -> IO[str]:
    """The file as text, decompressed on the fly if it ends in .xz or .gz."""
    if not path.is_file():
        raise FelabError(
            f"There is no trace at {path} (paths are taken from the folder you are in). Pass the path "
            f"of a JSON-lines trace in Mooncake's format: the kit ships one, "
            f"`{from_here('make replay')} TRACE={shown(MOONCAKE)}`, and "
            f"`{from_here('.venv/bin/python -m felab agent-trace')}` writes one to "
            f"{shown(results_dir() / 'agent-trace.jsonl')}."
        )
    if path.suffix == ".xz":
        return lzma.open(path, "rt", encoding="utf-8")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def bad_line(path: Path, line: int, what: str, before: int) -> FelabError:
    """One bad line: say which, what is wrong, and how to replay the requests before it."""
    advice = (
        f"To replay the {before:,} request{'s' if before > 1 else ''} before it, add `--limit {before}`."
        if before
        else "Fix that line and run again."
    )
    return FelabError(f"{path} line {line}: {what}. {advice}")


def parse(path: Path, line: int, text: str, after_s: float, before: int) -> TraceRequest:
    """One line, checked: the fields Mooncake's format requires, with sane values."""

    def bad(what: str) -> FelabError:
        return bad_line(path, line, what, before)

    try:
        obj: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad(f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise bad("not a JSON object")
    for name in ("timestamp", "input_length", "output_length", "hash_ids"):
        if name not in obj:
            raise bad(f"the field `{name}` is missing")
    ts, n_in, n_out, ids = obj["timestamp"], obj["input_length"], obj["output_length"], obj["hash_ids"]
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
        raise bad(f"`timestamp` must be milliseconds, 0 or more, not {ts!r}")
    if ts / 1000 < after_s:
        raise bad(f"`timestamp` {ts} is earlier than the line before it (sort the trace)")
    for name, value, least in (("input_length", n_in, 1), ("output_length", n_out, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            wanted = f"a whole number of tokens, {least} or more"
            raise bad(f"`{name}` must be {wanted}, not {value!r}")
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise bad("`hash_ids` must be a list of whole numbers")
    session = obj.get("session_id")
    return TraceRequest(line, before, ts / 1000, n_in, n_out, ids, None if session is None else str(session))


def read_trace(path: Path, limit: int | None = None) -> Generator[TraceRequest, None, None]:
    """The trace's requests in order, each line checked as it is read (blank lines skipped)."""
    found, after_s = 0, 0.0
    with open_text(path) as f:
        try:
            for number, text in enumerate(f, start=1):
                if limit is not None and found >= limit:
                    return
                if not text.strip():
                    continue
                request = parse(path, number, text, after_s, found)
                after_s, found = request.arrival_s, found + 1
                yield request
        except (OSError, EOFError, UnicodeDecodeError, lzma.LZMAError) as exc:
            raise FelabError(f"{path} could not be read to its end ({exc}): is the file complete?") from None
    if not found:
        raise FelabError(
            f"{path} holds no requests: a trace is one JSON object per line (Mooncake's format)."
        )


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
