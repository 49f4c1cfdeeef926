"""Waiting for a booked time: the server's clock, and a first token sent on time to the microsecond.

The event loop wakes a timer up to about 1 ms late (the kernel's wait counts whole
milliseconds). For most tokens that is fine. The first token is the one a client's
TTFT measures, so it is sent precisely: a timer wakes its request PRECISE_S early,
and from then on one callback per pass of the event loop (`OnTime`) checks the
clock and wakes every request whose time has come. One check per pass for all the
requests in that window, not a pass of each request's whole call stack (which is
what `await asyncio.sleep(0)` in a loop costs: 64 requests due together would
each be resumed hundreds of times).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time

clock = time.monotonic
"""The server's clock, in seconds: arrivals, bookings and deadlines all read it. asyncio's own
loop.time() is this clock too, but uvloop's counts whole milliseconds, which would round every
arrival and deadline. Timers are set from it by their delay (call_later), on either loop."""

PRECISE_S = 0.002
"""How early the timer of a precise wait fires; the rest is checked on every pass of the loop."""


def wake_up(wake: asyncio.Future[None]) -> None:
    if not wake.done():
        wake.set_result(None)


async def sleep_until(deadline: float) -> None:
    """Sleep until about `deadline` (the server's clock): a timer, which may be up to ~1 ms late."""
    delay = deadline - clock()
    if delay > 0:
        await asyncio.sleep(delay)


class OnTime:
    """Wakes each waiter at its deadline, checked once per pass of the event loop near the time."""

    def __init__(self) -> None:
        self.due: list[tuple[float, int, asyncio.Future[None]]] = []
        self.order = itertools.count()  # ties: first come, first woken (futures do not compare)
        self.checking = False
        self.loop: asyncio.AbstractEventLoop  # the server's, known at the first wait

    async def until(self, deadline: float) -> None:
        """Return once the clock has reached `deadline` (PRECISE_S early on a timer, then each pass)."""
        loop = self.loop = asyncio.get_running_loop()
        wake: asyncio.Future[None] = loop.create_future()
        delay = deadline - clock() - PRECISE_S
        timer = loop.call_later(delay, self._watch, deadline, wake) if delay > 0 else None
        if timer is None:
            self._watch(deadline, wake)
        try:
            await wake
        finally:
            if timer is not None:
                timer.cancel()

    def _watch(self, deadline: float, wake: asyncio.Future[None]) -> None:
        heapq.heappush(self.due, (deadline, next(self.order), wake))
        if not self.checking:
            self.checking = True
            self.loop.call_soon(self._check)

    def _check(self) -> None:
        now = clock()
        while self.due and self.due[0][0] <= now:
            wake_up(heapq.heappop(self.due)[2])
        if self.due:
            self.loop.call_soon(self._check)  # again on the next pass
        else:
            self.checking = False
