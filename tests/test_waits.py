"""OnTime's heap holds the waiters still waiting, not every wait ever asked for (issue 31, row 8).

A waiter leaves early when a hang-up ahead moves its first token up (it is woken, and asks again
for its new time) or when its own client hangs up (its wait is cancelled). Before, each such
entry stayed in the heap until its old deadline, minutes after a storm. These tests count the
heap's entries after storms; no timing is measured (deadlines are far off, or already due).
"""

from __future__ import annotations

import asyncio

from felab.mock_server.waits import SLACK, OnTime, clock, wake_up


async def settle() -> None:
    """Let the event loop run the callbacks of futures just done."""
    for _ in range(3):
        await asyncio.sleep(0)


def test_a_storm_of_waiters_woken_or_cancelled_leaves_the_heap() -> None:
    async def storm() -> tuple[int, int]:
        on_time = OnTime()
        far = clock() + 600  # a deadline ten minutes off: nobody reaches it in this test
        waits = [on_time.at(far + i * 0.001) for i in range(1000)]
        for i, wake in enumerate(waits):
            if i % 2:
                wake_up(wake)  # woken sooner: a hang-up ahead moved its first token up
            else:
                wake.cancel()  # its own client hung up
        await settle()
        after_storm = len(on_time.due)
        live = [on_time.at(far) for _ in range(300)]  # new waiters, then 1,000 more that leave
        for wake in [on_time.at(far + 1) for _ in range(1000)]:
            wake.cancel()
        await settle()
        assert not any(w.done() for w in live)
        return after_storm, len(on_time.due)

    after_storm, with_live = asyncio.run(storm())
    assert after_storm <= SLACK  # was 1,000: every entry until its old deadline
    assert with_live <= 2 * 300 + SLACK


def test_a_waiter_woken_again_and_again_holds_one_entry_and_is_still_woken_at_its_time() -> None:
    # As app.until_first_token does: each hang-up ahead wakes it, and it asks for its (new) time.
    async def ask_again() -> tuple[int, bool]:
        on_time = OnTime()
        deadline = clock() + 600
        for _ in range(2000):
            wake = on_time.at(deadline)
            wake_up(wake)
            await settle()
            deadline -= 0.01
        last = on_time.at(clock() - 1)  # already due: done at once, never in the heap
        soon = on_time.at(clock() + 0.01)
        await asyncio.wait_for(soon, timeout=60)  # still woken (loose: a busy machine is slow)
        return len(on_time.due), last.done()

    size, done_at_once = asyncio.run(ask_again())
    assert size <= SLACK + 1 and done_at_once


def test_a_waiter_popped_at_its_time_is_not_counted_twice() -> None:
    # A waiter woken sooner whose deadline also passes before its count comes in leaves the heap
    # once: the live count stays right, so no sweep drops a live waiter and none is missed.
    async def both() -> tuple[int, int, bool]:
        on_time = OnTime()
        early = on_time.at(clock() + 0.001)
        wake_up(early)  # left early; its callback is not run yet
        await asyncio.sleep(0.02)  # its deadline passes: the check pops it
        await settle()
        live = on_time.at(clock() + 600)
        await settle()
        return on_time.dead, len(on_time.due), live.done()

    dead, size, done = asyncio.run(both())
    assert (dead, size, done) == (0, 1, False)
