"""The replay's report reads as a person expects: seconds once milliseconds run long, a cost column
that says what it counts, `n/a` under the numbers, progress as each configuration of a parallel
sweep ends, and a picture for a single configuration too."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from pathlib import Path

from conftest import run_felab
from test_replay import session_trace

from felab.mock_server.config import DEFAULTS
from felab.replay import parallel, report
from felab.tables import table


def row(ttft_ms: float, **more: object) -> dict:
    r = {"replicas": 1, "route": "affinity", "cache_blocks": 4096, "requests": 10, "prompt_tokens": 100}
    r |= {"cached_tokens": 50, "hit_pct": 50.0, "cost_list_usd": 1.0, "cost_cached_usd": 0.5}
    r |= {"ttft_p50_ms": ttft_ms, "ttft_p95_ms": ttft_ms, "ttft_p99_ms": ttft_ms, "span_s": 1.0}
    return r | dict(more)


def test_ttft_past_10000_ms_is_shown_in_seconds_and_the_heading_says_so() -> None:
    overloaded = report.one_table([row(25_949_037.0), row(900.0)], [], report.TIMES)
    assert "25,949,037" not in overloaded and "25,949.0" in overloaded
    assert "TTFT p50" in overloaded and "\n" in overloaded
    heading = overloaded.splitlines()[1]
    assert " s " in f" {heading} " and " ms " not in f" {heading.split('load')[0]} "
    calm = report.one_table([row(900.0)], [], report.TIMES)
    assert "900" in calm and "ms" in calm.splitlines()[1]  # milliseconds while they stay short


def test_the_cost_columns_say_they_count_prompt_tokens() -> None:
    found = report.one_table([row(900.0)], [], report.FOUND)
    assert "$ prompt tokens" in found and "$ at list" not in found


def test_a_missing_value_stands_right_aligned_under_the_numbers() -> None:
    lines = table([{"name": "a", "ms": 1234.5}, {"name": "bb", "ms": None}]).splitlines()
    assert lines[2].endswith("1234.5") and lines[3].endswith("n/a")
    shown = report.one_table([row(900.0), row(900.0, cost_list_usd=None)], [], report.FOUND).splitlines()
    assert shown[-1].split("n/a")[0].rstrip() != shown[-1].split("n/a")[0]  # n/a after padding ...
    cost = shown[-2].index("1.00") + len("1.00")
    assert shown[-1].index("n/a") + len("n/a") == cost  # ... ending where the number above ends


def test_a_parallel_sweep_says_each_configuration_is_done_as_it_ends() -> None:
    # The second configuration ends first: it is told at once, while the first still runs
    # (a sweep that told them in order would say nothing until its slowest, first one ended).
    first, second = cf.Future(), cf.Future()
    second.set_result("row 2")
    told: list[str] = []

    def say(event: str, s: object) -> None:
        told.append(f"{event} {'first' if s is a else 'second'}")
        if s is b:
            first.set_result("row 1")  # the first ends only after the second was told

    a, b = DEFAULTS, DEFAULTS.__class__(replicas=2)
    rescue = threading.Timer(5, lambda: first.done() or first.set_result("row 1"))  # the old order: no hang
    rescue.start()
    rows = list(parallel.collect([first, second], [a, b], say))
    rescue.cancel()
    assert rows == ["row 1", "row 2"] and told == ["done second", "done first"]


def test_a_single_configuration_gets_a_picture_too(tmp_path: Path, isolated: Path) -> None:
    path = session_trace(tmp_path, sessions=2, turns=2)
    out = run_felab("replay", str(path))
    assert out.returncode == 0, out.stderr
    assert "picture: " in out.stdout and (isolated / "replay.png").stat().st_size > 10_000


def test_a_parallel_sweep_prints_done_k_of_n() -> None:
    out = run_felab("replay", "--limit", "100", "--replicas", "1,2", "--jobs", "2")
    assert out.returncode == 0, out.stderr
    assert "done 1 of 2: " in out.stderr and "done 2 of 2: " in out.stderr
