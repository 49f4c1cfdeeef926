"""Waiting for a booked time: the server's clock, and a first token sent on time to a fraction of a ms.

The event loop's own timers count whole milliseconds (the kernel's wait is given in ms,
and uvloop's clock counts ms), so a sleeper wakes up to about 1 ms late. For most tokens
that is fine. The first token is the one a client's TTFT measures, so it is sent
precisely (`OnTime`): a helper thread sleeps until the earliest first token on the
system's high-resolution timer and wakes the event loop EARLY_S before it; from then on,
one check per pass of the event loop wakes every request whose time has come.

Measured on 2 shared cores at 64 streams (docs/benchmarks.md): the first version spun the
event loop for the last 2 ms before every deadline, and with 64 streams some deadline was
nearly always that close: a quarter of the server's CPU went to spinning, and the busier
process kept its schedule worse. The thread costs a wake-up per deadline instead.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import threading
import time

clock = time.monotonic
"""The server's clock, in seconds: arrivals, bookings and deadlines all read it. asyncio's own
loop.time() is this clock too, but uvloop's counts whole milliseconds, which would round every
arrival and deadline. Timers are set from it by their delay (call_later), on either loop."""

EARLY_S = 0.0003
"""How early OnTime's thread wakes the event loop (a wake-up across threads takes ~0.1-0.2 ms);
the rest is checked on each pass of the loop."""
IDLE_S = 5.0
"""OnTime's thread ends after this long with nothing to wait for (it starts again when needed)."""
SLACK = 64
"""How many waiters that left early (woken sooner, or cancelled: a hang-up) OnTime's heap may hold
beyond as many as it holds live ones, before it sweeps them out."""


def wake_up(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


async def sleep_until(deadline: float) -> None:
    """Sleep until about `deadline` (the server's clock): a timer, which may be up to ~1 ms late."""
    delay = deadline - clock()
    if delay > 0:
        await asyncio.sleep(delay)


class OnTime:
    """Wakes each waiter at its deadline: a thread sleeps until just before the earliest one, then
    the event loop checks the clock on each pass until it has come.

    A waiter may leave before its deadline: woken sooner (a hang-up ahead moved its first token
    up: it asks again, for its new time) or cancelled (its own client hung up). A heap cannot take
    an entry out of its middle, so one that left stays there, dead, until it comes to the top or
    until the dead outnumber the live by `SLACK`: then one sweep (O(n), paid for by the n/2 that
    left since the last) rebuilds the heap from the live. So a storm of hang-ups leaves the heap
    no larger than twice its live waiters and `SLACK`, not every wait ever asked for until its
    old deadline.
    """

    def __init__(self) -> None:
        self.due: list[tuple[float, int, asyncio.Future[None]]] = []  # the event loop's only
        self.inside: set[asyncio.Future[None]] = set()
        """The waiters in `due` not yet counted as left: live ones, and those left but not yet told."""
        self.dead = 0
        """Entries of `due` whose waiter left before its deadline (counted, not yet swept)."""
        self.order = itertools.count()  # ties: first come, first woken (futures do not compare)
        self.checking = False
        self.alarm = math.inf  # when the thread must wake the loop; shared, under `changed`
        self.changed = threading.Condition()
        self.thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop

    async def until(self, deadline: float) -> None:
        """Return once the clock has reached `deadline`."""
        await self.at(deadline)

    def at(self, deadline: float) -> asyncio.Future[None]:
        """A future done when the clock reaches `deadline` (or sooner, if someone sets it: a cancel
        ahead in the prefill lane moves a first token up)."""
        self.loop = asyncio.get_running_loop()
        wake: asyncio.Future[None] = self.loop.create_future()
        if deadline <= clock():
            wake.set_result(None)
            return wake
        heapq.heappush(self.due, (deadline, next(self.order), wake))
        self.inside.add(wake)
        wake.add_done_callback(self._left)
        self._look()
        return wake

    def _left(self, wake: asyncio.Future[None]) -> None:
        """A waiter left before its deadline (woken sooner, or cancelled): count it dead, and
        sweep once the dead outnumber the live by SLACK."""
        if wake not in self.inside:
            return  # swept already, or popped at its time
        self.inside.discard(wake)
        self.dead += 1
        if self.dead > len(self.due) - self.dead + SLACK:
            self._sweep()

    def _sweep(self) -> None:
        """Rebuild the heap from the waiters still waiting (the alarm may then be early: harmless,
        the loop looks and sets it again)."""
        self.due = [entry for entry in self.due if not entry[2].done()]
        heapq.heapify(self.due)
        self.inside = {entry[2] for entry in self.due}
        self.dead = 0

    def _look(self) -> None:
        """Check now, unless the loop already checks on each pass (it will see the newcomer)."""
        if not self.checking:
            self._check()

    def _check(self) -> None:
        """Wake the waiters whose time has come; then check again next pass, or set the thread's alarm."""
        now = clock()
        while self.due and self.due[0][0] <= now:
            wake = heapq.heappop(self.due)[2]
            if wake in self.inside:  # live (or left, its count not yet in): it leaves now
                self.inside.discard(wake)
                wake.remove_done_callback(self._left)
            else:  # counted dead: no longer in the heap
                self.dead -= 1
            wake_up(wake)
        self.checking = bool(self.due) and self.due[0][0] - now <= EARLY_S
        if self.checking:
            self.loop.call_soon(self._check)  # this close, each pass of the loop checks
        elif self.due:
            self._alarm(self.due[0][0] - EARLY_S)

    def _alarm(self, at: float) -> None:
        if at >= self.alarm and self.thread is not None:
            # Set already, as early or earlier: no lock (most calls, at 64 streams). Read without
            # the lock, `alarm` may be stale only just after the thread woke, and the thread then
            # has the loop look again (`_look`), which sets the alarm anew.
            return
        with self.changed:
            if at < self.alarm:
                self.alarm = at
                self.changed.notify()
            if self.thread is None:
                self.thread = threading.Thread(target=self._sleeper, name="felab-on-time", daemon=True)
                self.thread.start()

    def _sleeper(self) -> None:
        """The thread: sleep until the alarm (or a sooner one is set), then wake the event loop."""
        while True:
            with self.changed:
                while (wait := self.alarm - clock()) > 0:
                    if math.isinf(wait) and not self.changed.wait(IDLE_S):
                        self.thread = None  # nothing to wait for: end (started again when needed)
                        return
                    if not math.isinf(wait):  # a far deadline in steps: a wait of years overflows
                        self.changed.wait(min(wait, IDLE_S))  # the lock's timeout, and kills the thread
                self.alarm = math.inf
            try:
                self.loop.call_soon_threadsafe(self._look)
            except RuntimeError:  # the event loop is closed: the server has stopped
                with self.changed:
                    self.thread = None
                return
