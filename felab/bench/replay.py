"""`make bench`, replay phase: the kit's whole trace in virtual time, timed. A benchmark, not a test.

    python -m felab.bench.replay              # make bench runs it after the fidelity phase
    python -m felab.bench.replay --limit 300  # every part at a tiny size (tests/test_replay_bench.py)

Four parts, each with its targets; it prints which it met and never fails a build.

1. **Speed.** The Mooncake conversation trace (12,031 requests, 288,500 blocks, one hour)
   through one replica, then 64 replicas with the prefix-aware router, which asks every
   replica's cache and lane for every request; with the defaults, then with a llama.cpp twin
   (seats and the engine loop's steps). Wall time covers everything a replay does:
   decompressing and checking every line, booking, the summary. Targets (issue 28): 1 s and
   3 s on the kit's 2-core machine, for both. The peak memory (ru_maxrss) shows the trace is streamed.
2. **Routing balance** (issue 19), at a data-centre rate (`--prefill-tps 50000`), 18 and 64
   replicas, random against prefix: hit %, load max/mean, TTFT p95. Targets for prefix: load
   max/mean at most 1.5, hit rate at least 15 points above random's, p95 no worse.
3. **A parallel sweep:** 8 combinations with `--jobs 1`, then `--jobs 2` (parallel.py, the
   command's own code): at least 1.4 times faster on 2 cores, and the same rows.
4. **Hostile input** (issue 22): a .gz of 300 MB of empty lines, read in seconds (against the
   time to decompress it alone), and a .gz of 300 MB of spaces on one line, refused at once
   with little memory (the line limit, trace.py).
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import resource
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from felab.bench import hangups
from felab.errors import FelabError
from felab.mock_server.config import DEFAULTS, Settings
from felab.prices import PRICES
from felab.replay import parallel, trace, virtual
from felab.replay.command import PRICED, run_virtual
from felab.replay.tally import summary
from felab.tables import table

SPEED = ((1, DEFAULTS.route, 1.0), (64, "prefix", 3.0))
"""(replicas, route, target seconds): issue 28's targets, with the defaults and with a twin (TWIN)."""
NOT_IN_REPLAY = ("chars_per_token", "block_tokens", "context_tokens")
"""The trace gives its own tokens and blocks; the context is the one below."""
TWIN = {k: v for k, v in hangups.TWIN.items() if k not in NOT_IN_REPLAY}
"""A calibrated llama.cpp twin (4 seats, steps of 2,048 prompt tokens: the engine loop, loop.py),
with a context of 4 x 131,072 tokens so that the trace's longest prompts fit a seat."""
TWIN_CONTEXT = 4 * 131_072
FAST_PREFILL_TPS = 50_000.0
"""A data-centre GPU's prefill rate: the routing comparison of issue 19 uses it."""
SWEEP = [(r, route, c) for r in (1, 8) for route in ("random", "prefix") for c in (4096, 50_000)]
"""The parallel sweep's 8 combinations: (replicas, route, cache blocks)."""
WALL = ("wall_s", "x_real_time")

Check = tuple[str, bool, str]
"""(what, met, the measured figure)."""


def peak_mb() -> float:
    """This process's peak resident memory so far, MB (Linux counts ru_maxrss in KiB, macOS in bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def one(path: Path, limit: int | None, s: Settings) -> dict[str, Any]:
    """One replay in virtual time: its summary row, with the settings that name it."""
    tally, loads, wall = virtual.replay(path, trace.read_trace(path, limit, progress=False), s)
    row = summary(tally, loads, PRICES[PRICED], wall, s.replicas * s.prefill_tps)
    return {"replicas": s.replicas, "route": s.route, **row}


def speed(path: Path, limit: int | None, base: Settings) -> tuple[list[dict], list[Check]]:
    """The trace through 1 replica and through 64 with prefix routing: with the defaults (lesson
    06's model: the engine loop, one whole prompt a step), then with the twin (seats, the engine
    loop's steps, every cost term)."""
    rows, checks = [], []
    twin = replace(base, **TWIN, context_tokens=TWIN_CONTEXT)  # type: ignore[arg-type]
    for model, settings in (("defaults", base), ("twin", twin)):
        for replicas, route, target_s in SPEED:
            click.echo(f"  replay: {model}, {replicas} replica(s), route {route} ...", err=True)
            s = one(path, limit, replace(settings, replicas=replicas, route=route))
            keep = ("replicas", "route", "requests", "hit_pct", "wall_s", "x_real_time")
            rows.append({"model": model, **{k: s[k] for k in keep}, "peak_mb": peak_mb()})
            what = f"{model}, {replicas} replica(s), {route}: at most {target_s:g} s"
            checks.append((what, s["wall_s"] <= target_s, f"{s['wall_s']:.2f} s"))
    return rows, checks


def routing(path: Path, limit: int | None, base: Settings) -> tuple[list[dict], list[Check]]:
    rows, checks = [], []
    for replicas in (18, 64):
        got = {}
        for route in ("random", "prefix"):
            click.echo(f"  routing: {replicas} replicas, route {route} ...", err=True)
            s = one(path, limit, replace(base, replicas=replicas, route=route, prefill_tps=FAST_PREFILL_TPS))
            got[route] = s
            keep = ("replicas", "route", "hit_pct", "load_max_over_mean", "ttft_p95_ms", "wall_s")
            rows.append({k: s[k] for k in keep})
        r, p = got["random"], got["prefix"]
        checks += [
            (f"{replicas} prefix: load max/mean at most 1.5", p["load_max_over_mean"] <= 1.5,
             f"{p['load_max_over_mean']:.2f}"),
            (f"{replicas} prefix: hit % at least random's + 15", p["hit_pct"] >= r["hit_pct"] + 15,
             f"{p['hit_pct']:.1f} vs {r['hit_pct']:.1f}"),
            (f"{replicas} prefix: TTFT p95 no worse than random's", p["ttft_p95_ms"] <= r["ttft_p95_ms"],
             f"{p['ttft_p95_ms']:,.0f} vs {r['ttft_p95_ms']:,.0f} ms"),
        ]  # fmt: skip
    return rows, checks


def sweep(path: Path, limit: int | None, base: Settings) -> tuple[list[dict], list[Check]]:
    """The same 8 configurations with 1 process, then 2; the rows must agree but for wall time."""
    configs = [
        replace(base, replicas=r, route=route, cache_blocks=c, prefill_tps=FAST_PREFILL_TPS)
        for r, route, c in SWEEP
    ]
    run_one = functools.partial(run_virtual, path, limit, 1.0, PRICES[PRICED], progress=False, remember=True)
    walls, results = {}, {}
    for jobs in (1, 2):
        click.echo(f"  sweep: {len(configs)} configurations, --jobs {jobs} ...", err=True)
        trace.forget()  # each reads the trace afresh (forked workers would inherit what was kept)
        t0 = time.perf_counter()
        results[jobs] = list(parallel.run_all(run_one, configs, jobs))
        walls[jobs] = time.perf_counter() - t0
    same = all(
        {k: v for k, v in a.items() if k not in WALL} == {k: v for k, v in b.items() if k not in WALL}
        for a, b in zip(results[1], results[2], strict=True)
    )
    ratio = walls[1] / walls[2]
    # The runs' own wall times added up, over the sweep's: about 2 with --jobs 2 means the two
    # processes ran at once; if the sweep is still no faster, the cores were not free (other work).
    rows = [
        {"jobs": j, "configurations": len(configs), "wall_s": walls[j],
         "runs_at_once": sum(r["wall_s"] for r in results[j]) / walls[j]}
        for j in (1, 2)
    ]  # fmt: skip
    checks = [
        ("--jobs 2 at least 1.4x faster than --jobs 1", ratio >= 1.4, f"{ratio:.2f}x"),
        ("--jobs 2 gives --jobs 1's rows (all but wall time)", same, "same" if same else "DIFFERENT"),
    ]
    return rows, checks


def hostile(folder: Path, megabytes: int) -> tuple[list[dict], list[Check]]:
    """Blank lines read about as fast as the file decompresses; a huge line refused in little memory."""
    good = json.dumps({"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}).encode()
    blank, spaces = folder / "blank.jsonl.gz", folder / "spaces.jsonl.gz"
    click.echo(
        f"  hostile input: writing {megabytes} MB of empty lines, and of spaces, gzipped ...", err=True
    )
    with gzip.open(blank, "wb", compresslevel=1) as f:
        f.write(good + b"\n")
        for _ in range(megabytes):
            f.write(b"\n" * 2**20)
        f.write(good + b"\n")
    with gzip.open(spaces, "wb", compresslevel=1) as f:
        for _ in range(megabytes):
            f.write(b" " * 2**20)
        f.write(good + b"\n")
    t0 = time.perf_counter()
    with gzip.open(blank, "rb") as f:
        while f.read(trace.CHUNK_BYTES):
            pass
    unzip_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    found = sum(1 for _ in trace.read_trace(blank, progress=False))
    blank_s = time.perf_counter() - t0
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        list(trace.read_trace(spaces, progress=False))
        refused = False
    except FelabError:
        refused = True
    spaces_s = time.perf_counter() - t0
    spaces_mb = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    rows = [
        {"file": f"{megabytes} MB of empty lines", "requests": found, "read_s": blank_s},
        {"file": f"{megabytes} MB of spaces, one line", "refused": refused, "read_s": spaces_s},
    ]
    rows[0]["gunzip_only_s"], rows[1]["peak_mb"] = unzip_s, spaces_mb
    checks = [
        ("empty lines: at most 3x the time to decompress them", blank_s <= 3 * unzip_s + 0.1,
         f"{blank_s:.2f} s (gunzip alone {unzip_s:.2f} s)"),
        ("a line over 1 MiB: refused, under 16 MB held", refused and spaces_mb < 16, f"{spaces_mb:.1f} MB"),
    ]  # fmt: skip
    return rows, checks


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--limit", type=click.IntRange(min=1), help="replay only the first N requests (a quick pass)")
@click.option(
    "--hostile-mb",
    type=click.IntRange(min=1),
    help="size of the hostile files [default: 300; 3 with --limit]",
)
def main(limit: int | None, hostile_mb: int | None) -> None:
    """Time the kit's Mooncake trace through the practice server's model, in virtual time."""
    path = trace.MOONCAKE
    block = trace.block_tokens(path, limit)
    base = replace(DEFAULTS, block_tokens=block)
    parts = [
        ("speed", speed),
        ("routing balance, prefill 50,000 tokens/s", routing),
        ("parallel sweep", sweep),
    ]
    figures: dict[str, Any] = {}
    results = []
    for title, part in parts:
        rows, checks = part(path, limit, base)
        results.append((title, rows, checks))
    with tempfile.TemporaryDirectory(prefix="felab-bench-") as folder:
        results.append(("hostile input", *hostile(Path(folder), hostile_mb or (3 if limit else 300))))
    size = f"the first {limit:,} requests" if limit else "the whole trace"
    click.echo(f"\nreplay of {path.name} ({size}) in virtual time, {block}-token blocks; "
               f"{parallel.cores()} cores, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    for title, rows, checks in results:
        click.echo(f"\n{title}\n\n" + table(rows, floatfmt=".2f"))
        click.echo("\ntargets:")
        for name, ok, value in checks:
            click.echo(f"  {'met   ' if ok else 'MISSED'}  {name}: {value}")
        figures[title.split(",")[0].replace(" ", "_")] = rows
    for r in results[0][1]:  # the figures earlier runs printed, under the same keys (the twin's: _twin)
        more = "" if r["model"] == "defaults" else f"_{r['model']}"
        figures[f"replay_{r['replicas']}_{r['route']}{more}_wall_s"] = round(r["wall_s"], 3)
    click.echo("\n" + json.dumps(figures, default=str))


if __name__ == "__main__":
    main()
