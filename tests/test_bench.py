"""`make bench` runs: the runner (`python -m felab.bench`) and each phase at a tiny size (seconds).

It is a benchmark, not a test: nothing here checks a figure, only that every phase still
runs through the runner and prints what docs/benchmarks.md describes, so a refactor cannot
break it unseen. The replay and calibrate phases have their own tests (tests/test_replay_bench.py,
tests/test_calibrate.py); the last test here checks that every phase in `PHASES` has one.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from felab.bench import PHASES, Phase
from felab.bench.__main__ import run_phases
from felab.bench.fidelity import LeanConnection, body, floor_rows, in_a_stall, server_process
from felab.bench.floor import FLOOR_TTFT_S
from felab.paths import KIT_ROOT


def test_every_phase_of_the_fidelity_bench_runs_at_a_tiny_size() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "felab.bench", "--tiny", "--phase", "fidelity"],
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


def test_the_held_out_phase_runs_every_kind_of_work_on_both_servers_and_sums_up_each_case() -> None:
    # At a tiny size the "real" server is a practice server with known settings: the phase
    # calibrates it, starts the twin, runs one round of each held-out kind on both, and prints
    # a row per kind and a summary per case. Nothing about timing is asserted (no speed here).
    from felab.bench.heldout import TPOT

    run = subprocess.run(
        [sys.executable, "-m", "felab.bench", "--tiny", "--phase", "heldout"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=KIT_ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    for kind in (
        "cold, ~270 tokens",
        "questions after an opening",
        "8-turn conversation, turns 2-8",
        "2 cold prompts at once",
        "4 cold prompts at once",
        TPOT,
        "warm question 100 ms behind a cold prompt",
    ):
        assert kind in out, f"missing: {kind}\n{out[-3000:]}"
    assert "calibrated in" in out
    # the profile's reference prompts, sent to the "real" server again before the rounds
    said = re.search(r"the reference prompts \(([\d,]+) tokens, cold\), before the rounds: ([\d.]+)x", out)
    assert said is not None and float(said[2]) > 0, out[-3000:]
    # and after them: the summary gives both
    after = re.search(r"the reference prompts \(([\d,]+) tokens, cold\), after the rounds: ([\d.]+)x", out)
    assert after is not None and after[1] == said[1], out[-3000:]
    summary = out.strip().splitlines()[-1].split()
    assert summary[0] == "known" and summary[2] == "of" and summary[3] == "10", out[-1500:]
    assert summary[-3:] == [f"{float(said[2]):.2f}x", "->", f"{float(after[2]):.2f}x"], out[-1500:]


def test_a_reference_that_moved_during_the_rounds_is_said_to_have_moved() -> None:
    from felab.bench.heldout import drift_note, speeds

    moved = drift_note(1.24, 0.93)  # 25% faster after than before
    assert moved is not None and moved.startswith(
        "the machine's speed moved during the rounds: the reference read 1.24x before them and 0.93x after"
    )
    assert "a miss of 25% or less may be the machine's" in moved
    assert drift_note(1.00, 1.08) is None  # within 10%
    assert drift_note(None, 1.5) is None and drift_note(1.5, None) is None  # no reference
    assert speeds(1.24, 0.93) == "1.24x -> 0.93x" and speeds(None, None) == "-"


def test_a_case_states_its_median_ttft_error_as_blis_states_its_own() -> None:
    # BLIS states its held-out TTFT error as a median of absolute errors; the summary gives the
    # twin's the same way, over the TTFT kinds only (a token gap is not a TTFT).
    from felab.bench.heldout import TPOT, summary_row, ttft_error
    from felab.calibrate.check import Row

    def row(kind: str, real: float, twin: float) -> Row:
        return Row(kind, 5, real, twin, real, twin)

    table = [row("cold", 100, 110), row("at once", 200, 160), row("questions", 20, 21), row(TPOT, 10, 20)]
    assert ttft_error(table) == pytest.approx(0.10)  # of 10%, 20% and 5%: not the gap's 100%
    assert ttft_error(table[:2]) == pytest.approx(0.15)
    line = summary_row("np4", table, {}, "1.00x")
    assert line["median TTFT error (BLIS 17.6%)"] == "10.0%"
    assert line["worst kind"] == TPOT and line["within target"] == "2 of 4"
    assert line["the real server against itself"] == "-"  # (one round: no halves to compare)


def test_a_case_says_how_often_the_real_server_met_the_target_against_itself() -> None:
    # Its even rounds' median against its odd ones', held to the twin's target: within 10%, or the
    # floor (5 ms; 0.5 ms for a token gap). 12% of 100 ms misses; 12% of 30 ms is 3.6 ms, within
    # the floor; 9% of 200 ms is within; a token gap 40% apart, 0.4 of 1 ms, is within its floor,
    # but one 15% apart of 5 ms (0.75 ms) is not: its floor is not a TTFT's 5 ms.
    from felab.bench.heldout import TPOT, summary_row
    from felab.calibrate.check import TPOT_FLOOR_MS, Row

    table = [
        Row("cold", 15, 100, 104, 100, 104, real_itself=0.12),
        Row("behind", 15, 100, 100, 100, 100, real_itself=None),
        Row("questions", 60, 30, 31, 30, 31, real_itself=0.12),
        Row(TPOT, 15, 1.0, 1.1, 1.0, 1.1, floor_ms=TPOT_FLOOR_MS, real_itself=0.4),
        Row(TPOT, 15, 5.0, 5.2, 5.0, 5.2, floor_ms=TPOT_FLOOR_MS, real_itself=0.15),
        Row("at once", 30, 200, 260, 200, 260, real_itself=0.09),
    ]
    assert [r.itself_within for r in table] == [False, None, True, True, False, True]
    line = summary_row("np4", table, {}, "1.00x")
    assert line["the real server against itself"] == "3 of 5"  # (the last row counted too)
    assert line["within target"] == "5 of 6"  # the twin: all but "at once" (+30%)


def test_the_model_the_kit_did_not_make_is_named_from_make_and_a_missing_one_says_how(tmp_path) -> None:
    # `make bench FELAB_OTHER_MODEL=other.gguf`, typed in 03-labs/: the phase runs in the kit's
    # folder, so the relative path is read from the folder typed in (FELAB_CALLER_DIR). Here the
    # file is not there: the case is left out, naming the path it looked at and how to name one.
    env = {**os.environ, "FELAB_OTHER_MODEL": "other.gguf", "FELAB_CALLER_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-m", "felab.bench.heldout", "--case", "other"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=KIT_ROOT,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (
        f"left out: no GGUF of a tiny model the kit did not make ({tmp_path / 'other.gguf'} is not a file)"
        in run.stdout
    )
    assert "make bench FELAB_OTHER_MODEL=/path/to/model.gguf" in run.stdout


def test_the_floor_server_answers_as_the_bench_expects() -> None:
    # The floor is a server of its own (floor.py): one SSE chunk with text, the prediction in a header.

    async def one(url: str) -> tuple[float, float, int]:
        conn = await LeanConnection(url).open()
        try:
            return await conn.stream(body(100, 1))
        finally:
            conn.close()

    with server_process("felab.bench.floor") as (url, _):
        measured, predicted, chunks = asyncio.run(one(url))
    assert predicted == FLOOR_TTFT_S * 1000 and chunks == 1
    assert measured >= predicted  # it never answers before its time


def test_the_stall_watcher_sees_the_machine_stop_it() -> None:
    # A stopped process is what a paused machine looks like from inside: stopped for 150 ms
    # (SIGSTOP, SIGCONT), the watcher reports one stall at least that long, overlapping the
    # stop. Lower bounds only: a busy machine can make it longer, never shorter.
    watcher = subprocess.Popen(
        [sys.executable, "-m", "felab.bench.stalls"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)  # started, and sleeping in its loop
    stopped = time.monotonic()
    os.kill(watcher.pid, signal.SIGSTOP)
    time.sleep(0.15)
    os.kill(watcher.pid, signal.SIGCONT)
    resumed = time.monotonic()
    time.sleep(0.1)
    out, _ = watcher.communicate(timeout=10)
    stalls = [tuple(map(float, line.split())) for line in out.splitlines()]
    assert any(end - start >= 0.14 and start < resumed and end > stopped for start, end in stalls), stalls


def test_the_floor_phase_leaves_out_the_requests_in_flight_during_a_stall_for_both_servers() -> None:
    def record(server: str, sent_at: float, error_ms: float) -> dict:
        return {
            "server": server,
            "streams": 64,
            "sent_at": sent_at,
            "measured_ms": 50 + error_ms,
            "predicted_ms": 50,
        }

    calm = [record(name, t, 1.0) for name in ("practice", "floor") for t in range(0, 100)]
    caught = [record("practice", 1000.0, 40.0)] * 5 + [record("floor", 2000.0, 30.0)] * 5  # in a stall
    stalls = [(1000.02, 1000.06), (2000.01, 2000.04)]
    (row,) = floor_rows(calm + caught, stalls)
    assert row["requests"] == 105 and row["left_out"] == 5
    assert row["practice_p99_ms"] == row["floor_p99_ms"] == 1.0  # both left out: the calm ones remain
    (kept,) = floor_rows(calm + caught)  # no stalls seen: every request counts
    assert kept["practice_p99_ms"] > 1.0 and kept["floor_p99_ms"] > 1.0
    # A stall that takes every request of one server leaves nothing to compare: none is left out.
    (whole,) = floor_rows(calm[:100] + caught[5:], [(-1.0, 1e9)])
    assert whole["left_out"] == 0 and whole["practice_p50_ms"] == 1.0 and whole["floor_p99_ms"] > 1.0
    assert in_a_stall(record("floor", 999.99, 1.0), stalls)  # in flight from 999.99 to 1000.04
    assert not in_a_stall(record("floor", 999.0, 1.0), stalls)


def test_every_runnable_module_of_the_bench_is_a_phase_and_each_phase_is_run_by_a_test() -> None:
    # A phase module (one with a command line) that is not in PHASES would be left out of make bench;
    # floor.py and stalls.py are servers the fidelity phase starts, not phases.
    helpers = {"floor", "stalls", "__main__"}
    runnable = {
        p.stem
        for p in (KIT_ROOT / "felab" / "bench").glob("*.py")
        if 'if __name__ == "__main__":' in p.read_text(encoding="utf-8")
    }
    assert runnable - helpers == {p.module for p in PHASES}
    tests = " ".join(p.read_text(encoding="utf-8") for p in (KIT_ROOT / "tests").rglob("test_*.py"))
    runs = ('"--tiny", "--phase", "{}"', '"-m", "felab.bench.{}"')  # through the runner, or the phase alone
    untested = [p.module for p in PHASES if not any(run.format(p.module) in tests for run in runs)]
    assert not untested, f"no test runs `python -m felab.bench --tiny --phase NAME` for {untested}"


def test_the_runner_goes_on_past_a_phase_that_fails_and_names_each_failed_one() -> None:
    # Two phases whose modules do not exist: python exits 1 for each; both are tried and named.
    failed = run_phases([Phase("no_such_phase_a"), Phase("no_such_phase_b")], tiny=True)
    assert failed == ["no_such_phase_a", "no_such_phase_b"]


def test_make_bench_runs_the_runner() -> None:
    makefile = (KIT_ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert "-m felab.bench\n" in recipe + "\n" and recipe.count("$(PY)") == 1, recipe
