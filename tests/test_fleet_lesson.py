"""Lesson 06's affinity_bench.py, run as a learner runs it: its own practice servers with 18 replicas."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import LESSON06, run_script

AFFINITY_BENCH = LESSON06 / "affinity_bench.py"


def rows(results: Path) -> dict[str, dict]:
    lines = (results / "06-affinity.jsonl").read_text().splitlines()
    return {row["mode"]: row for row in map(json.loads, lines)}


def test_affinity_keeps_the_history_cached_and_random_routing_does_not(isolated: Path) -> None:
    out = run_script(AFFINITY_BENCH, "--sessions", "4", "--turns", "4", timeout=180)
    assert out.returncode == 0, out.stderr
    got = rows(isolated)
    assert set(got) == {"no session value", "user = session id", "prefix-aware router"}
    # Wide margins: with 18 replicas random routing finds a session's history ~1 time in 18.
    assert got["user = session id"]["history_hit_pct"] > 80
    assert got["prefix-aware router"]["history_hit_pct"] > 80
    assert got["no session value"]["history_hit_pct"] < 40
    assert got["user = session id"]["ttft_p50_ms"] < got["no session value"]["ttft_p50_ms"]
    assert "history_hit_pct" in out.stdout and "ttft_p95_ms" in out.stdout
    counts = re.findall(
        r"/metrics: ([\d,]+) of ([\d,]+) prompt tokens hit · usage: ([\d,]+) of ([\d,]+)", out.stdout
    )
    assert len(counts) == 3 and all(
        hits == cached and queries == prompt for hits, queries, cached, prompt in counts
    )


def test_expiry_mode_shows_the_first_turn_after_idle_cold(isolated: Path) -> None:
    out = run_script(AFFINITY_BENCH, "--mode", "expiry", "--sessions", "2", "--turns", "3", "--ttl", "1")
    assert out.returncode == 0, out.stderr
    got = rows(isolated)
    busy, idle = got["busy (turns 2 on)"], got["after 2 s idle"]
    assert busy["history_hit_pct"] > 80 and idle["history_hit_pct"] < 20


def test_quick_mode_against_a_given_server_compares_with_and_without_user(
    mock_url: str, isolated: Path
) -> None:
    out = run_script(AFFINITY_BENCH, "--target", "mock", "--base-url", mock_url, "--quick")
    assert out.returncode == 0, out.stderr
    assert set(rows(isolated)) == {"no session value", "user = session id"}  # one replica: both cached
