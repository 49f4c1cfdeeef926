"""Real-time replay against a practice server started for real: it agrees with the virtual replay.

The same excerpt of the kit's Mooncake trace goes through both modes with the same settings:
once booked in the model on a virtual clock, once sent over HTTP with the official `openai`
client to a practice server that `--target mock` starts with those settings (512-token blocks
included). `--speed 5` keeps it short; `--prefill-tps 200000` keeps the queue to about a
second at most (the trace comes in bursts), so the comparison is about the model, not a
backlog; `--max-tokens 4` spares the two cores of the test machine a few thousand streamed
chunks that TTFT does not depend on.

Margins, and why they are wide. Token counts must agree closely: the synthesised text gives
the server exactly the trace's blocks (prompt tokens may be up to 4 more per request, see
felab/replay/synth.py), and the cache sees the same prefixes, but requests with the same
timestamp leave on different threads and may reach the server in either order, which can
move a shared block from one to the other (1.5 points of hit rate allowed). TTFT measured
over HTTP adds the client's and the server's own work (a few ms, docs/benchmarks.md) and a
late send shifts a request against the queue: a burst of requests with one timestamp leaves
over up to ~150 ms on a busy 2-core machine (each waits for the others' client work), and a
request sent late is measured from when it left, so it reads shorter by about its lag (seen
here: p50 378 ms measured against 493 modelled, with a p99 send lag of 131 ms). So: p50 and
p95 within 40% or 150 ms, whichever is larger. Bugs this is here to catch are far bigger: a
server on the default 2,500 tokens/s would read 80 times slower, blocks that do not line up
would show in the hit rate.
"""

from __future__ import annotations

import json

from conftest import run_felab

from felab.connect import client
from felab.mock_server.launch import practice_server
from felab.streaming import stream_once
from felab.targets import Target

EXCERPT = ("--limit", "60", "--speed", "5", "--prefill-tps", "200000", "--max-tokens", "4", "--json")


def near(measured: float, modelled: float, share: float, floor_ms: float) -> bool:
    return abs(measured - modelled) <= max(share * modelled, floor_ms)


def test_real_time_against_the_practice_server_agrees_with_virtual_time() -> None:
    virtual = run_felab("replay", *EXCERPT)
    real = run_felab("replay", *EXCERPT, "--target", "mock", timeout=120)
    assert virtual.returncode == 0, virtual.stderr
    assert real.returncode == 0, real.stderr
    v, r = json.loads(virtual.stdout), json.loads(real.stdout)
    assert (v["mode"], r["mode"]) == ("virtual time", "real time")
    assert r["requests"] == v["requests"] == 60 and r["failed"] == 0
    assert v["prompt_tokens"] <= r["prompt_tokens"] <= v["prompt_tokens"] + 4 * 60
    assert r["cached_tokens"] % 512 == 0  # the server cached whole 512-token blocks (--block-tokens)
    assert abs(r["hit_pct"] - v["hit_pct"]) <= 1.5, (r["hit_pct"], v["hit_pct"])
    assert near(r["ttft_p50_ms"], v["ttft_p50_ms"], 0.40, 150), (r["ttft_p50_ms"], v["ttft_p50_ms"])
    assert near(r["ttft_p95_ms"], v["ttft_p95_ms"], 0.40, 150), (r["ttft_p95_ms"], v["ttft_p95_ms"])
    assert r["send_lag_p99_ms"] is not None and r["queue_p50_ms"] is None  # what a client cannot see


def test_sessions_go_out_as_user_so_the_servers_affinity_routes_them(tmp_path) -> None:
    trace = tmp_path / "agent.jsonl"
    made = run_felab(
        "agent-trace", str(trace), "--sessions", "6", "--rate", "2", "--turns", "3", "--idle-share", "0"
    )
    assert made.returncode == 0, made.stderr
    flags = ("--replicas", "4", "--route", "affinity", "--speed", "8", "--max-tokens", "4", "--json")
    v = json.loads(run_felab("replay", str(trace), *flags).stdout)
    real = run_felab("replay", str(trace), *flags, "--target", "mock", timeout=120)
    assert real.returncode == 0, real.stderr
    r = json.loads(real.stdout)
    # every turn after a session's first finds its history on its replica, in both modes
    assert v["same_replica_pct"] == 100 and abs(r["hit_pct"] - v["hit_pct"]) <= 1.0, (
        r["hit_pct"],
        v["hit_pct"],
    )


def test_the_practice_server_caches_blocks_of_block_tokens() -> None:
    text = "x" * 4 * 1300  # 1,300 tokens of text; with the chat template, 1,306
    with practice_server("--block-tokens", "512") as url:
        api = client(Target("mock", url, "felab-practice", "not-needed", False))
        stream_once(api, "felab-practice", [{"role": "user", "content": text}], max_tokens=1)
        again = stream_once(api, "felab-practice", [{"role": "user", "content": text}], max_tokens=1)
    assert again.prompt_tokens == 1306 and again.cached_tokens == 1024  # 2 full blocks of 512, not 20 of 64


def test_failed_requests_are_counted_not_timed(isolated) -> None:
    flags = (
        "--fail-rate",
        "0.5",
        "--fail-types",
        "500",
        "--seed",
        "3",
        "--block-tokens",
        "512",
        "--prefill-tps",
        "1e6",
    )
    with practice_server(*flags) as url:
        out = run_felab("replay", "--limit", "20", "--speed", "50", "--max-tokens", "2", "--target", "mock",
                        "--base-url", url)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "request(s) failed and are not in the figures; the first: The mock server failed" in out.stdout
    rows = [json.loads(line) for line in (isolated / "replay.jsonl").read_text().splitlines()]
    assert 0 < rows[-1]["failed"] < 20 and rows[-1]["requests"] + rows[-1]["failed"] == 20


def test_a_refusal_is_advised_for_the_longest_prompt_not_only_the_first(isolated) -> None:
    # A server of 8,192 tokens: the first prompt refused was advised a restart at 16,384 or
    # 32,768, which still refuses the longest (87,169 tokens); its own advice is shown too.
    replay = ("replay", "--speed", "50", "--max-tokens", "2", "--target", "mock", "--base-url")
    with practice_server("--context-tokens", "8192", "--prefill-tps", "1e6", "--block-tokens", "512") as url:
        some = run_felab(*replay, url, "--limit", "20")
    assert some.returncode == 0, some.stderr
    assert "The longest prompt that failed has 87,169 tokens (by the trace), and failed with: " in some.stdout
    assert "start it with room for 131,072 tokens" in some.stdout and "Traceback" not in some.stderr
    with practice_server("--context-tokens", "4096", "--prefill-tps", "1e6", "--block-tokens", "512") as url:
        every = run_felab(*replay, url, "--limit", "3")  # 6,758, 7,322 and 7,236 tokens: none fits
    assert every.returncode == 2 and "Every request of the replay failed; the first: " in every.stderr, (
        every.stderr
    )
    assert "The longest prompt that failed has 7,322 tokens (by the trace)" in every.stderr
