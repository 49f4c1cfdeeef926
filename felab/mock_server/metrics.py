"""`GET /metrics`: the practice server's counters in Prometheus' text format, with vLLM's names.

What a learner reads here reads the same on a vLLM server's /metrics:

    vllm:prefix_cache_queries_total    prompt tokens looked up in the prefix cache
    vllm:prefix_cache_hits_total       of those, tokens found there (= usage cached_tokens)
    vllm:prompt_tokens_total           prompt tokens of admitted requests
    vllm:generation_tokens_total       reply tokens of admitted requests
    vllm:num_requests_running          requests in prefill or decoding, now
    vllm:num_requests_waiting          requests waiting for the prefill lane, now
    vllm:time_to_first_token_seconds   histogram of the TTFT the timing model scheduled
                                       (the same value as the x-felab-predicted-ttft-ms header)

Every series carries `model_name` (as vLLM's) and `replica` (0..N-1, one per
replica of `--replicas`). Hit rate over a run = hits / queries; a cache that
is never hit only takes memory. Two more: `process_cpu_seconds_total`
(Prometheus' standard process metric) and `felab:injected_faults_total`.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Protocol

from felab.mock_server.fleet import TTFT_BUCKETS_S, ReplicaStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class HasStats(Protocol):
    index: int
    stats: ReplicaStats


def render(replicas: Sequence[HasStats], model: str, now: float, faults: dict[str, int]) -> str:
    """The whole /metrics page (`now`: the server's loop time, for the running/waiting gauges)."""
    out: list[str] = []
    model = model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")  # label escaping

    def family(name: str, kind: str, help_: str, rows: list[tuple[str, float]]) -> None:
        out.extend([f"# HELP {name} {help_}", f"# TYPE {name} {kind}"])
        out.extend(f"{series} {value}" for series, value in rows)

    def labels(r: HasStats, le: str | None = None) -> str:
        bucket = f'le="{le}",' if le else ""
        return f'{{{bucket}model_name="{model}",replica="{r.index}"}}'

    def per_replica(name: str, kind: str, help_: str, value: Callable[[ReplicaStats], float]) -> None:
        series = f"{name}_total" if kind == "counter" else name
        family(name, kind, help_, [(f"{series}{labels(r)}", value(r.stats)) for r in replicas])

    queries, hits = "Prefix cache queries, in tokens.", "Prefix cache hits, in tokens."
    per_replica("vllm:prefix_cache_queries", "counter", queries, lambda s: s.prompt_tokens)
    per_replica("vllm:prefix_cache_hits", "counter", hits, lambda s: s.hits)
    per_replica("vllm:prompt_tokens", "counter", "Prompt tokens admitted.", lambda s: s.prompt_tokens)
    per_replica("vllm:generation_tokens", "counter", "Reply tokens admitted.", lambda s: s.generation_tokens)
    per_replica(
        "vllm:num_requests_running",
        "gauge",
        "Requests in prefill or decoding.",
        lambda s: sum(turn.start <= now for turn in s.in_flight.values()),
    )
    per_replica(
        "vllm:num_requests_waiting",
        "gauge",
        "Requests waiting for the prefill lane.",
        lambda s: sum(turn.start > now for turn in s.in_flight.values()),
    )

    name, rows = "vllm:time_to_first_token_seconds", list[tuple[str, float]]()
    for r in replicas:
        s = r.stats
        counts = zip(TTFT_BUCKETS_S, s.ttft_bucket_counts, strict=True)
        rows += [(f"{name}_bucket{labels(r, str(le))}", n) for le, n in counts]
        rows += [(f"{name}_bucket{labels(r, '+Inf')}", s.requests)]
        rows += [(f"{name}_sum{labels(r)}", s.ttft_sum_s), (f"{name}_count{labels(r)}", s.requests)]
    family(name, "histogram", "Time to first token the timing model scheduled, in seconds.", rows)

    family(
        "felab:injected_faults",
        "counter",
        "Failures injected by --fail-rate, by type.",
        [(f'felab:injected_faults_total{{type="{kind}"}}', n) for kind, n in faults.items()],
    )
    family(
        "process_cpu_seconds_total",
        "counter",
        "CPU time of the server process, in seconds.",
        [("process_cpu_seconds_total", time.process_time())],
    )
    return "\n".join(out) + "\n"


def scrape(base_url: str) -> dict[str, float]:
    """Read a server's /metrics (practice server or vLLM) and add up each metric over its labels.

    `base_url` is the OpenAI-style URL ending in /v1; /metrics sits at the root.
    """
    root = base_url.rstrip("/").removesuffix("/v1")
    with urllib.request.urlopen(f"{root}/metrics", timeout=10) as reply:
        page = reply.read().decode()
    totals: dict[str, float] = {}
    for line in page.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            name = series.split("{", 1)[0]
            totals[name] = totals.get(name, 0.0) + float(value)
    return totals
