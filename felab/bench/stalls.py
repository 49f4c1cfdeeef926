"""The machine's own hiccups: a process that only sleeps, 1 ms at a time, and notes when it woke late.

    python -m felab.bench.stalls        # until its standard input closes; then one line
                                              # per stall: "start end", on time.monotonic()

A virtual machine is now and then paused by its host, and a shared one gives its
cores to someone else: every process on it stops for a few to a few tens of
milliseconds. Measured here on an idle 2-core machine, a loop of 1 ms sleeps
woke 17 ms late once in 20 s. A request in flight during such a stall is late
by it, whichever server it was sent to; at 64 streams one stall catches 64
requests at once, more than the 1% a p99 of 4,096 requests leaves out, so the
p99 of whichever server's turn it fell in becomes the stall.

`make bench`'s floor phase runs this process beside the practice server and the
floor (fidelity.py) and leaves out, for both servers alike, the requests in flight
during a stall it saw; it says how many, and prints the p99 of all requests too.
A process that only sleeps stops only when the machine does: a server that falls
behind because it is busy is not excused by it (a sleeper woken on a busy core runs
within a few milliseconds, under the threshold). One watcher, on whichever core: one
on each core, kept there, woke the cores so often that the floor's median error
halved (1.7 to 0.8 ms) while the practice server's did not move; the instrument
changed what it measured. A pause of the other core alone goes unseen.
"""

from __future__ import annotations

import os
import select
import sys
import time

TICK_S = 0.001
STALL_S = 0.005
"""A wake-up this much later than asked for is a stall (a sleeping process woken by a busy
machine's scheduler is normally late by well under a millisecond)."""


def watch(tick_s: float = TICK_S, stall_s: float = STALL_S) -> list[tuple[float, float]]:
    """Sleep `tick_s` at a time until standard input closes; the (start, end) of each late wake-up."""
    stalls, last = [], time.monotonic()
    while True:
        readable, _, _ = select.select([sys.stdin], [], [], tick_s)  # the sleep; input: the end
        now = time.monotonic()
        if now - last > tick_s + stall_s:
            stalls.append((last + tick_s, now))
        if readable and not os.read(sys.stdin.fileno(), 4096):
            return stalls
        last = now


if __name__ == "__main__":
    for start, end in watch():
        print(f"{start:.6f} {end:.6f}")
