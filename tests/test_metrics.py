"""`GET /metrics`: Prometheus text with vLLM's names, agreeing with the usage the client saw."""

from __future__ import annotations

import json
from collections import defaultdict

import httpx
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from felab.mock_server.fleet import TTFT_BUCKETS_S, ReplicaStats
from felab.mock_server.launch import practice_server
from felab.mock_server.metrics import Snapshot, read_page, registry, render
from felab.mock_server.timing import Prefill

MODEL = "felab-practice"


def parse(page: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a Prometheus text page, keyed by name and labels, as prometheus_client reads it."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }


def page_of(r: One, now: float, turns: tuple[Prefill, ...] = ()) -> str:
    """The page a server with this one replica would answer at loop time `now`, serving `turns`."""
    return render(registry(MODEL, lambda: Snapshot([r], {}, now, [(0, t) for t in turns]))).decode()


def per_replica(samples: dict, name: str) -> dict[str, float]:
    return {dict(labels)["replica"]: v for (n, labels), v in samples.items() if n == name}


def call(url: str, text: str, user: str, stream: bool) -> tuple[str, dict]:
    """One chat request; (the replica that served it, the usage the client saw)."""
    body = {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "An opening shared by all. " * 60},
            {"role": "user", "content": text},
        ],
        "max_tokens": 3,
        "user": user,
        "stream": stream,
        "stream_options": {"include_usage": True} if stream else None,
    }
    if not stream:
        r = httpx.post(f"{url}/chat/completions", json=body, timeout=30)
        return r.headers["x-felab-replica"], r.json()["usage"]
    with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=30) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: {")]
        return r.headers["x-felab-replica"], json.loads(events[-1])["usage"]


def test_metrics_counters_agree_with_the_usage_the_client_saw() -> None:
    seen: dict[str, dict[str, int]] = defaultdict(lambda: {"prompt": 0, "cached": 0, "requests": 0})
    with practice_server("--replicas", "3", "--route", "affinity", "--prefill-tps", "50000") as url:
        for turn in range(4):
            for user in ("ann", "bob", "cat", "dan", "eve"):
                replica, usage = call(url, f"{user} asks question {turn}", user, stream=turn % 2 == 0)
                seen[replica]["prompt"] += usage["prompt_tokens"]
                seen[replica]["cached"] += usage["prompt_tokens_details"]["cached_tokens"]
                seen[replica]["requests"] += 1
        page = httpx.get(f"{url.removesuffix('/v1')}/metrics")
    assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = parse(page.text)
    queries = per_replica(samples, "vllm:prefix_cache_queries_total")
    hits = per_replica(samples, "vllm:prefix_cache_hits_total")
    counts = per_replica(samples, "vllm:time_to_first_token_seconds_count")
    assert set(queries) == {"0", "1", "2"}
    for replica, got in seen.items():
        assert queries[replica] == got["prompt"]
        assert hits[replica] == got["cached"]
        assert counts[replica] == got["requests"]
    assert sum(queries.values()) == sum(s["prompt"] for s in seen.values())
    assert sum(hits.values()) == sum(s["cached"] for s in seen.values()) > 0
    assert sum(per_replica(samples, "vllm:num_requests_running").values()) == 0
    assert sum(per_replica(samples, "vllm:num_requests_waiting").values()) == 0
    assert ("process_cpu_seconds_total", frozenset()) in samples


def test_the_warm_up_request_is_not_counted() -> None:
    with practice_server() as url:
        samples = parse(httpx.get(f"{url.removesuffix('/v1')}/metrics").text)
    assert per_replica(samples, "vllm:prefix_cache_queries_total") == {"0": 0}


class One:
    """A replica as the page reads it: an index and its counters."""

    index = 0

    def __init__(self) -> None:
        self.stats = ReplicaStats()


def test_histogram_buckets_are_cumulative_and_gauges_follow_the_lane() -> None:
    r = One()
    r.stats.admit(prompt=100, cached=64)
    r.stats.admit(prompt=100, cached=0)
    a, b = Prefill(10.0, 0.02, 10.0), Prefill(10.0, 1.0, 12.0)
    samples = parse(page_of(r, now=11.0, turns=(a, b)))
    assert per_replica(samples, "vllm:num_requests_running") == {"0": 1}  # a is prefilling at t=11
    assert per_replica(samples, "vllm:num_requests_waiting") == {"0": 1}  # b waits for the lane
    assert per_replica(samples, "vllm:time_to_first_token_seconds_count") == {"0": 0}  # no reply over yet
    r.stats.served(ttft_s=0.03, tokens=5)
    r.stats.served(ttft_s=3.0, tokens=5)
    samples = parse(page_of(r, now=11.0))
    buckets = [
        samples[
            (
                "vllm:time_to_first_token_seconds_bucket",
                frozenset({("le", str(le)), ("model_name", MODEL), ("replica", "0")}),
            )
        ]
        for le in TTFT_BUCKETS_S
    ]
    assert buckets == sorted(buckets) and buckets[0] == 0 and buckets[-1] == 2
    assert per_replica(samples, "vllm:time_to_first_token_seconds_sum") == {"0": 3.03}
    assert per_replica(samples, "vllm:num_requests_running") == {"0": 0}
    assert per_replica(samples, "vllm:prefix_cache_hits_total") == {"0": 64}
    assert per_replica(samples, "vllm:generation_tokens_total") == {"0": 10}


def test_a_reply_cut_short_counts_what_it_sent_and_no_first_token_counts_no_ttft() -> None:
    r = One()
    r.stats.admit(prompt=100, cached=0)
    r.stats.served(ttft_s=None, tokens=0)  # hung up before its first token
    samples = parse(page_of(r, now=2.0))
    assert per_replica(samples, "vllm:time_to_first_token_seconds_count") == {"0": 0}
    assert per_replica(samples, "vllm:generation_tokens_total") == {"0": 0}
    assert per_replica(samples, "vllm:prompt_tokens_total") == {"0": 100}  # it was admitted


def test_read_page_sums_each_sample_over_its_labels_on_a_page_written_as_vllm_writes_it() -> None:
    # vLLM counts with prometheus_client's Counter and Histogram, whose page also has _created series.
    reg = CollectorRegistry()
    hits = Counter("vllm:prefix_cache_hits", "Hits.", ["model_name", "engine"], registry=reg)
    hits.labels("m", "0").inc(5)
    hits.labels("m", "1").inc(7)
    ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT.", ["model_name"], registry=reg)
    ttft.labels("m").observe(0.2)
    ttft.labels("m").observe(0.4)
    totals = read_page(generate_latest(reg).decode())
    assert totals["vllm:prefix_cache_hits_total"] == 12
    assert totals["vllm:time_to_first_token_seconds_count"] == 2
    assert abs(totals["vllm:time_to_first_token_seconds_sum"] - 0.6) < 1e-9
    assert not [name for name in totals if name.endswith(("_bucket", "_created"))]
