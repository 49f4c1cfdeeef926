"""`make bench`, replay phase: the kit's whole trace in virtual time, timed. A benchmark, not a test.

    python -m felab.replay.bench        # make bench runs it after the fidelity phase

Two runs of the Mooncake conversation trace (12,031 requests, 288,500 blocks, one hour):
one replica with the defaults, then 64 replicas with the prefix-aware router, which asks
every replica's cache and lane for every request (the most work a route does). Wall time
covers everything a replay does: decompressing and checking every line, booking, the
summary. Targets: 5 s and 20 s on the kit's 2-core machine, i.e. at least 700 and 175
times real time. It prints the figures and which targets it met; it never fails a build.
The peak memory (ru_maxrss) shows the trace is streamed, not loaded.
"""

from __future__ import annotations

import json
import resource
import sys
from dataclasses import replace

import click

from felab.mock_server.config import DEFAULTS
from felab.prices import PRICES
from felab.replay import trace, virtual
from felab.replay.command import PRICED
from felab.replay.tally import summary
from felab.tables import table

RUNS = ((1, DEFAULTS.route, 5.0), (64, "prefix", 20.0))
"""(replicas, route, target seconds)."""


def peak_mb() -> float:
    """This process's peak resident memory so far, MB (Linux counts ru_maxrss in KiB, macOS in bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Time the kit's whole Mooncake trace through the practice server's model, in virtual time."""
    path = trace.MOONCAKE
    block = trace.block_tokens(path)
    rows, checks = [], []
    for replicas, route, target_s in RUNS:
        click.echo(f"  replay: {replicas} replica(s), route {route} ...", err=True)
        settings = replace(DEFAULTS, block_tokens=block, replicas=replicas, route=route)
        tally, loads, wall = virtual.replay(path, trace.read_trace(path), settings)
        s = summary(tally, loads, PRICES[PRICED], wall)
        rows.append(
            {
                "replicas": replicas,
                "route": route,
                "requests": s["requests"],
                "hit_pct": s["hit_pct"],
                "wall_s": wall,
                "x_real_time": s["x_real_time"],
                "peak_mb": peak_mb(),
            }
        )
        checks.append((f"{replicas} replica(s), {route}: at most {target_s:g} s", wall <= target_s, wall))
    click.echo(f"\nreplay of {path.name} in virtual time ({block}-token blocks, the server's defaults)\n")
    click.echo(table(rows, floatfmt=".2f"))
    click.echo("\ntargets:")
    for name, ok, value in checks:
        click.echo(f"  {'met   ' if ok else 'MISSED'}  {name}: {value:.2f} s")
    click.echo(
        "\n"
        + json.dumps({f"replay_{r['replicas']}_{r['route']}_wall_s": round(r["wall_s"], 3) for r in rows})
    )


if __name__ == "__main__":
    main()
