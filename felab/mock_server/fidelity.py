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

    python -m felab.mock_server.fidelity        # or: make bench
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
                }
            )
        conn.close()
        return out

    clients = (one_client(c, plan, b) for c, plan, b in zip(conns, plans, payloads, strict=True))
    done = await asyncio.gather(*clients)
    return [r for rs in done for r in rs]


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
                ("all, 64 at once", [r for r in mine if r["first"]]),
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


def floor_rows(records: list[dict]) -> list[dict]:
    """Median and p99 of |TTFT error| per server and streams, and practice / floor."""
    rows = []
    for streams in sorted({r["streams"] for r in records}):
        row: dict[str, Any] = {"streams": streams}
        for name in ("practice", "floor"):
            errors = [
                abs(r["measured_ms"] - r["predicted_ms"])
                for r in records
                if r["server"] == name and r["streams"] == streams
            ]
            row["requests"] = len(errors)
            row[f"{name}_p50_ms"] = percentile(errors, 50)
            row[f"{name}_p99_ms"] = percentile(errors, 99)
        row["ratio_p50"] = ratio(row["practice_p50_ms"], row["floor_p50_ms"])
        row["ratio_p99"] = ratio(row["practice_p99_ms"], row["floor_p99_ms"])
        rows.append(row)
    return rows


def measure_floor(blocks: int, one: int, per_stream_64: int) -> list[dict]:
    """The practice server (a 50 ms model) and the floor, side by side, in alternating blocks."""
    with (
        server_process("felab.mock_server", *FIFTY_MS_MODEL) as (practice, _),
        server_process("felab.mock_server.floor") as (floor, _),
    ):
        click.echo(f"\nthe floor: a 50 ms schedule, {blocks} alternating blocks of each ...", err=True)
        urls = {"practice": practice, "floor": floor}
        records = asyncio.run(versus_floor(urls, blocks, {1: one, 64: per_stream_64}))
    rows = floor_rows(records)
    click.echo(
        "\n|TTFT error| against a 50 ms schedule, the practice server and the floor, one client (ms)\n"
    )
    click.echo(table(rows, floatfmt=".2f"))
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


@dataclass
class Measured:
    """What one bench run measured against a live practice server."""

    rows: list[dict]
    overhead_ms: float
    cpu_us: float


def measure(rounds: int, rounds_64: int) -> Measured:
    """TTFT error at 1 and 64 streams, the openai client's cost, the server's CPU per token."""
    with practice_server("--prefill-tps", str(BENCH_PREFILL_TPS)) as url:
        click.echo(f"practice server at {url}, prefill {BENCH_PREFILL_TPS:,} tok/s; lean asyncio client\n")
        click.echo(f"  1 stream: {rounds * len(LENGTHS)} requests, one after another ...", err=True)
        records = asyncio.run(fidelity(url, 1, rounds * len(LENGTHS)))
        click.echo(f"  64 streams: {64 * rounds_64} requests ...", err=True)
        records += asyncio.run(fidelity(url, 64, rounds_64))
        rows = error_rows(records)
        click.echo("TTFT: measured by the client - predicted by the timing model (ms)\n")
        click.echo(table(rows, floatfmt=".2f"))
        click.echo("\n  the openai client's cost, the server's CPU per token, the cache lookup ...", err=True)
        overhead = openai_overhead_ms(url)
        before = server_cpu_s(url)
        tokens = asyncio.run(many_streams(url, 16, 400))
        cpu_us = (server_cpu_s(url) - before) / tokens * 1e6
    return Measured(rows, overhead, cpu_us)


def targets(m: Measured, lookups: list[dict]) -> dict[str, float]:
    """Print each target as met or missed; return the run's figures for the JSON line."""
    one = next(r for r in m.rows if r["streams"] == 1 and r["prompt_tokens"] == "all")
    many = next(r for r in m.rows if r["streams"] == 64 and r["prompt_tokens"] == "all")
    short, long = lookups
    checks = [
        ("median error at 1 stream within 1 ms", abs(one["error_p50_ms"]) <= 1.0, one["error_p50_ms"]),
        ("p99 error at 64 streams within 5 ms", abs(many["error_p99_ms"]) <= 5.0, many["error_p99_ms"]),
        ("cache lookup, 3,000 tokens, far below 1 ms", short["lookup_ms"] < 0.1, short["lookup_ms"]),
        ("cache lookup, 100,000 tokens, below 1 ms", long["lookup_ms"] < 1.0, long["lookup_ms"]),
    ]
    click.echo("\ntargets:")
    for name, ok, value in checks:
        click.echo(f"  {'met   ' if ok else 'MISSED'}  {name}: {value:.3f} ms")
    return {
        "error_p50_ms_1_stream": one["error_p50_ms"],
        "error_p99_ms_1_stream": one["error_p99_ms"],
        "error_p50_ms_64_streams": many["error_p50_ms"],
        "error_p99_ms_64_streams": many["error_p99_ms"],
        "openai_client_overhead_ms": m.overhead_ms,
        "server_cpu_us_per_token": m.cpu_us,
        "hash_prompt_ms_100k": lookups[1]["hash_prompt_ms"],
        "lookup_ms_3k": lookups[0]["lookup_ms"],
        "lookup_ms_100k": lookups[1]["lookup_ms"],
        "uncached_tokens_ms_3k": lookups[0]["uncached_tokens_ms"],
        "uncached_tokens_ms_100k": lookups[1]["uncached_tokens_ms"],
    }


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--rounds", default=20, show_default=True, help="requests per prompt length at 1 stream")
@click.option("--rounds-64", default=4, show_default=True, help="requests per stream at 64 streams")
def main(rounds: int, rounds_64: int) -> None:
    """Fidelity of the practice server's TTFT, its CPU per streamed token, and the cache lookup time."""
    m = measure(rounds, rounds_64)
    lookups = [lookup_ms(3_000, 200), lookup_ms(100_000, 30)]
    click.echo(f"\nthe openai client adds {m.overhead_ms:.2f} ms to TTFT (median, on top of the lean client)")
    click.echo(f"server CPU per streamed token: {m.cpu_us:.0f} µs (16 streams x 400 tokens, all work)")
    click.echo(
        "\nPrefixCache.uncached_tokens(), a prompt whose blocks are all cached (the longest walk), median ms:"
        "\nhash_prompt = block_keys(), done once per request on arrival; lookup = uncached_tokens() given"
        "\nthose keys (what the server does); uncached_tokens = both, the keys computed inside.\n"
    )
    click.echo(table(lookups, floatfmt=".3f"))
    summary = targets(m, lookups)
    click.echo("\n" + json.dumps({k: round(v, 4) for k, v in summary.items()}))


if __name__ == "__main__":
    main()
