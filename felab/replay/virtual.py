"""Virtual time: a trace through the practice server's own model, with a clock that jumps.

    for each request, in the trace's order:
        now = its timestamp (divided by --speed)
        finish every reply that ended by now          (events: reply ends)
        refuse it if it does not fit the context, as the live server does (room.py)
        book it: PracticeModel.book(prompt, reply, arrival=now, now=now)

`PracticeModel` (felab/mock_server/booking.py) is the code that serves live requests:
the fleet routes, the replica's cache is looked up and its blocks inserted, the prefill
lane gives the prompt its turn, blocks expire after `--cache-ttl` seconds of *trace*
time. Nothing sleeps: the clock jumps from one event to the next, so an hour of traffic
takes seconds. As live, a request finds the blocks of every prompt booked before it on
its replica (the lane is first come first served). With `--batch-tokens`, a request's
first token may still move later while its last step is not formed (loop.py): it is
tallied once a request arrives after that step began, and its reply retires at its end
as it is by then.

Memory. A request is held from its booking until its reply ends in trace time, then
retired (`PracticeModel.finish`), as the live server does. A fleet that keeps up holds
a few hundred; one that cannot holds every request still queued, which on an overloaded
replica is most of the trace: so what is held per request is kept small (its ids as
`array('q')` until booked, then dropped; about 0.75 KB of the core's booking and lane
turn remains), `in_flight_max` in the row says how many were held at once, and the TTFT
and queue percentiles keep 16 bytes a request (tally.py).

The prompt's keys are the trace's own ids, used as they are: Mooncake's ids already
stand for a block *and everything before it* (see trace.py), which is what the
practice server's chained keys are (cache.py, `block_keys`). Only full blocks are keys,
as in the model: the first `input_length // block` ids; the last id names a partial
block when the prompt does not end on a block boundary, and is never cached.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from felab.mock_server.booking import Booking, PracticeModel, Prompt
from felab.mock_server.config import Settings
from felab.mock_server.room import TooLong, reply_room
from felab.replay.collections_paused import fewer_collections
from felab.replay.tally import Tally
from felab.replay.trace import TraceRequest, check_blocks


def prompt_of(request: TraceRequest, block: int) -> Prompt:
    """The prompt as the model sees it: its length, the ids of its full blocks, its session."""
    return Prompt(request.input_tokens, request.hash_ids[: request.input_tokens // block], request.session)


def final(booking: Booking, now: float) -> bool:
    """Whether its first token can no longer move: a prompt booked from `now` on is ready after
    its last step was formed, so cannot join it (--batch-tokens: loop.py)."""
    last = getattr(booking.prefill, "last", None)
    return last is None or last.start < now


def count(tally: Tally, booking: Booking, now: float, session: str | None) -> None:
    """Tally one request that arrived at `now`, once its first token is final."""
    tally.add(
        now,
        booking.prompt_tokens,
        booking.cached_tokens,
        booking.ttft_s,
        queue_s=booking.queue_s,
        replica=booking.replica.index,
        session=session,
    )


def replay(
    path: Path, requests: Iterable[TraceRequest], settings: Settings, speed: float = 1.0
) -> tuple[Tally, list[float], float]:
    """Book every request in the model; the tally, each replica's load (its time-averaged in-flight
    tokens: `Tally.in_flight`), and wall seconds (with the garbage collector scanning less often:
    collections_paused.py)."""
    with fewer_collections():
        return _replay(path, requests, settings, speed)


def _replay(
    path: Path, requests: Iterable[TraceRequest], settings: Settings, speed: float
) -> tuple[Tally, list[float], float]:
    """`replay`, its loop."""
    model, tally = PracticeModel(settings), Tally()
    block, batched = settings.block_tokens, settings.batch_tokens is not None
    ends: list[tuple[float, int, Booking]] = []  # replies still running, the soonest first
    pending: deque[tuple[Booking, float, str | None]] = deque()  # batched: first tokens not final
    order = itertools.count()
    t0 = time.perf_counter()
    for request in requests:
        check_blocks(path, request, block)
        now = request.arrival_s / speed
        while ends and ends[0][0] <= now:
            booking = heapq.heappop(ends)[2]
            if batched and booking.reply_end > now:  # a prompt joined its last batch: it ends later
                heapq.heappush(ends, (booking.reply_end, next(order), booking))
            else:
                retire(model, tally, booking)
        while pending and final(pending[0][0], now):
            count(tally, *pending.popleft())
        try:
            reply = reply_room(settings, request.input_tokens, request.output_tokens)
        except TooLong as exc:  # the live server refuses it with a 400: counted as failed, never timed
            tally.fail(now, exc.message, request.input_tokens)
            continue
        booking = model.book(prompt_of(request, block), reply, now, now)
        if batched:
            pending.append((booking, now, request.session))  # not the request: its ids may go
        else:
            count(tally, booking, now, request.session)
        booking.keys = ()  # only a hang-up reads them again (PracticeModel.cancel); a replay never hangs up
        heapq.heappush(ends, (booking.reply_end, next(order), booking))
        tally.in_flight_max = max(tally.in_flight_max or 0, len(ends))
    for waiting in pending:
        count(tally, *waiting)
    for _, _, booking in ends:  # the replies still running when the trace ends, as they will end
        retire(model, tally, booking)
    wall = time.perf_counter() - t0
    tally.lane_uncached = [r.stats.prompt_tokens - r.stats.hits for r in model.fleet.replicas]
    return tally, tally.in_flight() or [0.0] * settings.replicas, wall


def retire(model: PracticeModel, tally: Tally, booking: Booking) -> None:
    """Its reply is over: the model frees what it held; the tally counts the tokens it held, for how long."""
    model.finish(booking)
    tokens = booking.prompt_tokens + booking.reply_tokens
    tally.held(booking.replica.index, len(model.fleet.replicas), tokens, booking.arrival, booking.reply_end)
