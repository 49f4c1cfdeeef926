"""Hostile traces: each is one message naming the line (exit 2), in bounded memory and time.

A line longer than the limit, JSON nested 100,000 deep, a 5,000-digit number, an id wider
than 64 bits; a compressed trace of blank lines (read in chunks, never line by line in
Python); a long read says how far it is. The 300 MB versions of these are in `make bench`
(felab/bench/replay.py), not here.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from conftest import run_felab

from felab.errors import FelabError
from felab.replay import trace

GOOD = json.dumps({"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]})


def replay_of(path: Path) -> str:
    """The replay's stderr, which must be one message and exit 2."""
    out = run_felab("replay", str(path), "--block-tokens", "512")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    return out.stderr


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "line 2: JSON nested too deeply"),
        (b'{"timestamp": ' + b"7" * 5000 + b"}", "line 2: a number with too many digits"),
        (
            GOOD.replace("[1]", "[" + "9" * 30 + "]").encode(),
            "line 2: `hash_ids` must be whole numbers that fit",
        ),
        (
            GOOD.replace('"timestamp": 0', '"timestamp": 1e300').encode(),
            "line 2: `timestamp` must be milliseconds",
        ),
        (
            GOOD.replace('"input_length": 512', '"input_length": ' + "9" * 40).encode(),
            "line 2: `input_length` must",
        ),
        (b'{"timestamp": 0, "x": "\xff"}', "line 2: not UTF-8 text"),
    ],
)
def test_hostile_lines_are_one_message_naming_the_line(tmp_path: Path, bad: bytes, says: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(GOOD.encode() + b"\n" + bad + b"\n")
    assert says in replay_of(path)


def test_a_line_longer_than_the_limit_stops_the_replay_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl.gz"  # 24 MB of spaces on line 3, then a line of text: 24 KB compressed
    with gzip.open(path, "wb") as f:
        f.write(f"{GOOD}\n\n".encode() + b" " * (24 << 20) + b"{}\n")
    tracemalloc.start()
    try:
        with pytest.raises(FelabError, match="line 3 is longer than 1,048,576 bytes"):
            list(trace.read_trace(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, (
        f"{peak / 2**20:.1f} MB held to read a 24 MB line: it must be refused as it streams"
    )
    assert "line 3 is longer" in replay_of(path)


def test_blank_lines_are_skipped_at_about_the_speed_of_reading(tmp_path: Path) -> None:
    # 30 MB of empty lines (31 million of them) between two requests. Read line by line in
    # Python this took 4 s on a quiet 2-core machine (and 300 MB took 46 s); searched in 1 MiB
    # chunks it takes about 0.3 s. The margin (3 s) is ten times that, for a loaded machine.
    path = tmp_path / "blank.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(GOOD.encode() + b"\n" + b"\n" * (30 << 20) + GOOD.encode())
    t0 = time.perf_counter()
    lines = [r.line for r in trace.read_trace(path)]
    took = time.perf_counter() - t0
    assert lines == [1, 2 + (30 << 20)]  # blank lines still count, so messages name the right line
    assert took < 3.0, f"{took:.1f} s to skip 30 MB of blank lines"


def test_lines_are_numbered_across_chunks_and_blank_ones_count(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(trace, "CHUNK_BYTES", 7)  # every line spans chunks
    path = tmp_path / "t.jsonl"
    path.write_text(f"\n  \n{GOOD}\r\n\t\n{GOOD}\n\n{GOOD}", encoding="utf-8")  # no newline at the end
    assert [r.line for r in trace.read_trace(path)] == [3, 5, 7]
    assert [r.before for r in trace.read_trace(path)] == [0, 1, 2]


def test_a_long_read_shows_how_far_it_is(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(trace.Progress, "EVERY_S", 0.0)  # a line after every chunk
    monkeypatch.setattr(trace, "CHUNK_BYTES", 1 << 12)
    path = tmp_path / "t.jsonl.gz"
    with gzip.open(path, "wb") as f:
        f.write(f"{GOOD}\n".encode() * 2000)
    assert sum(1 for _ in trace.read_trace(path)) == 2000
    err = capsys.readouterr().err
    assert "reading t.jsonl.gz: " in err and "% of its 0.0 MB (compressed, line " in err
    assert sum(1 for _ in trace.read_trace(path, progress=False)) == 2000
    assert "reading" not in capsys.readouterr().err


def test_a_server_that_accepts_then_resets_is_named_as_such() -> None:
    # Something listens, accepts each connection and resets it at once (SO_LINGER 0): the port
    # is taken, so "nothing is listening there, start the server" would be advice that fails.
    with socket.create_server(("127.0.0.1", 0)) as server:
        stop = threading.Event()

        def reset_each() -> None:
            server.settimeout(0.1)
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()

        thread = threading.Thread(target=reset_each, daemon=True)
        thread.start()
        try:
            url = f"http://127.0.0.1:{server.getsockname()[1]}/v1"
            out = run_felab(
                "replay", "--target", "llamacpp", "--base-url", url, "--model", "m", "--limit", "2"
            )
        finally:
            stop.set()
            thread.join()
    assert out.returncode == 2, out.stderr
    assert "accepted the connection, then reset or closed it without answering" in out.stderr
    assert "nothing is listening" not in out.stderr and "Traceback" not in out.stderr


def test_replicas_have_the_servers_limit() -> None:
    # 10,000,000 replicas took 16 GB and 154 s for a 10-line trace; the server's limit is 256.
    out = run_felab("replay", "--replicas", "8,10000000", "--limit", "3")
    assert out.returncode == 2 and "--replicas must be at most 256, not 10000000" in out.stderr


def test_a_sweep_reads_the_trace_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(f"{GOOD}\n" * 5, encoding="utf-8")
    opened = []
    real = trace.open_binary
    monkeypatch.setattr(trace, "open_binary", lambda *a: opened.append(a) or real(*a))
    first = list(trace.requests(path, remember=True))
    again = list(trace.requests(path, remember=True))
    assert again == first and len(first) == 5 and len(opened) == 1  # the second pass from memory
    list(trace.requests(path, limit=2, remember=True))  # another limit: another trace
    assert len(opened) == 2
    path.write_text(f"{GOOD}\n" * 3, encoding="utf-8")  # changed on disk: read again
    assert len(list(trace.requests(path, remember=True))) == 3 and len(opened) == 3
    monkeypatch.setattr(trace, "REMEMBER_REQUESTS", 2)  # too long to keep: read every time
    trace.forget()
    list(trace.requests(path, remember=True))
    list(trace.requests(path, remember=True))
    assert len(opened) == 5


@pytest.mark.parametrize("ids", ["[1.5]", '["7"]', "[true]", "[1, false]", "[null]", "[[1]]", '{"a": 1}'])
def test_hash_ids_that_are_not_whole_numbers_are_named(ids: str) -> None:
    text = GOOD.replace("[1]", ids).encode()
    with pytest.raises(FelabError, match="line 2: `hash_ids` must be a list of whole numbers"):
        trace.parse(Path("t.jsonl"), 2, text, 0.0, 1)


def test_an_id_of_1_is_not_taken_for_true_nor_a_session_named_true_for_an_id() -> None:
    text = GOOD.replace('"hash_ids": [1]', '"hash_ids": [1, 0], "session_id": "true"').encode()
    assert list(trace.parse(Path("t.jsonl"), 2, text, 0.0, 1).hash_ids) == [1, 0]
