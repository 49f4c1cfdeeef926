"""`make bench`: how faithful the practice server is and what the kit's tools cost. A benchmark, not a test.

    python -m felab.bench                    # or: make bench (every phase, one after another)
    python -m felab.bench --tiny             # every phase at a tiny size: shows that each still runs
    python -m felab.bench --phase replay     # one phase (repeat the flag for several)

Each phase is a module of its own, run in a process of its own, so that one phase's memory
and warm caches never land in another's figures. Read it in this order:

    fidelity.py   the practice server's TTFT against the timing model's prediction, beside the floor;
                  CPU per token, memory per stream, start-up time, the cache lookup
    floor.py      the floor: a raw asyncio server that only keeps a 50 ms schedule
    stalls.py     a process that only sleeps and notes when the machine stopped it
    replay.py     trace replay: the whole Mooncake trace in virtual time, routing balance,
                  a parallel sweep, hostile input
    hangups.py    a hang-up storm: queued clients of a llama.cpp-like twin hang up; server CPU, /health
    calibrate.py  calibrate and check a practice server with known settings, then llama.cpp
    heldout.py    the twin on work nobody tuned it on, in every engine case built: each kind's
                  error against the real server, and why each miss happened
    __main__.py   the runner: `PHASES` below, in order

A phase is one line of `PHASES`: its module here, the flags for `make bench`, and the flags
that run it at a tiny size (each phase has a test that runs it so, through the runner:
`tests/test_bench.py` checks that every phase has one).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    """One phase of `make bench`: `python -m felab.bench.<module> <flags>` in a process of its own."""

    module: str
    full: tuple[str, ...] = ()
    tiny: tuple[str, ...] = ()

    def argv(self, tiny: bool) -> list[str]:
        """The phase's own command line (without the Python), at full or tiny size."""
        return ["-m", f"felab.bench.{self.module}", *(self.tiny if tiny else self.full)]


PHASES: tuple[Phase, ...] = (
    Phase("fidelity", tiny=("--tiny",)),
    Phase("replay", tiny=("--limit", "200", "--hostile-mb", "2")),
    Phase("hangups", tiny=("--clients", "20")),
    Phase("calibrate", tiny=("--quick", "--practice-only")),
    Phase("heldout", tiny=("--tiny",)),
)
