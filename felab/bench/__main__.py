"""`python -m felab.bench` (what `make bench` runs): every phase in `PHASES`, one after another.

Each phase runs as `python -m felab.bench.<phase>` in a process of its own and prints its own
tables. A phase that fails does not stop the others: the runner says which failed at the end
and exits 1, so `make bench` fails too.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence

import click

from felab.bench import PHASES, Phase
from felab.paths import KIT_ROOT


def run_phases(phases: Sequence[Phase], tiny: bool) -> list[str]:
    """Run each phase in turn, its output passed straight through; the names of those that failed."""
    failed = []
    for phase in phases:
        click.echo(f"\n== make bench: {phase.module} ==", err=True)
        started = time.monotonic()
        code = subprocess.run([sys.executable, *phase.argv(tiny)], cwd=KIT_ROOT, check=False).returncode
        took = time.monotonic() - started
        click.echo(
            f"== {phase.module}: {'done' if code == 0 else f'FAILED (exit {code})'} in {took:.0f} s ==",
            err=True,
        )
        if code != 0:
            failed.append(phase.module)
    return failed


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--tiny", is_flag=True, help="every phase at a tiny size: shows that each runs (the tests use it)"
)
@click.option(
    "--phase",
    "only",
    multiple=True,
    type=click.Choice([p.module for p in PHASES]),
    help="run only this phase (repeat for several) [default: all, in order]",
)
def main(tiny: bool, only: tuple[str, ...]) -> None:
    """Every phase of `make bench`: the practice server's fidelity, and what replay and calibrate cost."""
    phases = [p for p in PHASES if not only or p.module in only]
    failed = run_phases(phases, tiny)
    if failed:
        click.echo(
            f"\nmake bench: {len(failed)} of {len(phases)} phases failed: {', '.join(failed)}", err=True
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
