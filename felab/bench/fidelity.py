"""`make bench`: how faithful the practice server is, and what it costs. A benchmark, not a test.

1. Fidelity. Every chat reply carries `x-felab-predicted-ttft-ms`, the time to
   first token the timing model scheduled. A lean client (raw asyncio streams,
   no SDK: it only looks for the first chunk with content) measures the real
   TTFT on a keep-alive connection opened beforehand, from just before it sends
   the request; error = measured - predicted.
   Prompts of 100 to 16,000 tokens, none cached, at 1 stream and at 64 streams.
   The prefill rate is raised to BENCH_PREFILL_TPS so that 64 queued 16,000-token
   prompts take seconds, not minutes; the error does not depend on the rate.
2. The `openai` client's own cost: the same requests through `stream_once`.
3. The server's CPU per streamed token: `process_cpu_seconds_total` from
   /metrics before and after 16 streams of 400 tokens each.
4. `PrefixCache.uncached_tokens()` on a 3,000- and a 100,000-token prompt.

Everything runs on 127.0.0.1 against a practice server it starts itself, and
is bounded in requests (about 25 s in all).

    python -m felab.bench.fidelity        # or: make bench
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from felab.connect import client
from felab.mock_server.cache import PrefixCache, block_keys, tokenize
from felab.mock_server.launch import free_port, practice_server
from felab.mock_server.metrics import scrape
from felab.stats import percentile, ratio
from felab.streaming import stream_once
from felab.tables import table
from felab.targets import NO_KEY, Target

BENCH_PREFILL_TPS = 100_000
LENGTHS = (100, 1_000, 4_000, 16_000)
MODEL = "felab-practice"
PREDICTED = re.compile(rb"x-felab-predicted-ttft-ms: ([0-9.]+)", re.I)


# ── A lean streaming client ──────────────────────────────────────────────────


def body(prompt_tokens: int, max_tokens: int = 4) -> bytes:
    """A streamed chat request of about `prompt_tokens` tokens (4 characters each), new from its first."""
    text = f"{uuid.uuid4()} " + "word " * (prompt_tokens * 4 // 5)
    messages = [{"role": "user", "content": text[: prompt_tokens * 4 - 24]}]
    return json.dumps(
        {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": True}
    ).encode()


class LeanConnection:
    """One keep-alive HTTP/1.1 connection to the practice server, opened and used once before timing.

    Opening it sends `GET /health`, so the server has accepted and set up the connection
    before any clock starts, as with a client's connection pool.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port

    async def open(self) -> LeanConnection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"GET /health HTTP/1.1\r\nhost: {self.host}\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"content-length: (\d+)", head, re.I)
        await self.reader.readexactly(int(length.group(1)) if length else 0)
        return self

    async def stream(self, payload: bytes) -> tuple[float, float, int]:
        """One streamed request: (measured TTFT ms, predicted TTFT ms, content chunks)."""
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {self.host}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(payload)}\r\n\r\n"
        ).encode()
        t0 = time.perf_counter()
        self.sent_at = time.monotonic()  # the same moment on the clock the stall watcher reads
        self.writer.write(head + payload)
        headers = await self.reader.readuntil(b"\r\n\r\n")
        ttft, chunks = None, 0
        while (line := await self.reader.readline()) != b"0\r\n":  # chunked body; "0" ends it
            if line.startswith(b"data: {") and b'"content": "' in line and b'"content": ""' not in line:
                ttft = ttft if ttft is not None else time.perf_counter() - t0
                chunks += 1
            elif not line:
                raise RuntimeError("the server closed the connection mid-reply")
        await self.reader.readline()  # the blank line after the last chunk
        found = PREDICTED.search(headers)
        if ttft is None or not found:
            raise RuntimeError(f"no content or no prediction in the reply: {headers[:200]!r}")
        return ttft * 1000, float(found.group(1)), chunks

    def close(self) -> None:
        self.writer.close()


async def lean_stream(url: str, payload: bytes) -> tuple[float, float, int]:
    """One streamed request on a fresh (warmed) connection."""
    conn = await LeanConnection(url).open()
    try:
        return await conn.stream(payload)
    finally:
        conn.close()


async def fidelity(
    url: str, streams: int, requests_per_stream: int, lengths: tuple[int, ...] = LENGTHS, max_tokens: int = 4
) -> list[dict]:
    """`streams` clients, each on its own connection sending its requests one after another.

    All connections are opened first; then every stream sends its first request at once.
    """
    # Stream k sends the lengths in turn, starting at the k-th: every length is in every round.
    plans = [[lengths[(k + i) % len(lengths)] for i in range(requests_per_stream)] for k in range(streams)]
    conns = await asyncio.gather(*(LeanConnection(url).open() for _ in range(streams)))
    # Every request's body is built before the first is sent: the client does no work during a round.
    payloads = [[body(n, max_tokens) for n in plan] for plan in plans]

    async def one_client(conn: LeanConnection, plan: list[int], bodies: list[bytes]) -> list[dict]:
        out = []
        for i, (n, payload) in enumerate(zip(plan, bodies, strict=True)):
            measured, predicted, _ = await conn.stream(payload)
            out.append(
                {
                    "streams": streams,
                    "first": i == 0,
                    "prompt_tokens": n,
                    "measured_ms": measured,
                    "predicted_ms": predicted,
                    "sent_at": conn.sent_at,
                }
            )
        conn.close()
        return out

    clients = (one_client(c, plan, b) for c, plan, b in zip(conns, plans, payloads, strict=True))
    with quiet_collector():
        done = await asyncio.gather(*clients)
    return [r for rs in done for r in rs]


@contextlib.contextmanager
def quiet_collector() -> Iterator[None]:
    """No garbage collection in the client while it measures: a full collection of its heap (the
    openai SDK is imported) takes about 100 ms and would land on whichever server it timed then."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def error_rows(records: list[dict]) -> list[dict]:
    """The error's median and p99 (linear interpolation) per streams and prompt length, then for all.

    At 64 streams also apart: each stream's first request (all 64 sent at the same instant)
    and the later ones (each sent when its stream's previous reply ended).
    """
    rows = []
    for streams in sorted({r["streams"] for r in records}):
        mine = [r for r in records if r["streams"] == streams]
        groups = [(str(n), [r for r in mine if r["prompt_tokens"] == n]) for n in LENGTHS] + [("all", mine)]
        if streams > 1:
            groups += [
                ("all, at once", [r for r in mine if r["first"]]),
                ("all, later", [r for r in mine if not r["first"]]),
            ]
        for n, rs in groups:
            errors = [r["measured_ms"] - r["predicted_ms"] for r in rs]
            rows.append(
                {
                    "streams": streams,
                    "prompt_tokens": n,
                    "requests": len(rs),
                    "predicted_p50_ms": percentile([r["predicted_ms"] for r in rs], 50),
                    "error_p50_ms": percentile(errors, 50),
                    "error_p99_ms": percentile(errors, 99),
                }
            )
    return rows


# ── The floor: the same client, a server that only keeps the schedule ───────

FIFTY_MS_MODEL = ("--overhead-ms", "50", "--prefill-tps", "1e9")
"""The practice server as a 50 ms model, the floor's schedule: the overhead is the whole TTFT
(a 100-token prompt prefills in 0.1 µs, so 64 at once do not queue)."""


def wait_for_port(port: int, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    """Poll until something accepts connections on 127.0.0.1:port (or the process died)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.005)
    raise RuntimeError(f"nothing listened on port {port} within {timeout_s:g} s (exit {proc.poll()})")


@contextlib.contextmanager
def server_process(module: str, *args: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """`python -m module --port P *args` (the floor: `module P`) on a free port: (its …/v1 URL, process)."""
    port = free_port()
    flags = [str(port)] if module.endswith("floor") else ["--port", str(port), *args]
    proc = subprocess.Popen([sys.executable, "-m", module, *flags], stdout=subprocess.DEVNULL)
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/v1", proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def versus_floor(urls: dict[str, str], blocks: int, plan: dict[int, int]) -> list[dict]:
    """Short blocks of each server in turn, `blocks` each, per number of streams (`plan`: streams ->
    requests per stream in a block); the order flips every block, so both see the same machine."""
    records = []
    for streams, n in plan.items():
        for block in range(blocks):
            for name in list(urls)[:: 1 if block % 2 == 0 else -1]:
                done = await fidelity(urls[name], streams, n, lengths=(100,), max_tokens=1)
                records += [{**r, "server": name} for r in done]
    return records


def in_a_stall(record: dict, stalls: Sequence[tuple[float, float]]) -> bool:
    """Was the request in flight (sent, not yet answered) during one of the machine's stalls?"""
    sent, answered = record["sent_at"], record["sent_at"] + record["measured_ms"] / 1000
    return any(start < answered and end > sent for start, end in stalls)


def miss_ms(record: dict) -> float:
    """How far a request's first token came from its schedule, either way."""
    return abs(record["measured_ms"] - record["predicted_ms"])


def floor_rows(records: list[dict], stalls: Sequence[tuple[float, float]] = ()) -> list[dict]:
    """Median and p99 of |TTFT error| per server and streams, and practice / floor, leaving out the
    requests in flight during a stall of the whole machine (stalls.py), for both servers alike;
    the p99 ratio of all requests too."""
    rows = []
    for streams in sorted({r["streams"] for r in records}):
        mine = [r for r in records if r["streams"] == streams]
        kept = [r for r in mine if not in_a_stall(r, stalls)]
        if {r["server"] for r in kept} != {r["server"] for r in mine}:
            kept = mine  # stalls took every request of a server (a tiny run): none is left out
        row: dict[str, Any] = {"streams": streams, "requests": sum(r["server"] == "floor" for r in mine)}
        row["left_out"] = sum(r["server"] == "floor" for r in mine if r not in kept)
        for name in ("practice", "floor"):
            errors = [miss_ms(r) for r in kept if r["server"] == name]
            every = [miss_ms(r) for r in mine if r["server"] == name]
            row[f"{name}_p50_ms"] = percentile(errors, 50)
            row[f"{name}_p99_ms"] = percentile(errors, 99)
            row[f"{name}_p99_all_ms"] = percentile(every, 99)
        row["ratio_p50"] = ratio(row["practice_p50_ms"], row["floor_p50_ms"])
        row["ratio_p99"] = ratio(row["practice_p99_ms"], row["floor_p99_ms"])
        row["ratio_p99_all"] = ratio(row.pop("practice_p99_all_ms"), row.pop("floor_p99_all_ms"))
        rows.append(row)
    return rows


@contextlib.contextmanager
def machine_stalls() -> Iterator[list[tuple[float, float]]]:
    """The stalls of the machine while the block runs, seen by a process that only sleeps
    (stalls.py); the list is filled when the block ends."""
    watcher = subprocess.Popen(
        [sys.executable, "-m", "felab.bench.stalls"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    stalls: list[tuple[float, float]] = []
    try:
        yield stalls
    finally:
        out, _ = watcher.communicate(timeout=10)  # closing its input ends it
        stalls += [(float(a), float(b)) for a, b in (line.split() for line in out.splitlines())]


def measure_floor(blocks: int, one: int, per_stream: int, streams: int = 64) -> list[dict]:
    """The practice server (a 50 ms model) and the floor, side by side, in alternating blocks."""
    with (
        server_process("felab.mock_server", *FIFTY_MS_MODEL) as (practice, _),
        server_process("felab.bench.floor") as (floor, _),
    ):
        click.echo(f"\nthe floor: a 50 ms schedule, {blocks} alternating blocks of each ...", err=True)
        urls = {"practice": practice, "floor": floor}
        with machine_stalls() as stalls:
            records = asyncio.run(versus_floor(urls, blocks, {1: one, streams: per_stream}))
    rows = floor_rows(records, stalls)
    click.echo(
        "\n|TTFT error| against a 50 ms schedule, the practice server and the floor, one client (ms)\n"
    )
    click.echo(table(rows, floatfmt=".2f"))
    longest = max((b - a for a, b in stalls), default=0.0) * 1000
    click.echo(
        f"requests: each server's; left_out: the floor's requests in flight during the {len(stalls)} "
        f"stalls of the machine (longest {longest:.0f} ms) that a process that only sleeps saw "
        "(stalls.py), left out for both servers; ratio_p99_all: of every request"
    )
    return rows


# ── The server's cost ────────────────────────────────────────────────────────


def server_cpu_s(url: str) -> float:
    return scrape(url)["process_cpu_seconds_total"]


async def many_streams(url: str, streams: int, tokens: int) -> int:
    done = await asyncio.gather(*(lean_stream(url, body(200, max_tokens=tokens)) for _ in range(streams)))
    return sum(chunks for _, _, chunks in done)


def openai_overhead_ms(url: str, n: int = 15) -> float:
    """Median TTFT through the openai client minus median TTFT of the lean client, same requests."""
    api = client(Target("mock", url, MODEL, NO_KEY, False))
    lean, sdk = [], []
    for _ in range(n):
        lean.append(asyncio.run(lean_stream(url, body(100)))[0])
        sdk.append(stream_once(api, MODEL, json.loads(body(100))["messages"], max_tokens=4).ttft_ms)
    return statistics.median(sdk) - statistics.median(lean)


def resident_kib(pid: int) -> int | None:
    """A process's resident memory in KiB (Linux: /proc; macOS: ps), None where neither answers."""
    with contextlib.suppress(OSError, ValueError):
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
        return int(subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True).stdout)
    return None


async def hold_streams(url: str, pid: int, streams: int) -> float | None:
    """KiB of resident memory per stream in flight: `streams` replies of 400 tokens (1 s each) under
    way at once on a fresh server, against the same server with their connections open and idle."""
    conns = await asyncio.gather(*(LeanConnection(url).open() for _ in range(streams)))
    payloads = [body(200, max_tokens=400) for _ in conns]
    idle = resident_kib(pid)
    replies = asyncio.gather(*(c.stream(p) for c, p in zip(conns, payloads, strict=True)))
    await asyncio.sleep(0.5)  # every reply has started, none has ended
    busy = resident_kib(pid)
    await replies
    for c in conns:
        c.close()
    return None if idle is None or busy is None else (busy - idle) / streams


def spawn_s(runs: int) -> float:
    """Median seconds from starting `python -m felab.mock_server` to its first `GET /health` answer."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        with server_process("felab.mock_server") as (url, _):
            health = urlsplit(url)._replace(path="/health").geturl()
            urllib.request.urlopen(health, timeout=10).read()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def lookup_ms(prompt_tokens: int, runs: int) -> dict:
    """Median times on a prompt that is all cached (the longest walk): hashing it, looking it up with
    those keys (uncached_tokens(), what the server runs per request), and both together."""
    tokens = tokenize("".join(f"w{i:06d} " for i in range(prompt_tokens // 2))[: prompt_tokens * 4])
    cache = PrefixCache(capacity_blocks=prompt_tokens // 64 + 10)
    cache.insert(block_keys(tokens), used_at=0.0)

    def median_ms(f: Callable[[], object]) -> float:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            f()
            times.append((time.perf_counter() - t0) * 1000)
        return statistics.median(times)

    keys = block_keys(tokens)
    return {
        "prompt_tokens": len(tokens),
        "hash_prompt_ms": median_ms(lambda: block_keys(tokens)),
        "lookup_ms": median_ms(lambda: cache.uncached_tokens(len(tokens), keys, 0.0)),
        "uncached_tokens_ms": median_ms(lambda: cache.uncached_tokens(len(tokens), block_keys(tokens), 0.0)),
    }


# ── The command ──────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Sizes:
    """How much each phase sends (`--tiny`: enough to show that every phase runs, for the tests)."""

    rounds: int = 20
    """1 stream: requests per prompt length."""
    rounds_many: int = 4
    """Requests per stream at `streams` streams."""
    streams: int = 64
    floor_blocks: int = 16
    """Blocks of each server in the floor phase (5 requests at 1 stream, 4 per stream at `streams`)."""
    cost: tuple[int, int] = (16, 400)
    """CPU per token: streams, reply tokens each."""
    memory_streams: int = 256
    spawns: int = 3
    lookups: tuple[tuple[int, int], ...] = ((3_000, 200), (100_000, 30))
    """Prompt tokens, timed runs."""
    openai_runs: int = 15


TINY = Sizes(1, 1, 4, 2, (2, 20), 8, 1, ((300, 3), (1_000, 2)), 2)


@dataclass
class Measured:
    """What one bench run measured against live servers."""

    rows: list[dict]
    overhead_ms: float
    cpu_us: float
    floor: list[dict]
    memory_kib: float | None
    spawn_s: float


def measure(size: Sizes) -> Measured:
    """TTFT error at 1 and many streams, the openai client's cost, the server's CPU per token."""
    with practice_server("--prefill-tps", str(BENCH_PREFILL_TPS)) as url:
        click.echo(f"practice server at {url}, prefill {BENCH_PREFILL_TPS:,} tok/s; lean asyncio client\n")
        click.echo(f"  1 stream: {size.rounds * len(LENGTHS)} requests, one after another ...", err=True)
        records = asyncio.run(fidelity(url, 1, size.rounds * len(LENGTHS)))
        click.echo(f"  {size.streams} streams: {size.streams * size.rounds_many} requests ...", err=True)
        records += asyncio.run(fidelity(url, size.streams, size.rounds_many))
        rows = error_rows(records)
        click.echo("TTFT: measured by the client - predicted by the timing model (ms)\n")
        click.echo(table(rows, floatfmt=".2f"))
        click.echo("\n  the openai client's cost, the server's CPU per token ...", err=True)
        overhead = openai_overhead_ms(url, size.openai_runs)
        before = server_cpu_s(url)
        tokens = asyncio.run(many_streams(url, *size.cost))
        cpu_us = (server_cpu_s(url) - before) / tokens * 1e6
    floor = measure_floor(size.floor_blocks, 5, size.rounds_many, size.streams)
    click.echo(f"\n  memory per stream ({size.memory_streams} at once), spawn time ...", err=True)
    with server_process("felab.mock_server", *FIFTY_MS_MODEL) as (url, proc):
        memory = asyncio.run(hold_streams(url, proc.pid, size.memory_streams))
    return Measured(rows, overhead, cpu_us, floor, memory, spawn_s(size.spawns))


def targets(m: Measured, lookups: list[dict], streams: int) -> None:
    """Print each target as met or missed."""
    f1, fn = m.floor
    short, long = lookups
    memory = f"{m.memory_kib:.0f} KiB" if m.memory_kib is not None else "not measured here"
    checks = [
        (
            "median |error| at 1 stream within 0.5 ms of the floor's",
            f1["practice_p50_ms"] - f1["floor_p50_ms"] <= 0.5,
            f"{f1['practice_p50_ms']:.2f} ms, floor {f1['floor_p50_ms']:.2f} ms",
        ),
        (
            f"median |error| at {streams} streams within 1.25x the floor's",
            fn["ratio_p50"] <= 1.25,
            f"{fn['ratio_p50']:.2f}x",
        ),
        (
            f"p99 |error| at {streams} streams within 1.5x the floor's",
            fn["ratio_p99"] <= 1.5,
            f"{fn['ratio_p99']:.2f}x",
        ),
        ("server CPU per streamed token under 30 µs", m.cpu_us < 30, f"{m.cpu_us:.0f} µs"),
        ("memory per stream in flight under 64 KiB", m.memory_kib is not None and m.memory_kib < 64, memory),
        ("spawn to GET /health under 0.4 s", m.spawn_s < 0.4, f"{m.spawn_s:.2f} s"),
        (
            f"cache lookup, {short['prompt_tokens']:,} tokens, far below 1 ms",
            short["lookup_ms"] < 0.1,
            f"{short['lookup_ms']:.3f} ms",
        ),
        (
            f"cache lookup, {long['prompt_tokens']:,} tokens, below 1 ms",
            long["lookup_ms"] < 1.0,
            f"{long['lookup_ms']:.3f} ms",
        ),
    ]
    click.echo(f"\ntargets (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores now):")
    for name, ok, value in checks:
        click.echo(f"  {'met   ' if ok else 'MISSED'}  {name}: {value}")


def figures(m: Measured, lookups: list[dict], streams: int) -> dict[str, float | None]:
    """The run's figures, for the JSON line."""
    one = next(r for r in m.rows if r["streams"] == 1 and r["prompt_tokens"] == "all")
    many = next(r for r in m.rows if r["streams"] == streams and r["prompt_tokens"] == "all")
    short, long = lookups
    return {
        "error_p50_ms_1_stream": one["error_p50_ms"],
        "error_p99_ms_1_stream": one["error_p99_ms"],
        f"error_p50_ms_{streams}_streams": many["error_p50_ms"],
        f"error_p99_ms_{streams}_streams": many["error_p99_ms"],
        **{f"floor_{k}_{r['streams']}": r[k] for r in m.floor for k in FLOOR_FIGURES},
        "openai_client_overhead_ms": m.overhead_ms,
        "server_cpu_us_per_token": m.cpu_us,
        "memory_kib_per_stream": m.memory_kib,
        "spawn_s": m.spawn_s,
        "hash_prompt_ms_100k": long["hash_prompt_ms"],
        "lookup_ms_3k": short["lookup_ms"],
        "lookup_ms_100k": long["lookup_ms"],
        "uncached_tokens_ms_3k": short["uncached_tokens_ms"],
        "uncached_tokens_ms_100k": long["uncached_tokens_ms"],
    }


FLOOR_FIGURES = (
    "practice_p50_ms",
    "practice_p99_ms",
    "floor_p50_ms",
    "floor_p99_ms",
    "ratio_p50",
    "ratio_p99",
    "ratio_p99_all",
    "left_out",
)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--tiny", is_flag=True, help="every phase at a tiny size: shows that each runs (the tests use it)"
)
def main(tiny: bool) -> None:
    """Fidelity of the practice server's TTFT (alone, and beside the floor), its CPU per streamed token,
    its memory per stream, its start-up time, and the cache lookup time."""
    size = TINY if tiny else Sizes()
    click.echo(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start", err=True)
    m = measure(size)
    lookups = [lookup_ms(n, runs) for n, runs in size.lookups]
    click.echo(f"\nthe openai client adds {m.overhead_ms:.2f} ms to TTFT (median, on top of the lean client)")
    streams, tokens = size.cost
    click.echo(
        f"server CPU per streamed token: {m.cpu_us:.0f} µs ({streams} streams x {tokens} tokens, all work)"
    )
    memory = "not measured on this system" if m.memory_kib is None else f"{m.memory_kib:.0f} KiB"
    click.echo(f"server memory per stream in flight: {memory} ({size.memory_streams} at once, resident)")
    click.echo(f"server start to its first GET /health: {m.spawn_s:.2f} s (median of {size.spawns})")
    click.echo(
        "\nPrefixCache.uncached_tokens(), a prompt whose blocks are all cached (the longest walk), median ms:"
        "\nhash_prompt = block_keys(), done once per request on arrival; lookup = uncached_tokens() given"
        "\nthose keys (what the server does); uncached_tokens = both, the keys computed inside.\n"
    )
    click.echo(table(lookups, floatfmt=".3f"))
    targets(m, lookups, size.streams)
    summary = figures(m, lookups, size.streams)
    click.echo("\n" + json.dumps({k: v if v is None else round(v, 4) for k, v in summary.items()}))


if __name__ == "__main__":
    main()
