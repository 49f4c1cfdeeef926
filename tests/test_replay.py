"""Trace replay in virtual time: hit rates worked out by hand, the format's bad input, sweeps, agent traces.

The hand-made traces use Mooncake's 512-token blocks (so the block size is worked out from
them, as from the real trace) and requests far enough apart that nothing queues, so every
TTFT is the timing model's 15 ms + uncached tokens / 2,500 tokens a second.
"""

from __future__ import annotations

import gc
import io
import json
import math
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_felab

from felab.errors import FelabError
from felab.mock_server.cache import block_keys, tokenize
from felab.mock_server.config import Settings
from felab.mock_server.wire import Message, chat_template
from felab.prices import PRICES
from felab.replay import agent, synth, trace, virtual
from felab.replay.collections_paused import REPLAY_THRESHOLD
from felab.replay.command import PRICED
from felab.replay.tally import summary

B = 512


def line(at_s: float, ids: list[int], tokens: int | None = None, session: str | None = None) -> dict:
    """One request; `tokens` defaults to full blocks only."""
    row = {"timestamp": round(at_s * 1000), "input_length": tokens or B * len(ids), "output_length": 8}
    row["hash_ids"] = ids
    if session:
        row["session_id"] = session
    return row


def write(tmp_path: Path, rows: list[dict], name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run(path: Path, **settings: object) -> dict:
    """The virtual replay's summary row for these settings (the rest: the server's defaults)."""
    s = Settings(block_tokens=trace.block_tokens(path), **settings)  # type: ignore[arg-type]  (tests only)
    tally, loads, wall = virtual.replay(path, trace.read_trace(path), s)
    return summary(tally, loads, PRICES[PRICED], wall)


# ── Hit rates known by hand ──


def test_shared_prefixes_hit_as_far_as_the_leading_ids_agree(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            line(0, [1, 2]),  # 1,024 tokens, nothing cached
            line(10, [1, 2, 3]),  # finds blocks 1, 2: 1,024 cached
            line(20, [1, 4], tokens=1000),  # one full block (1 000 // 512), found: 512 cached
            line(30, [5, 6], tokens=600),  # shares nothing
        ],
    )
    row = run(path)
    assert (row["prompt_tokens"], row["cached_tokens"]) == (4160, 1536)
    assert row["hit_pct"] == pytest.approx(100 * 1536 / 4160)
    # TTFT = 15 ms + uncached / 2.5 per ms: 424.6, 219.8, 210.2 and 255 ms; the median of four
    assert row["ttft_p50_ms"] == pytest.approx((219.8 + 255.0) / 2)
    assert row["queue_p95_ms"] == 0
    assert row["span_s"] == 30


def test_a_full_cache_evicts_the_least_recently_used(tmp_path: Path) -> None:
    path = write(tmp_path, [line(0, [1, 2]), line(10, [3, 4]), line(20, [1, 2])])
    assert run(path, cache_blocks=2)["cached_tokens"] == 0  # [3, 4] pushed [1, 2] out
    assert run(path, cache_blocks=4)["cached_tokens"] == 1024


def test_blocks_expire_after_the_ttl_in_trace_time(tmp_path: Path) -> None:
    path = write(tmp_path, [line(0, [1, 2]), line(30, [1, 2, 3]), line(200, [1, 2])])
    assert run(path)["cached_tokens"] == 2048
    assert run(path, cache_ttl_s=60.0)["cached_tokens"] == 1024  # last used at ~30 s: gone by 200 s


def session_trace(tmp_path: Path, sessions: int, turns: int) -> Path:
    """Sessions whose turn t resends turns 0..t: ids s*100 + 0..t, all full blocks; turns 1,000 s apart."""
    rows = [
        line(1000 * t + s, [s * 100 + i for i in range(t + 1)], session=f"s{s}")
        for t in range(turns)
        for s in range(sessions)
    ]
    return write(tmp_path, rows)


def test_affinity_finds_all_history_and_round_robin_half_of_it(tmp_path: Path) -> None:
    one = session_trace(tmp_path, sessions=1, turns=4)  # prompts of 1, 2, 3, 4 blocks: 5,120 tokens
    assert run(one, replicas=2, route="affinity")["cached_tokens"] == B * (0 + 1 + 2 + 3)
    # round-robin: turn t lands on replica t % 2, where turn t-2 left t-1 blocks
    assert run(one, replicas=2, route="round-robin")["cached_tokens"] == B * (0 + 0 + 1 + 2)


def test_at_random_a_session_reaches_its_last_replica_about_one_time_in_n(tmp_path: Path) -> None:
    path = session_trace(tmp_path, sessions=200, turns=10)  # 1,800 turns that follow another
    affinity = run(path, replicas=18, route="affinity")
    random_ = run(path, replicas=18, route="random")
    assert affinity["same_replica_pct"] == 100
    assert affinity["hit_pct"] == pytest.approx(100 * 9 / 11)  # (T-1)/(T+1) for T = 10 turns
    # 1 in 18 is 5.6%; 1,800 draws: a binomial sd of 0.54 points, so 3 to 8.5 is over 4 sd each side
    assert 3.0 < random_["same_replica_pct"] < 8.5
    assert random_["hit_pct"] < affinity["hit_pct"] / 2


# ── The real trace and its format ──


def test_mooncake_ids_chain_and_its_blocks_are_512_tokens() -> None:
    assert trace.block_tokens(trace.MOONCAKE) == 512
    first = next(trace.read_trace(trace.MOONCAKE))
    assert first.input_tokens == 6758 and len(first.hash_ids) == math.ceil(6758 / 512)
    assert virtual.prompt_of(first, 512).keys == first.hash_ids[:13]  # the partial 14th is not cached


def test_an_undecidable_block_size_asks_for_the_flag(tmp_path: Path) -> None:
    path = write(tmp_path, [line(0, [1], tokens=100)])  # 1 id for 100 tokens: 128, 256, ... all fit
    with pytest.raises(Exception, match="--block-tokens"):
        trace.block_tokens(path)


BAD = [
    ('{"timestamp": 0, "input_length": 512, "output_length": 1}', "line 2: the field `hash_ids` is missing"),
    (
        '{"timestamp": 0, "input_length": -5, "output_length": 1, "hash_ids": [1]}',
        "line 2: `input_length` must",
    ),
    (
        '{"timestamp": -1, "input_length": 512, "output_length": 1, "hash_ids": [1]}',
        "line 2: `timestamp` must",
    ),
    ("not json at all", "line 2: not JSON"),
    (
        '{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1, 2, 3]}',
        "line 2: 3 hash_ids",
    ),
]


@pytest.mark.parametrize(("bad", "says"), BAD)
def test_a_bad_line_is_one_message_naming_it(tmp_path: Path, bad: str, says: str) -> None:
    good = json.dumps(line(0, [1]))
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{good}\n{bad}\n{good}\n", encoding="utf-8")
    out = run_felab("replay", str(path), "--block-tokens", "512")
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: ") and says in out.stderr
    assert "--limit 1" in out.stderr  # how to replay what comes before it
    assert "Traceback" not in out.stderr


def test_unsorted_timestamps_and_an_empty_file_are_one_message_each(tmp_path: Path) -> None:
    path = tmp_path / "unsorted.jsonl"  # a blank line counts as a line of the file, not as a request
    path.write_text(f"{json.dumps(line(5, [1]))}\n\n{json.dumps(line(2, [1]))}\n", encoding="utf-8")
    out = run_felab("replay", str(path))
    assert out.returncode == 2 and "line 3: `timestamp` 2000 is earlier than the line before it" in out.stderr
    assert "To replay the 1 request before it, add `--limit 1`." in out.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    out = run_felab("replay", str(empty))
    assert out.returncode == 2 and "holds no requests" in out.stderr and "Traceback" not in out.stderr
    out = run_felab("replay", str(tmp_path / "nowhere.jsonl"))
    assert out.returncode == 2 and "There is no trace at" in out.stderr


def test_a_replay_scans_for_garbage_less_often_and_puts_the_collector_back(tmp_path: Path) -> None:
    # The collector's threshold is the replay's while it books (collections_paused.py), and is
    # the program's again after, also when a bad line stops the replay half way.
    good, bad = json.dumps(line(0, [1])), '{"timestamp": 0, "input_length": 512}'
    path = tmp_path / "half.jsonl"
    path.write_text(f"{good}\n{good}\n{bad}\n", encoding="utf-8")
    before, seen = gc.get_threshold(), []

    def requests() -> Iterator[trace.TraceRequest]:
        for request in trace.read_trace(path):
            seen.append((gc.get_threshold()[0], gc.get_freeze_count() > 0))
            yield request

    with pytest.raises(FelabError, match="line 3: the field `output_length` is missing"):
        virtual.replay(path, requests(), Settings(block_tokens=512))
    assert seen == [(REPLAY_THRESHOLD, True)] * 2
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


# ── The command ──


def test_json_rows_are_recorded_and_a_sweep_is_every_combination(tmp_path: Path, isolated: Path) -> None:
    path = session_trace(tmp_path, sessions=3, turns=3)
    out = run_felab("replay", str(path), "--replicas", "1,2", "--route", "random,affinity", "--json")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(r) for r in out.stdout.splitlines()]
    assert [(r["replicas"], r["route"]) for r in rows] == [
        (1, "random"),
        (1, "affinity"),
        (2, "random"),
        (2, "affinity"),
    ]
    for key in ("requests", "prompt_tokens", "cached_tokens", "hit_pct", "ttft_p50_ms", "ttft_p95_ms",
                "ttft_p99_ms", "wall_s"):  # fmt: skip
        assert all(key in r for r in rows), key
    recorded = [json.loads(r) for r in (isolated / "replay.jsonl").read_text().splitlines()]
    assert (
        len(recorded) == 4 and recorded[0]["target"] == "virtual" and recorded[0]["model"] == "felab-practice"
    )


def test_the_table_names_the_prices_and_a_sweep_draws_its_picture(tmp_path: Path, isolated: Path) -> None:
    path = session_trace(tmp_path, sessions=3, turns=3)
    out = run_felab("replay", str(path), "--cache-blocks", "0,unlimited", "--cache-ttl", "never,60")
    assert out.returncode == 0, out.stderr
    assert "gpt-oss-120b on Fireworks" in out.stdout and "$0.15 per 1M input tokens" in out.stdout
    assert "unlimited" in out.stdout and "never" in out.stdout
    assert (isolated / "replay-cache-blocks.png").stat().st_size > 10_000


def test_a_bad_flag_value_is_a_usage_error(tmp_path: Path) -> None:
    path = session_trace(tmp_path, sessions=1, turns=2)
    out = run_felab("replay", str(path), "--route", "random,nearest")
    assert out.returncode == 2 and "route must be one of" in out.stderr


def test_a_paid_target_needs_a_limit() -> None:
    out = run_felab("replay", "--target", "fireworks")
    assert out.returncode == 2 and "--limit" in out.stderr and "Traceback" not in out.stderr


# ── Text for hash ids, and the agent trace ──


def server_view(text: str, block: int) -> tuple[int, list[int]]:
    """What the practice server makes of a user message: its token count and block keys."""
    tokens = tokenize(chat_template([Message(role="user", content=text)]))
    return len(tokens), block_keys(tokens, block)


@pytest.mark.parametrize("tokens", [64 * 3, 64 * 3 + 3, 64 * 3 + 4, 64 * 3 + 40, 30])
def test_equal_ids_become_equal_server_blocks_of_the_right_length(tokens: int) -> None:
    ids = list(range(math.ceil(tokens / 64)))
    request = trace.TraceRequest(1, 0, 0.0, tokens, 1, ids)
    longer = trace.TraceRequest(2, 1, 0.0, tokens + 128, 1, [*ids[: tokens // 64], 90, 91, 92])
    n, keys = server_view(synth.prompt_text(request, 64), 64)
    _, longer_keys = server_view(synth.prompt_text(longer, 64), 64)
    # exact, except up to 4 tokens more when the template's tail has no room (input % block < 4)
    assert n == tokens if tokens % 64 >= 4 or tokens < 64 else tokens < n <= tokens + 4
    assert len(keys) == tokens // 64 and keys == longer_keys[: len(keys)]
    if keys:  # a different first id: a different first block, so nothing after it matches either
        other = trace.TraceRequest(3, 2, 0.0, tokens, 1, [70, *ids[1:]])
        assert not set(server_view(synth.prompt_text(other, 64), 64)[1]) & set(keys)


def test_the_agent_trace_is_deterministic_sorted_and_mostly_repeats(tmp_path: Path) -> None:
    shape = agent.AgentShape(sessions=30, rate=1.0, turns=6)
    first, again = io.StringIO(), io.StringIO()
    totals = agent.write(shape, first)
    agent.write(shape, again)
    assert first.getvalue() == again.getvalue()
    assert totals.repeated_tokens / totals.prompt_tokens > 0.8
    path = tmp_path / "agent.jsonl"
    path.write_text(first.getvalue(), encoding="utf-8")
    assert trace.block_tokens(path) == 64
    rows = list(trace.read_trace(path))  # checked: sorted, well formed
    assert len(rows) == totals.requests and len({r.session for r in rows}) == 30
    assert all(list(r.hash_ids[:47]) == list(range(47)) for r in rows)  # the shared opening's full blocks
    row = run(path, replicas=4, route="affinity")
    assert row["same_replica_pct"] == 100 and row["hit_pct"] > 80


def test_agent_trace_command_writes_a_trace_that_replays(isolated: Path) -> None:
    out = run_felab("agent-trace", "--sessions", "5", "--turns", "3")
    assert out.returncode == 0, out.stderr
    assert (isolated / "agent-trace.jsonl").is_file() and "replay it: python -m felab replay" in out.stdout
    out = run_felab("replay", str(isolated / "agent-trace.jsonl"), "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["block_tokens"] == 64


def test_a_server_that_is_down_fails_every_request_with_one_message() -> None:
    from felab.mock_server.launch import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    out = run_felab("replay", "--target", "llamacpp", "--base-url", url, "--model", "m", "--limit", "3")
    assert out.returncode == 2, out.stderr
    assert "Every request of the replay failed; the first: Could not connect" in out.stderr
    assert "Traceback" not in out.stderr


def test_base_url_without_a_target_is_a_usage_error() -> None:
    out = run_felab("replay", "--base-url", "http://127.0.0.1:9/v1", "--limit", "1")
    assert out.returncode == 2 and "--base-url is for real time" in out.stderr


def test_the_trace_is_streamed_so_limit_stops_before_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "tail.jsonl"
    path.write_text(f"{json.dumps(line(0, [1]))}\n{json.dumps(line(1, [1, 2]))}\nbroken\n", encoding="utf-8")
    out = run_felab("replay", str(path), "--limit", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["requests"] == 2


def test_a_fleet_that_cannot_keep_up_is_told_so() -> None:
    slow = run_felab("replay", "--limit", "2000")  # one replica at 2,500 tokens/s: about 15 times too slow
    assert slow.returncode == 0, slow.stderr
    assert "this configuration cannot keep up" in slow.stdout
    assert "requests were waiting or running at once (a replay holds each" in slow.stdout
    fast = run_felab("replay", "--limit", "2000", "--prefill-tps", "1000000")
    assert fast.returncode == 0 and "cannot keep up" not in fast.stdout


def test_prefill_busy_is_the_busiest_lanes_not_the_fleets_average() -> None:
    # Two lanes of 10 tokens/s over 10 s; one prefilled 100 uncached tokens, the other none:
    # that lane was busy all the time (100%), though the fleet on average was half idle.
    from felab.replay.tally import Tally, busy_pct

    t = Tally(lane_uncached=[100, 0])
    assert busy_pct(t, uncached=100, capacity_tps=20, span=10) == 100
    assert busy_pct(Tally(), uncached=100, capacity_tps=20, span=10) == 50  # lanes unseen: the average


def test_an_overloaded_replay_holds_little_per_request_it_has_not_finished(tmp_path: Path) -> None:
    # Prompts of 200 blocks, all in one second, one replica at 2,500 tokens/s: every request is
    # still queued when the trace ends, so the replay holds all of them. Their ids used to be a
    # list of Python ints each (about 9 KB a request); now an array('q'), dropped once booked,
    # and what stays is the core's booking and lane turn (about 0.75 KB). Measured as the extra
    # memory 3,000 more requests take (the chunk and the cache cost the same for both); margin
    # 1.5 KB a request (the ids alone, kept, would be 1.6 KB).

    def peak(n: int) -> int:
        rows = [line(i / n, list(range(i * 200, (i + 1) * 200))) for i in range(n)]
        path = write(tmp_path, rows, f"t{n}.jsonl")
        tracemalloc.start()
        try:
            tally, _, _ = virtual.replay(
                path, trace.read_trace(path, progress=False), Settings(block_tokens=B)
            )
            assert tally.requests == n and tally.in_flight_max == n  # nothing finished: all were held
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    per_request = (peak(4000) - peak(1000)) / 3000
    assert per_request < 1536, f"{per_request:,.0f} bytes held per request in flight"
