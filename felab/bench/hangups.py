"""`make bench`: a hang-up storm on a llama.cpp twin costs the server little, and stalls nobody.

A practice server with a llama.cpp twin's settings (4 seats, batches of 2,048 prompt tokens:
the kit's calibrated profile, docs/runs/2026-12-01-calibrate-llamacpp-tiny-final.toml) takes N
streamed requests of about 2,000 tokens each, all at once: 4 are admitted, the rest wait for a seat.
Then their clients hang up one after another, 5 ms apart, first sent first (each hang-up
frees a seat or leaves the queue ahead of everyone behind it: the most each can move). Four
more requests, sent after the N, stay: they must get their first tokens on time.

Measured (issue 31, row 2; before the fix, 100 clients took 9.6 s of server CPU):
  - the server's CPU time over the storm, read from the process (/proc, Linux), against the
    target: under 1 s for 1,000 clients;
  - `GET /health` every 20 ms during the storm: how long the slowest waited;
  - the four that stayed: their first tokens after the last hang-up, against what the model
    gives four such requests on an idle twin (they cannot be sooner, and should not be later).

Everything is on 127.0.0.1 against a server it starts itself; raw asyncio streams (no SDK:
1,000 open streams, each only read for its head and closed).

    python -m felab.bench.hangups              # or: make bench
    python -m felab.bench.hangups --clients 20 # a tiny run (the test uses it)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import time
from pathlib import Path

import click

from felab.bench.fidelity import server_process
from felab.mock_server.booking import PracticeModel, Prompt
from felab.mock_server.cache import prompt_keys
from felab.mock_server.config import Settings
from felab.tables import table

TWIN = {
    "overhead_ms": 1.56,
    "prefill_tps": 41400.0,
    "prefill_attention_ns": 35.3,
    "chars_per_token": 3.87,
    "cached_token_us": 11.2,
    "decode_tps": 2390.0,
    "decode_slowdown": 0.477,
    "decode_context_ns": 623.0,
    "cache_mode": "seat-prefix",
    "block_tokens": 16,
    "seats": 4,
    "context_tokens": 32768,
    "batch_tokens": 2048,
    "batch_slowdown": 0.05,
}
"""The llama.cpp twin: docs/runs/2026-12-01-calibrate-llamacpp-tiny-final.toml's settings
(llama-server -np 4, -b 2048)."""
PROMPT_CHARS = 7740
"""About 2,000 tokens at the twin's 3.87 characters a token."""
REPLY_TOKENS = 200
APART_S = 0.005
"""Between two hang-ups."""
STAYING = 4
HEALTH_EVERY_S = 0.02
TARGET_CPU_S = 1.0
"""For 1,000 clients (issue 31); a smaller storm is held to it too (its fixed costs, the polls of
/health among them, weigh more at a tiny size)."""
TARGET_HEALTH_MS = 100.0
TARGET_LATE_MS = 100.0


def flags() -> list[str]:
    """The twin's settings as the server's flags."""
    return [f"--{name.replace('_', '-')}={value}" for name, value in TWIN.items()]


def cpu_s(pid: int) -> float | None:
    """A process's CPU time so far (user + system), seconds; None where /proc is not there."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def text(i: int) -> str:
    """A prompt of about 2,000 tokens that shares no block with any other."""
    head = f"client {i:05d} asks: "
    return (head + "the quick brown fox jumps over the lazy dog " * 200)[:PROMPT_CHARS]


def chat(i: int, port: int, reply_tokens: int = REPLY_TOKENS) -> bytes:
    body = json.dumps(
        {
            "model": "felab-practice",
            "messages": [{"role": "user", "content": text(i)}],
            "max_tokens": reply_tokens,
            "stream": True,
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def open_stream(
    i: int, port: int, reply_tokens: int = REPLY_TOKENS
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Send request i and read its response head (it is booked then)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(chat(i, port, reply_tokens))
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"request {i}: {head.splitlines()[0].decode(errors='replace')}")
    return reader, writer


async def first_token(reader: asyncio.StreamReader) -> float:
    """When the first chunk with content arrives (the server's clock is not ours: our own)."""
    while True:
        line = await reader.readline()
        if not line:
            raise RuntimeError("the stream ended before its first token")
        if line.startswith(b"data: {") and b'"content"' in line and b'"content":""' not in line:
            return time.monotonic()


async def health_ms(port: int) -> float:
    """One `GET /health` on a new connection, ms."""
    t = time.monotonic()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await writer.drain()
    await reader.read()
    writer.close()
    return (time.monotonic() - t) * 1000


async def storm(port: int, pid: int, clients: int) -> dict[str, float | None]:
    """N streams booked, then hung up 5 ms apart while /health is polled; four stay."""
    leaving = [await open_stream(i, port) for i in range(clients)]
    staying = [await open_stream(clients + k, port) for k in range(STAYING)]
    firsts = [asyncio.ensure_future(first_token(r)) for r, _ in staying]
    healths: list[float] = []
    done = asyncio.Event()

    async def poll() -> None:
        while not done.is_set():
            healths.append(await health_ms(port))
            await asyncio.sleep(HEALTH_EVERY_S)

    poller = asyncio.ensure_future(poll())
    before = cpu_s(pid)
    for _, writer in leaving:
        writer.transport.abort()  # the client is gone: the server sees the connection close
        await asyncio.sleep(APART_S)
    last = time.monotonic()
    got = await asyncio.gather(*firsts)
    await asyncio.sleep(0.2)  # the last hang-ups' work, and a few more polls
    after = cpu_s(pid)
    done.set()
    await poller
    for _, writer in staying:
        writer.transport.abort()
    return {
        "cpu_s": None if before is None or after is None else after - before,
        "health_max_ms": max(healths),
        "health_p50_ms": statistics.median(healths),
        "polls": len(healths),
        "staying_ms": (max(got) - last) * 1000,
    }


def idle_twin_ms() -> float:
    """What the model gives the four that stay, on an idle twin: the last first token, ms."""
    s = Settings(**TWIN)  # type: ignore[arg-type]
    model = PracticeModel(s)
    bookings = []
    for k in range(STAYING):
        tokens, keys = prompt_keys(text(k), s.chars_per_token, s.block_tokens)
        bookings.append(model.book(Prompt(tokens, keys), REPLY_TOKENS, 0.0, 0.0))
    return max(b.ttft_s for b in bookings) * 1000


def measure(clients: int) -> dict[str, float | None]:
    with server_process("felab.mock_server", *flags()) as (url, proc):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        return asyncio.run(storm(port, proc.pid, clients))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--clients", default=1000, show_default=True, help="requests queued, then hung up 5 ms apart")
def main(clients: int) -> None:
    """A hang-up storm on a llama.cpp twin: the server's CPU, /health, the streams that stayed."""
    click.echo(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start", err=True)
    m = measure(clients)
    idle = idle_twin_ms()
    cpu_target = TARGET_CPU_S
    late = None if m["staying_ms"] is None else m["staying_ms"] - idle
    rows = [
        {
            "clients": clients,
            "server CPU, s": m["cpu_s"],
            "/health worst, ms": m["health_max_ms"],
            "/health median, ms": m["health_p50_ms"],
            "4 staying: last first token after the storm, ms": m["staying_ms"],
            "idle twin, ms": idle,
        }
    ]
    click.echo(
        f"\na hang-up storm: {clients} queued ~2,000-token streams hang up {APART_S * 1000:.0f} ms apart"
    )
    click.echo(table(rows, floatfmt=".2f"))
    cpu = m["cpu_s"]
    checks = [
        (
            f"server CPU for the storm under {cpu_target:.0f} s (the target for 1,000 clients)",
            cpu is not None and cpu < cpu_target,
            "not measured on this system" if cpu is None else f"{cpu:.2f} s",
        ),
        (
            f"/health during the storm under {TARGET_HEALTH_MS:.0f} ms",
            (m["health_max_ms"] or 0) < TARGET_HEALTH_MS,
            f"{m['health_max_ms']:.1f} ms worst of {m['polls']:.0f}",
        ),
        (
            f"the streams that stayed on time (no more than {TARGET_LATE_MS:.0f} ms after an idle twin's)",
            late is not None and late < TARGET_LATE_MS,
            "n/a" if late is None else f"{late:+.1f} ms",
        ),
    ]
    click.echo(f"\ntargets (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores now):")
    for what, ok, got in checks:
        click.echo(f"  {'met    ' if ok else 'MISSED '} {what}: {got}")
    with contextlib.suppress(TypeError):
        click.echo("\n" + json.dumps({k: None if v is None else round(v, 4) for k, v in m.items()}))


if __name__ == "__main__":
    main()
