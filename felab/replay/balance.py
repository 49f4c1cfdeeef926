"""The balance check (issue 30, point 4): every trace x replicas x route, in virtual time.

    python -m felab.replay.balance                                # 4 traces x 64, 256 x 3 routes
    python -m felab.replay.balance --replicas 64 --traces openings --minutes 5   # a quick pass

A cache-aware router gathers repeats on the replicas that hold them; the risk is that it
gathers the *work* there too. This replays traces of several shapes (the conversation trace
the route was first tuned on, the kit's agent trace, and the shapes of shapes.py) through
`--route prefix`, `random` and `sglang-cache-aware` at a data-centre prefill rate (50,000
tokens/s a replica), and prints one markdown row each: hit %, load max/mean (in-flight
tokens, time-averaged: tally.py), TTFT p95, then the targets:

    64 replicas    prefix: load max/mean at most 1.5
    256 replicas   prefix: load max/mean no worse than random's, hit % at least random's + 15,
                   TTFT p95 no worse than random's

The traces it makes (the agent trace and the shapes) go to `--folder` (default: a temporary
folder), the same files for the same seed. A benchmark, not a test: it never fails a build.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from felab.mock_server.config import DEFAULTS
from felab.prices import PRICES
from felab.replay import agent, shapes, trace, virtual
from felab.replay.command import PRICED
from felab.replay.tally import summary

TRACES = ("conversation", "agent", *shapes.SHAPES)
ROUTES = ("prefix", "random", "sglang-cache-aware")
PREFILL_TPS = 50_000.0
"""A data-centre GPU's prefill rate (as `make bench`'s routing part)."""


def trace_file(name: str, folder: Path, minutes: float | None) -> tuple[Path, int]:
    """The trace's file and its block size: the kit's Mooncake trace, or one written into `folder`."""
    if name == "conversation":
        return trace.MOONCAKE, 512
    if name == "agent":
        sessions = 500 if minutes is None else max(1, round(minutes * 60 * 0.5))
        path = folder / f"agent-{sessions}.jsonl"
        if not path.exists():
            with path.open("w", encoding="utf-8") as out:
                agent.write(agent.AgentShape(sessions=sessions), out)
        return path, 64
    path = folder / f"{name}-{minutes or 30:g}min.jsonl"
    if not path.exists():
        with path.open("w", encoding="utf-8") as out:
            shapes.write(name, out, 0, minutes or 30.0)
    return path, shapes.BLOCK


def ceiling_pct(requests: Sequence[trace.TraceRequest], block: int) -> float:
    """The most any cache could find, in % of prompt tokens: the full blocks an earlier prompt had
    (one replica, nothing ever evicted). No route can beat it; random may already be near it."""
    seen: set[int] = set()
    repeated = total = 0
    for r in requests:
        full = r.hash_ids[: r.input_tokens // block]
        repeated += sum(i in seen for i in full) * block
        total += r.input_tokens
        seen.update(full)
    return 100 * repeated / total if total else 0.0


def rows(names: Sequence[str], replicas: Sequence[int], folder: Path, minutes: float | None) -> list[dict]:
    """One row per trace x replicas x route."""
    out: list[dict[str, Any]] = []
    for name in names:
        path, block = trace_file(name, folder, minutes)
        requests = list(trace.read_trace(path, None, progress=False))
        most = ceiling_pct(requests, block)
        for n in replicas:
            for route in ROUTES:
                click.echo(f"  {name}: {n} replicas, route {route} ...", err=True)
                s = replace(DEFAULTS, replicas=n, route=route, prefill_tps=PREFILL_TPS, block_tokens=block)
                tally, loads, wall = virtual.replay(path, requests, s)
                row = summary(tally, loads, PRICES[PRICED], wall)
                out.append({
                    "trace": name, "replicas": n, "route": route, "requests": row["requests"],
                    "hit_pct": row["hit_pct"], "ceiling_pct": most, "load": row["load_max_over_mean"],
                    "ttft_p95_ms": row["ttft_p95_ms"], "wall_s": wall,
                })  # fmt: skip
    return out


def checks(table: Sequence[dict]) -> list[tuple[str, bool]]:
    """The targets, for each trace and replica count that has both prefix and random."""
    found = []
    by = {(r["trace"], r["replicas"], r["route"]): r for r in table}
    for (name, n, route), p in by.items():
        r = by.get((name, n, "random"))
        if route != "prefix" or r is None:
            continue
        if n <= 64:
            found.append((f"{name}, {n}: prefix load max/mean {p['load']:.2f} <= 1.5", p["load"] <= 1.5))
        else:
            found += [
                (f"{name}, {n}: prefix load {p['load']:.2f} <= random's {r['load']:.2f}",
                 p["load"] <= r["load"]),
                (f"{name}, {n}: prefix hit {p['hit_pct']:.1f}% >= random's {r['hit_pct']:.1f}% + 15"
                 + (f" (cannot be met: the most any cache could find is {p['ceiling_pct']:.1f}%)"
                    if p["ceiling_pct"] < r["hit_pct"] + 15 else ""),
                 p["hit_pct"] >= r["hit_pct"] + 15),
                (f"{name}, {n}: prefix p95 {p['ttft_p95_ms']:,.0f} ms <= random's {r['ttft_p95_ms']:,.0f} ms",
                 p["ttft_p95_ms"] <= r["ttft_p95_ms"]),
            ]  # fmt: skip
    return found


def markdown(table: Sequence[dict]) -> str:
    lines = [
        "| trace | replicas | route | hit % (most possible) | load max/mean | TTFT p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(
            f"| {r['trace']} | {r['replicas']} | {r['route']} | {r['hit_pct']:.1f} ({r['ceiling_pct']:.1f}) "
            f"| {r['load']:.2f} | {r['ttft_p95_ms']:,.0f} |"
        )
    return "\n".join(lines)


def csv_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--traces", default=",".join(TRACES), show_default=True, help="which traces, comma-separated")
@click.option("--replicas", default="64,256", show_default=True, help="fleet sizes, comma-separated")
@click.option("--minutes", type=click.FloatRange(min=1), help="shorter made traces (a quick pass)")
@click.option("--folder", type=click.Path(file_okay=False, path_type=Path), help="where to write made traces")
def main(traces: str, replicas: str, minutes: float | None, folder: Path | None) -> None:
    """Replay every trace through each route at each fleet size; print the table and the targets."""
    names = csv_list(traces)
    unknown = [n for n in names if n not in TRACES]
    if unknown:
        raise click.BadParameter(f"unknown trace {unknown[0]!r}: choose from {', '.join(TRACES)}")
    sizes = [int(n) for n in csv_list(replicas)]
    with tempfile.TemporaryDirectory(prefix="felab-balance-") as scratch:
        where = folder or Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        table = rows(names, sizes, where, minutes)
    click.echo(markdown(table))
    click.echo("\ntargets:")
    for what, ok in checks(table):
        click.echo(f"  {'met   ' if ok else 'MISSED'}  {what}")


if __name__ == "__main__":
    main()
