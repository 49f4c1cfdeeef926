"""Load as the routers count it (in-flight tokens over time), and the prefix route's balance on
traces it was not tuned on (issue 30, point 4).

The traces are made here (the kit's agent trace and shapes.py's, a few minutes of each) and
replayed in virtual time through the booking core, as `felab replay` does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from felab.mock_server.config import DEFAULTS
from felab.prices import PRICES
from felab.replay import agent, balance, trace, virtual
from felab.replay.tally import Tally, summary


def test_the_load_is_in_flight_tokens_averaged_over_the_window() -> None:
    t = Tally()
    t.held(0, 2, tokens=1000, start_s=0.0, end_s=2.0)  # 2,000 token-seconds
    t.held(1, 2, tokens=500, start_s=1.0, end_s=2.0)  # 500
    assert t.in_flight() == [1000.0, 250.0]  # over the window 0..2 s
    row = summary(t, t.in_flight(), PRICES[balance.PRICED], 1.0)
    assert row["load_max_over_mean"] == pytest.approx(1000 / 625)


def test_equal_requests_per_replica_can_still_be_unequal_load(tmp_path: Path) -> None:
    """Round-robin over 2 replicas, prompts of 1 and 16 blocks in turn: each replica serves as many
    requests (the old figure: 1.00), but one holds 16 times the tokens, for longer."""
    lines = [
        {"timestamp": 1000 * i, "input_length": 512 * (16 if i % 2 else 1), "output_length": 20,
         "hash_ids": [10_000 * i + j for j in range(16 if i % 2 else 1)]}
        for i in range(20)
    ]  # fmt: skip
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    s = replace(DEFAULTS, replicas=2, route="round-robin", block_tokens=512)
    tally, loads, _ = virtual.replay(path, trace.read_trace(path, None, progress=False), s)
    row = summary(tally, loads, PRICES[balance.PRICED], 1.0)
    assert row["load_max_over_mean"] > 1.5, row  # requests alone: 10 and 10, 1.00


@pytest.fixture(scope="module")
def short_traces(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """5 minutes of the agent trace and of the openings shape, 16 replicas, each route."""
    return balance.rows(["agent", "openings"], [16], tmp_path_factory.mktemp("balance"), minutes=5)


@pytest.mark.parametrize("name", ["agent", "openings"])
def test_the_prefix_route_balances_traces_it_was_not_tuned_on(short_traces: list[dict], name: str) -> None:
    """Before: load max/mean 3.59 (agent) and 2.04 (openings) here, as the route piled sessions
    and shared openings on the replicas that held them; random's is 1.09 and 1.14."""
    got = {r["route"]: r for r in short_traces if r["trace"] == name}
    prefix, rand = got["prefix"], got["random"]
    assert prefix["load"] <= 1.5, prefix
    assert prefix["hit_pct"] > rand["hit_pct"] and prefix["ttft_p95_ms"] <= rand["ttft_p95_ms"], got


def test_the_balance_check_prints_its_table_and_targets(tmp_path: Path) -> None:
    out = run_felab_module(
        "--traces", "bursts", "--replicas", "8", "--minutes", "2", "--folder", str(tmp_path)
    )
    assert out.returncode == 0, out.stderr
    assert "| bursts | 8 | prefix |" in out.stdout and "bursts, 8: prefix load max/mean" in out.stdout
    bad = run_felab_module("--traces", "nope")
    assert bad.returncode == 2 and "unknown trace 'nope'" in bad.stderr and "Traceback" not in bad.stderr


def run_felab_module(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m felab.replay.balance ARGS`, as a learner runs it."""
    command = [sys.executable, "-m", "felab.replay.balance", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_few_sessions_on_many_replicas_keep_their_replica(tmp_path: Path) -> None:
    """Lesson 06's shape: 8 agent sessions on 18 replicas. Every replica holding a session is far
    above the mean (most replicas hold none), but moving a session would only lose its history:
    the absolute threshold (`Weights.balance_abs`) keeps it. With the relative threshold alone the
    route moved every session at every turn (lesson 06's bench: 0% of the history found)."""
    path = tmp_path / "few.jsonl"
    with path.open("w", encoding="utf-8") as out:
        agent.write(agent.AgentShape(sessions=8, rate=4.0, turns=6, idle_share=0.0), out)
    s = replace(DEFAULTS, replicas=18, route="prefix", block_tokens=64)
    tally, loads, _ = virtual.replay(path, trace.read_trace(path, None, progress=False), s)
    row = summary(tally, loads, PRICES[balance.PRICED], 1.0)
    assert row["same_replica_pct"] > 90, row
