"""`make bench` runs: each phase of the practice server's benchmark at a tiny size (seconds).

It is a benchmark, not a test: nothing here checks a figure, only that every phase still
runs and prints what docs/benchmarks.md describes, so a refactor cannot break it unseen.
(The replay phase, `python -m felab.replay.bench`, has its own test.)
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

from felab.mock_server.fidelity import LeanConnection, body, server_process
from felab.mock_server.floor import FLOOR_TTFT_S
from felab.paths import KIT_ROOT


def test_every_phase_of_the_fidelity_bench_runs_at_a_tiny_size() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "felab.mock_server.fidelity", "--tiny"],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=KIT_ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    for phase in (
        "TTFT: measured by the client - predicted by the timing model",  # fidelity at 1 and many streams
        "the practice server and the floor, one client",  # the floor, side by side
        "the openai client adds",
        "server CPU per streamed token",
        "server memory per stream in flight",
        "server start to its first GET /health",
        "PrefixCache.uncached_tokens()",
        "targets (load average",
    ):
        assert phase in out, f"missing: {phase}\n{out[-3000:]}"
    figures = json.loads(out.strip().splitlines()[-1])
    for key in (
        "floor_ratio_p50_4",
        "floor_ratio_p99_4",
        "server_cpu_us_per_token",
        "spawn_s",
        "lookup_ms_3k",
    ):
        assert isinstance(figures[key], (int, float)), key


def test_the_floor_server_answers_as_the_bench_expects() -> None:
    # The floor is a server of its own (floor.py): one SSE chunk with text, the prediction in a header.

    async def one(url: str) -> tuple[float, float, int]:
        conn = await LeanConnection(url).open()
        try:
            return await conn.stream(body(100, 1))
        finally:
            conn.close()

    with server_process("felab.mock_server.floor") as (url, _):
        measured, predicted, chunks = asyncio.run(one(url))
    assert predicted == FLOOR_TTFT_S * 1000 and chunks == 1
    assert measured >= predicted  # it never answers before its time
