"""`make fleet-stats`: where the router sent the requests, read from each worker's own /metrics.

Every practice server counts its own requests and prefix-cache lookups (vLLM's metric names,
metrics.py), so the router's choices can be read back from the workers, as an operator reads a
real fleet's: per worker, the requests it answered (`vllm:time_to_first_token_seconds_count`,
one per first token sent), the prompt tokens it looked up in its cache and those it found there
(`vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total`). The hit rate is
hits / queries; the load is each worker's requests against the mean (max/mean 1.0: even).
With ROUTER=none the one server's page has a row per replica (its `replica` label).
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from felab.errors import FelabError
from felab.fleet.processes import read_state, state_file
from felab.paths import from_here
from felab.stats import ratio
from felab.tables import table

NAMES = {
    "vllm:time_to_first_token_seconds_count": "requests",
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_hits_total": "hits",
}


@dataclass
class WorkerStats:
    name: str
    requests: int = 0
    queries: int = 0
    hits: int = 0

    @property
    def hit_pct(self) -> float | None:
        share = ratio(self.hits, self.queries)
        return None if share is None else 100 * share


def read_workers(page: str, name: str) -> list[WorkerStats]:
    """One WorkerStats per `replica` label on a /metrics page (a lone worker: one)."""
    rows: dict[str, WorkerStats] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            field = NAMES.get(sample.name)
            if field is None:
                continue
            replica = sample.labels.get("replica", "0")
            row = rows.setdefault(replica, WorkerStats(name))
            setattr(row, field, getattr(row, field) + int(sample.value))
    return list(rows.values())


def scrape_fleet() -> list[WorkerStats]:
    """Each worker of the running fleet (the state file), or one message saying how to start one."""
    state = read_state()
    if state is None:
        raise FelabError(
            f"no fleet is running here ({state_file()} does not exist). Start one first: "
            f"{from_here('make fleet N=4 ROUTER=sglang')}, then run the workload, then this."
        )
    rows: list[WorkerStats] = []
    for p in state.get("processes", []):
        role, url = p.get("role", ""), p.get("url", "")
        if not (role.startswith("worker") or role == "server"):
            continue
        root = url.removesuffix("/v1")
        try:
            with urllib.request.urlopen(f"{root}/metrics", timeout=5) as reply:
                page = reply.read().decode()
        except OSError as exc:
            raise FelabError(
                f"{role} at {root} did not answer /metrics ({exc}): the fleet may have stopped. "
                f"`{from_here('make fleet-stop')}`, then start it again."
            ) from None
        found = read_workers(page, role)
        if role == "server":
            for i, row in enumerate(found):
                row.name = f"replica {i}"
        rows += found
    return rows


def report(rows: list[WorkerStats]) -> str:
    """The table, and the load's max/mean over the workers."""
    total = sum(r.requests for r in rows)
    mean = total / len(rows) if rows else 0
    body = [
        {
            "worker": r.name,
            "requests": r.requests,
            "share": "-" if not total else f"{100 * r.requests / total:.0f}%",
            "prompt tokens": r.queries,
            "found in cache": r.hits,
            "hit rate": "-" if r.hit_pct is None else f"{r.hit_pct:.1f}%",
        }
        for r in rows
    ]
    hits, queries = sum(r.hits for r in rows), sum(r.queries for r in rows)
    share = ratio(hits, queries)
    body.append(
        {
            "worker": "all",
            "requests": total,
            "share": "",
            "prompt tokens": queries,
            "found in cache": hits,
            "hit rate": "-" if share is None else f"{100 * share:.1f}%",
        }
    )
    out = table(body)
    load = f"{max(r.requests for r in rows) / mean:.2f}" if mean else "-"
    return f"{out}\n\nload max/mean over {len(rows)} workers: {load} (1.00: even)"
