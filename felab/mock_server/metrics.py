"""`GET /metrics`: the practice server's counters, rendered by prometheus_client with vLLM's names.

What a learner reads here reads the same on a vLLM server's /metrics:

    vllm:prefix_cache_queries_total    counter    prompt tokens looked up in the prefix cache
    vllm:prefix_cache_hits_total       counter    of those, tokens found there (= usage cached_tokens)
    vllm:prompt_tokens_total           counter    prompt tokens of admitted requests
    vllm:generation_tokens_total       counter    reply tokens sent (a hung-up reply: those sent before)
    vllm:num_requests_running          gauge      requests in prefill or decoding, now
    vllm:num_requests_waiting          gauge      requests waiting for a seat or the prefill lane, now
    vllm:time_to_first_token_seconds   histogram  each first token's time, as the timing model booked
                                                  it, counted when its reply ends (no first token,
                                                  no sample; the x-felab-predicted-ttft-ms header is
                                                  the same value unless a hang-up ahead moved it up)

Every series carries `model_name` (as vLLM's) and `replica` (0..N-1, one per
replica of `--replicas`). Hit rate over a run = hits / queries; a cache that
is never hit only takes memory. Two more: `felab:injected_faults_total{type}`
and `process_cpu_seconds_total` (Prometheus' standard name; read with
`time.process_time()`, which works on every system, where prometheus_client's
ProcessCollector reads Linux's /proc only).

The page is rendered by prometheus_client, the library vLLM uses, from a
collector that reads the replicas' counters (fleet.ReplicaStats) when the page
is asked for. The booking core counts with plain integers and never touches
prometheus_client: a trace replay books millions of requests and must not pay
for it. Each server has a registry of its own (no global registry), and no
`_created` series is written: a page built from families sets none.

In Prometheus' text format a counter family is named without `_total` and its
samples with it; `generate_latest` writes `# TYPE vllm:prompt_tokens_total counter`
and prometheus_client's parser reads it back as the counter `vllm:prompt_tokens`.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from felab.mock_server.fleet import TTFT_BUCKETS_S, ReplicaStats
from felab.mock_server.timing import Prefill

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text format `generate_latest` writes, and the type vLLM's /metrics answers with."""

LABELS = ["model_name", "replica"]


class HasStats(Protocol):
    index: int
    stats: ReplicaStats


@dataclass(frozen=True)
class Snapshot:
    """What the page is made from: each replica's counters, the faults injected, and the time now."""

    replicas: Sequence[HasStats]
    faults: Mapping[str, int]
    now: float
    """The server's loop time, for the running and waiting gauges."""
    in_flight: Sequence[tuple[int, Prefill]] = ()
    """(replica, its prefill in the lane) of each request being served (PracticeModel.in_flight)."""


class FleetCollector(Collector):
    """Yields the page's metric families from a snapshot taken at each scrape."""

    def __init__(self, model: str, snapshot: Callable[[], Snapshot]) -> None:
        self.model, self.snapshot = model, snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        yield from self.counters(snap.replicas)
        yield from self.gauges(snap)
        yield self.ttft(snap.replicas)
        faults = CounterMetricFamily(
            "felab:injected_faults",
            "Failures injected by --fail-rate, by type.",
            labels=["model_name", "type"],
        )
        for kind, n in snap.faults.items():
            faults.add_metric([self.model, kind], n)
        yield faults
        yield CounterMetricFamily(
            "process_cpu_seconds", "CPU time of the server process, in seconds.", value=time.process_time()
        )

    def counters(self, replicas: Sequence[HasStats]) -> Iterator[Metric]:
        rows: list[tuple[str, str, Callable[[ReplicaStats], int]]] = [
            ("vllm:prefix_cache_queries", "Prefix cache queries, in tokens.", lambda s: s.prompt_tokens),
            ("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.", lambda s: s.hits),
            ("vllm:prompt_tokens", "Prompt tokens admitted.", lambda s: s.prompt_tokens),
            ("vllm:generation_tokens", "Reply tokens sent.", lambda s: s.generation_tokens),
        ]
        for name, help_, value in rows:
            family = CounterMetricFamily(name, help_, labels=LABELS)
            for r in replicas:
                family.add_metric([self.model, str(r.index)], value(r.stats))
            yield family

    def gauges(self, snap: Snapshot) -> Iterator[Metric]:
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Requests in prefill or decoding.", labels=LABELS
        )
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Requests waiting for a seat or the prefill lane.", labels=LABELS
        )
        for r in snap.replicas:
            prefills = [p for index, p in snap.in_flight if index == r.index]
            running.add_metric([self.model, str(r.index)], sum(p.start <= snap.now for p in prefills))
            waiting.add_metric([self.model, str(r.index)], sum(p.start > snap.now for p in prefills))
        yield from (running, waiting)

    def ttft(self, replicas: Sequence[HasStats]) -> Metric:
        family = HistogramMetricFamily(
            "vllm:time_to_first_token_seconds",
            "Time to first token, as the timing model booked it, in seconds.",
            labels=LABELS,
        )
        for r in replicas:
            s = r.stats
            buckets = [
                (floatToGoString(le), n) for le, n in zip(TTFT_BUCKETS_S, s.ttft_bucket_counts, strict=True)
            ]
            family.add_metric([self.model, str(r.index)], [*buckets, ("+Inf", s.ttft_count)], s.ttft_sum_s)
        return family


def registry(model: str, snapshot: Callable[[], Snapshot]) -> CollectorRegistry:
    """A server's own registry (never prometheus_client's global one), holding the fleet's collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(FleetCollector(model, snapshot))
    return reg


def render(reg: CollectorRegistry) -> bytes:
    """The whole page, in Prometheus' text format 0.0.4."""
    return generate_latest(reg)


# ── Reading a page (the practice server's or vLLM's) ─────────────────────────


def read_page(text: str) -> dict[str, float]:
    """Each sample name (as PromQL names it: `vllm:prefix_cache_hits_total`), summed over its labels.

    Parsed by prometheus_client, as a real scraper parses it. Histogram buckets and
    `_created` timestamps are left out: a sum over them means nothing.
    """
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(("_bucket", "_created")):
                continue
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def scrape(base_url: str) -> dict[str, float]:
    """Read a server's /metrics (practice server or vLLM): `read_page()` of it.

    `base_url` is the OpenAI-style URL ending in /v1; /metrics sits at the root.
    """
    root = base_url.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/metrics", timeout=10) as reply:
        return read_page(reply.read().decode())
