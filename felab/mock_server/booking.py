"""The booking core: what the practice server does with a request, with no HTTP in it.

    book(prompt, reply_tokens, arrival, now)  ->  Booking
      1. route    the fleet picks a replica                              (fleet.py)
      2. seat     with --seats, it waits for one, first come first served (seats.py)
      3. look up  the replica's cache: how much of the prompt it holds   (cache.py;
                  with --cache-mode seat-prefix, what its seat last read, or a
                  prompt saved in host memory: host_cache.py)
      4. queue    the replica's engine loop gives the prompt its turn    (loop.py)
      5. insert   the prompt's blocks are cached, in use until its prefill ends
      6. count    the replica's counters (/metrics); the usage the client gets

The Booking it returns is the prediction: when the first token comes, and every
token after it. The HTTP layer (app.py) only parses a request, books it here and
writes the reply at the booked times. Nothing here reads a clock or sleeps: the
caller says what time it is. The live server passes its event loop's clock; a
replay of a production trace (felab/replay) passes the trace's timestamps and
so runs an hour of traffic in seconds, through this same code.

As live, a request finds the blocks of every prompt booked before it on its
replica, even one still prefilling: the lane is first come first served, so by
the time this prompt is read, every earlier one has been.

One exception to "the prediction is known at booking": with seats, a
hang-up parks the requests still waiting for a seat (their first token unknown)
and admits each when a seat is free for it, so that a hang-up costs what it
changes, not a plan of every queued request (`_readmit`); `on_moved` tells the
server whose wait to wake.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from felab.mock_server.config import Settings
from felab.mock_server.fleet import Fleet, Replica, Weights
from felab.mock_server.host_cache import HostCache
from felab.mock_server.loop import Loop, Turn
from felab.mock_server.seats import Seat, Seats
from felab.mock_server.step import reply_context
from felab.mock_server.timing import Prefill


@dataclass(frozen=True)
class Prompt:
    """A prompt as the model sees it: its length, its block keys, and its session value (if any)."""

    tokens: int
    keys: Sequence[int]
    session: str | None = None


@dataclass(slots=True)  # a replay can hold a million in flight: no __dict__ each
class Booking:
    """One request's place in the model: its replica, what was cached, and when its tokens come."""

    rid: str
    replica: Replica
    prompt_tokens: int
    cached_tokens: int
    reply_tokens: int
    arrival: float
    prefill: Turn
    keys: Sequence[int] = ()
    """The prompt's block keys; the first `found_blocks` were in the cache when it was booked."""
    seat: Seat | None = None
    """The seat it holds from admission (`prefill.ready_at`) to its reply's end; None: no limit."""
    ready: float = 0.0
    """When its prefill could have started on an idle server: arrival plus the overhead."""
    restore_s: float = 0.0
    """What copying its prompt back from host memory takes once it has a seat (host_cache.py)."""

    @property
    def follows_steps(self) -> bool:
        """Whether its reply's tokens follow the engine's steps (--batch-tokens: loop.py), so
        that a prompt that comes, or one that hangs up, may move them."""
        return self.replica.lane.batch_tokens is not None

    @property
    def interval_s(self) -> float:
        """Seconds between two reply tokens, on average: its turn's booked gap (`_pace`)."""
        return self.prefill.gap

    @property
    def found_blocks(self) -> int:
        """How many leading blocks of its prompt were cached when it was booked."""
        return self.cached_tokens // self.replica.cache.block_tokens

    @property
    def first_token_at(self) -> float:
        return self.prefill.end

    @property
    def ttft_s(self) -> float:
        """The time to first token the model predicts (it moves up if a request ahead is cancelled)."""
        return self.prefill.end - self.arrival

    @property
    def queue_s(self) -> float:
        """Time spent waiting, after the overhead: for a seat (if limited), then for the prefill lane."""
        return self.prefill.start - self.ready

    def tokens_due(self, now: float) -> int:
        """How many reply tokens were due by `now` (what a client that left then had received)."""
        return min(self.reply_tokens, self.prefill.tokens_due(now))

    def token_at(self, i: int) -> float:
        """When reply token i (0-based) is due: each its gap after the one before, `interval_s` on
        average (loop.py, `Turn.gaps`); with steps (--batch-tokens), at the end of each step its
        stream is in."""
        return self.prefill.token_at(i)

    @property
    def reply_end(self) -> float:
        """When its last reply token is due (its first token, for an empty reply). Its turn's
        `reply_end` while the turn writes the whole reply (a replay asks 145,000 times); after a
        hang-up cut the turn's reply short, the token the reply booked would have ended with."""
        if self.prefill.reply == self.reply_tokens:
            return self.prefill.reply_end
        return self.token_at(max(self.reply_tokens - 1, 0))

    def usage(self) -> dict[str, Any]:
        """OpenAI's usage object, with the cached part of the prompt as vLLM and Fireworks report it."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.reply_tokens,
            "total_tokens": self.prompt_tokens + self.reply_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


def _shared(later: Booking, cancelled: Booking) -> int:
    """How many leading blocks of `cancelled`'s prompt `later` found in the cache when booked.

    Keys are chained (a key stands for its block and every block before it: cache.py), so two
    prompts agree on a run of leading keys exactly up to the last key they share: a bisection.
    """
    lo, hi = 0, min(later.found_blocks, len(cancelled.keys))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if later.keys[mid - 1] == cancelled.keys[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class PracticeModel:
    """The practice server's whole state: a fleet of replicas, and the bookings made on it."""

    def __init__(self, settings: Settings) -> None:
        self.settings, self.timing = settings, settings.timing
        cache = (settings.cache_blocks, settings.block_tokens, settings.cache_ttl_s)
        weights = Weights(
            settings.route_prefill_weight, settings.route_temperature, settings.route_cache_threshold
        )
        self.fleet = Fleet(settings.replicas, settings.route, cache, self.timing, settings.seed, weights)
        if settings.seats is not None:
            for r in self.fleet.replicas:
                r.seats = Seats(settings.seats, by_prefix=settings.cache_mode == "seat-prefix")
                if settings.host_cache_tokens:  # llama-server's --cache-ram (host_cache.py)
                    r.seats.host = HostCache(settings.host_cache_tokens // settings.block_tokens)
        if settings.batch_tokens is not None:  # first tokens at the ends of engine steps (loop.py)
            for r in self.fleet.replicas:
                policy = settings.step_policy
                parse_s = self.timing.overhead_ms / 1000
                r.lane = Loop(settings.batch_tokens, self.timing, policy == "vllm", policy == "mlx", parse_s)
        self.ids = itertools.count()
        self.live: dict[str, Booking] = {}
        """Bookings whose reply is not over, in the order they were booked."""
        self.hung_up: dict[str, Booking] = {}
        """Bookings whose client hung up during their prefill and whose lane time live prompts
        may still need (`cancel`); dropped once their kept prefill is over."""
        self.parked: dict[int, dict[str, Booking]] = {}
        """Per replica (with seats): live bookings waiting for a seat whose times are
        not planned, in booking order (`_readmit`); each is admitted when a seat is free for it."""
        self.planned: dict[int, dict[str, Booking]] = {}
        """Per replica: the live bookings not parked, in booking order."""
        self.finders: dict[int, int] = {}
        """Per replica: how many live bookings found part of their prompt cached (if none, no
        hung-up prompt has work a live one relies on: a hang-up need not look)."""
        self.on_moved: Callable[[list[Booking]], None] = lambda bookings: None
        """Told the bookings whose first token may have moved up (the server wakes their waits)."""
        self.now = -math.inf
        """The latest time a caller has said it is (a reply's end, told late, is never before it)."""

    def book(self, prompt: Prompt, reply_tokens: int, arrival: float, now: float) -> Booking:
        """Route, seat, look up, queue, insert and count one request that arrived at `arrival`."""
        ready = arrival + self.timing.overhead_ms / 1000  # its prefill may start then, not before
        self.now = max(self.now, now)
        if self.hung_up:  # bounded by what is in flight, also when nobody hangs up again
            self.forget_hung_up(now)
        self._plan_parked(now)
        replica = self.fleet.pick(prompt.tokens, prompt.keys, prompt.session, now, ready)
        seat, admission, reused, restore_s = self._seat(replica, prompt, ready)
        cached = prompt.tokens - self._uncached(replica, prompt, reused, now)
        uncached = prompt.tokens - cached
        rank = None if seat is None or replica.seats is None else replica.seats.seats.index(seat)
        prefill = replica.lane.book(admission, now, uncached, cached, rank, reply_tokens)
        if self.settings.cache_mode == "blocks":  # (batched, prefill.end may move later, by less than
            replica.cache.insert(prompt.keys, used_at=prefill.end)  # a batch: the TTL starts that early)
        self._pace(replica, prefill, reply_context(prompt.tokens, reply_tokens))
        rid, tokens = f"{next(self.ids)}", prompt.tokens
        b = Booking(rid, replica, tokens, cached, reply_tokens, arrival, prefill, prompt.keys)
        b.seat, b.ready, b.restore_s = seat, ready, restore_s
        self.live[b.rid] = b
        self.planned.setdefault(replica.index, {})[b.rid] = b
        if cached:
            self.finders[replica.index] = self.finders.get(replica.index, 0) + 1
        if replica.seats is not None and seat is not None:
            replica.seats.hold(seat, admission, b.reply_end, prompt.keys, b)
            self._follow_plan(b, now)
        replica.hold(prompt.tokens + reply_tokens, arrival)
        replica.stats.admit(prompt.tokens, cached)
        return b

    def _pace(self, replica: Replica, prefill: Turn, context: int) -> None:
        """Its reply's mean gap between tokens (its turn's `gap`, `Booking.interval_s`): a decode
        step of the streams decoding on `replica` when its first token comes, each at the reply's
        mean `context` (prompt and half the reply: step.reply_context); each gap one token of
        context longer than the last (`Turn.gaps`)."""
        streams = self.streams(replica, prefill.end)
        interval = self.timing.token_interval_s(streams, context)
        growth = self.timing.token_interval_s(streams, context + 1) - interval  # (one more to attend)
        replica.lane.pace(prefill, interval, growth)

    def _plan_parked(self, now: float) -> None:
        """Plan every request parked for a seat: one booked now comes after each of them, so they
        are planned first, and the time it is booked is known now."""
        for index, parked in self.parked.items():
            if parked:
                self.on_moved(self._catch_up(self.fleet.replicas[index], now, everyone=True))

    def _seat(self, replica: Replica, prompt: Prompt, ready: float) -> tuple[Seat | None, float, int, float]:
        """The seat a prompt ready at `ready` waits for (seats.py; None: the replica has no seats),
        when it is admitted, the cache blocks the seat holds of it, and the seconds to copy back
        the prompt saved in host memory that it shares most with, paid before its prefill."""
        if replica.seats is None:
            return None, ready, 0, 0.0
        seat, admission, reused = replica.seats.admit(ready, prompt.keys)
        if replica.seats.host is None:
            return seat, admission, reused, 0.0
        reused, restore_s = self._restore(replica, seat, admission, prompt.keys, reused)
        return seat, admission + restore_s, reused, restore_s

    def _restore(
        self, replica: Replica, seat: Seat, admission: float, keys: Sequence[int], reused: int
    ) -> tuple[int, float]:
        """The blocks its seat holds of the prompt once the best prompt saved in host memory is
        copied back into it (host_cache.py), and that copy's seconds, paid before its prefill."""
        assert replica.seats is not None
        restored = replica.seats.restore(seat, admission, keys, reused) - reused
        seconds = self.settings.host_restore_us * 1e-6 * restored * replica.cache.block_tokens
        return reused + restored, seconds

    def _uncached(self, replica: Replica, prompt: Prompt, reused: int, now: float) -> int:
        """The prompt tokens `replica` must prefill: those its cache lacks (`blocks`), or with
        `seat-prefix` those past what its seat's last prompt shares (`reused` blocks; llama.cpp
        reads at least one token)."""
        if self.settings.cache_mode == "blocks":
            return replica.cache.uncached_tokens(prompt.tokens, prompt.keys, now)
        return max(prompt.tokens - reused * replica.cache.block_tokens, min(prompt.tokens, 1))

    def _follow_plan(self, b: Booking, now: float) -> None:
        """A seated booking whose prompt joined the engine's steps: they were planned again, so
        replies may end later; the seats follow (or, where a later request now holds a seat one needs,
        the waiting requests are admitted again)."""
        replica, prefill = b.replica, b.prefill
        prefill.holder = b
        moved = [t.holder for t in replica.lane.replanned.values() if isinstance(t.holder, Booking)]
        moved = [x for x in moved if x.rid in self.live]  # (a hung-up one holds no seat)
        if any(x.seat is not None and x.seat.holder is not x for x in moved):
            self.on_moved(self._readmit(replica, now, everyone=True))  # a later one holds its seat
        else:
            self._rehold(moved)

    def streams(self, replica: Replica, at: float) -> int:
        """Streams decoding on `replica` at `at`, one starting then included (it sets how fast each
        decodes: timing.py). Counted when a request is booked and kept for its reply. With seats,
        only each seat's last holder can be on it at `at` (admission is first come first served, and
        `at` is past every admission so far): a look at each seat, not at every live request (a
        replay's overloaded replica holds thousands)."""
        if not self.timing.decode_slowdown:
            return 1
        if replica.seats is not None:
            holders = (s.holder for s in replica.seats.seats)
            mine: Iterable[Booking] = (b for b in holders if isinstance(b, Booking) and b.rid in self.live)
        elif replica.lane.batch_tokens is None:
            mine = self._latest(replica, at)
        else:
            mine = (b for b in self.live.values() if b.replica is replica)
        return 1 + sum(b.first_token_at <= at < b.reply_end for b in mine)

    def _latest(self, replica: Replica, at: float) -> Iterator[Booking]:
        """`replica`'s live bookings, the latest booked first, down to the first whose reply was over
        by `at` for certain: its first token more than the longest reply (the lane's `span`) before
        `at`. On the lesson's engine (one prompt a step, by arrival) first tokens come in booking
        order, so every one booked before it is over too. (A replay's overloaded replica holds
        thousands queued: counting them all for each request took 74 s for the Mooncake hour.)"""
        since = at - replica.lane.span
        for b in reversed(self.planned.get(replica.index, {}).values()):
            if b.first_token_at < since:
                return
            yield b

    def finish(self, booking: Booking, now: float | None = None) -> None:
        """The reply is over: sent whole (`now` None), or its client gone at `now`. Counts what
        was really served: the tokens due by then, and the TTFT only if the first token came.
        A reply sent whole frees its seat at its end: requests parked for a seat may take it."""
        sent = booking.reply_tokens if now is None else booking.tokens_due(now)
        booking.replica.stats.served(booking.ttft_s if sent else None, sent)
        if self.live.pop(booking.rid, None) is not None:
            released = booking.reply_end if now is None else now
            booking.replica.hold(-(booking.prompt_tokens + booking.reply_tokens), released)
            self.planned.get(booking.replica.index, {}).pop(booking.rid, None)
            if booking.cached_tokens:
                self.finders[booking.replica.index] -= 1
            if now is None and self.parked.get(booking.replica.index):
                self.now = max(self.now, booking.reply_end)  # (told a little after it, by a timer)
                self.on_moved(self._catch_up(booking.replica, self.now))

    def in_flight(self) -> list[tuple[int, Prefill]]:
        """(replica, its prefill in the lane) of every request being served now (for the gauges)."""
        return [(b.replica.index, b.prefill) for b in self.live.values()]

    def cancel(self, booking: Booking, now: float) -> bool:
        """Its client hung up at `now`: give the lane back the time no live request needs, as an
        engine aborts a request.

        Prompts booked after it on its replica found its blocks in the cache; the part of its
        prefill that *live* ones count on, of the blocks it computes itself (not those it found),
        is kept in the lane (done for them, before their turn),
        so they are not served blocks nobody computed. That claim is theirs: when they hang up
        too, every hung-up prompt they relied on gives its kept time back (`_release`), so a
        chain of hung-up prompts, each extending the last, leaves nothing behind. Blocks that are
        never computed leave the cache: a later prompt must prefill them.
        True if prompts queued behind it moved up (their waiters should look again).
        """
        self.now = max(self.now, now)
        replica, gave_back = booking.replica, False
        unplanned = self._unpark(booking, now)
        self.finish(booking, now)
        stopped = replica.lane.stop(booking.prefill, now)
        if booking.prefill.end > now:  # still prefilling or waiting: give its lane time back
            gave_back = self._give_back(booking, unplanned, now)
            if unplanned and not gave_back:
                return False  # nothing planned moved
        return self._move_up(replica, gave_back or stopped, now)

    def _unpark(self, booking: Booking, now: float) -> bool:
        """Whether a hung-up `booking` was parked (waiting for a seat: not in the lane); it leaves
        the parked. One that a live prompt relies on is planned first, as any such prompt is, and
        so was not parked after all."""
        parked = self.parked.get(booking.replica.index, {})
        if booking.rid not in parked:
            return False
        if self._relied_on(booking):
            self._catch_up(booking.replica, now, through=booking)
            return False
        del parked[booking.rid]
        return True

    def _move_up(self, replica: Replica, freed: bool, now: float) -> bool:
        """After a hang-up on `replica` (`freed`: it gave lane time back or stopped a reply): the
        requests behind it move up, and their waiters are told. True if any moved."""
        if replica.seats is not None:  # only what it moved
            moved = self._readmit(replica, now)
            self.on_moved(moved)
            return bool(moved)
        if freed and replica.lane.reflow(now):
            self.on_moved([b for b in self.live.values() if b.replica is replica])
            return True
        return False

    def _give_back(self, booking: Booking, unplanned: bool, now: float) -> bool:
        """A hung-up booking still prefilling or waiting: every hung-up prompt it relied on, and
        itself (if it is in the lane), gives back what no live request needs (`_release`). An
        unplanned one (parked for a seat) has nothing in the lane: its own blocks leave the cache.
        True if any lane time was given back."""
        replica = booking.replica
        earlier = (g for g in self.hung_up.values() if g.replica is replica and g is not booking)
        relied_on = [g for g in earlier if _shared(booking, g) > g.found_blocks]
        if unplanned:  # nothing of it is in the lane; its blocks will never be computed
            self._forget_own_blocks(booking, booking.found_blocks)
        else:
            self.hung_up[booking.rid] = booking
            relied_on.append(booking)
        gave_back = any([self._release(ghost, now) for ghost in relied_on])  # each, no short cut
        self.forget_hung_up(now)
        return gave_back

    def forget_hung_up(self, now: float) -> None:
        """Drop the hung-up prompts with nothing left to give back: their kept prefill is over."""
        for rid in [rid for rid, g in self.hung_up.items() if g.prefill.end <= now or not g.prefill.seconds]:
            del self.hung_up[rid]

    def _readmit(self, replica: Replica, now: float, everyone: bool = False) -> list[Booking]:
        """With seats: admit again, first come first served, the requests waiting for
        a seat on `replica` (a hang-up freed one, or gave lane time back), as far as a seat is free
        for them by `now`; park the rest. The bookings whose first token may have moved.

        A parked request has no planned time (its first token: inf) and holds no seat; each is
        admitted when a seat is free for it (`_catch_up`: at a hang-up, at a reply's end, or
        when a request comes). So a hang-up plans again only the requests that start by now and
        the batches they share, not every request queued behind it; and each is admitted, and
        its batches planned, seeing the ones admitted before it, so that no seat holds two at once.
        """
        assert replica.seats is not None
        planned = self.planned.setdefault(replica.index, {})
        mine = list(planned.values())
        was = {b.rid: (b.first_token_at, b.reply_end) for b in mine}
        waiting = [b for b in mine if b.prefill.ready_at >= now]  # not admitted by now
        replica.lane.withdraw([b.prefill for b in waiting], now)
        self._free_seats(replica, mine, now)
        self._park(replica, waiting)
        moved = self._catch_up(replica, now, everyone=everyone)
        return moved + _sooner(mine, was, besides={b.rid for b in moved})

    def _park(self, replica: Replica, waiting: list[Booking]) -> None:
        """Take the requests `waiting` for a seat out of the plan: parked, ahead of those parked
        already (booked before them)."""
        if not waiting:
            return
        self.parked[replica.index] = {**{b.rid: b for b in waiting}, **self.parked.get(replica.index, {})}
        for b in waiting:
            del self.planned[replica.index][b.rid]

    @staticmethod
    def _free_seats(replica: Replica, planned: list[Booking], now: float) -> None:
        """Each seat of `replica` is free now, unless one of the `planned` requests admitted by
        now holds it: then when the last of them to end its reply does (not one waiting: it is
        admitted again, or parked)."""
        assert replica.seats is not None
        held: dict[int, Booking] = {}  # seat -> the request admitted to it (the last, if several)
        for b in (b for b in planned if b.seat is not None and b.prefill.ready_at < now):
            if id(b.seat) not in held or b.reply_end > held[id(b.seat)].reply_end:
                held[id(b.seat)] = b
        for seat in replica.seats.seats:
            holder = held.get(id(seat))
            seat.free_at = min(seat.free_at, now) if holder is None else max(now, holder.reply_end)
            seat.holder = holder
        replica.seats.last_admission = min(replica.seats.last_admission, now)

    def _catch_up(
        self, replica: Replica, now: float, through: Booking | None = None, everyone: bool = False
    ) -> list[Booking]:
        """Admit the parked requests of `replica` in order while a seat is free by `now` (or up to
        `through`, or `everyone`); each is planned as a newcomer is booked. The
        bookings whose times moved: those admitted, and those whose batches they joined."""
        parked, seats = self.parked.get(replica.index), replica.seats
        moved: dict[str, Booking] = {}
        by_seats = through is None and not everyone  # each only once a seat is free for it
        while parked and seats is not None:
            b = next(iter(parked.values()))
            if by_seats and min(s.free_at for s in seats.seats) > now:
                break  # no seat free yet: the reply's end (or hang-up) that frees one admits it
            moved.update((x.rid, x) for x in self._admit(replica, b, now))
            if b is through:
                break
        return list(moved.values())

    def _admit(self, replica: Replica, b: Booking, now: float) -> list[Booking]:
        """Admit the parked `b` to the seat free first, and plan it as a newcomer is booked. It,
        and the bookings whose batches it joined (their first tokens, and seats, move)."""
        seats, lane = replica.seats, replica.lane
        assert seats is not None
        seat, at, _ = seats.admit(b.ready, b.keys)  # (maybe later: its overhead, the one before)
        at += b.restore_s  # the cache match it was booked with stays, and its copy's cost
        del self.parked[replica.index][b.rid]
        self.planned.setdefault(replica.index, {})[b.rid] = b
        replanned = lane.rejoin(b.prefill, at, seats.seats.index(seat), now)
        b.seat = seat  # (the cache match it was booked with stays)
        seats.hold(seat, at, b.reply_end, b.keys, b)
        behind = [t.holder for t in replanned if isinstance(t.holder, Booking) and t.holder.rid in self.live]
        self._rehold([x for x in behind if x.seat is not None and x.seat.holder is x])
        return [b, *behind]

    def _relied_on(self, booking: Booking) -> bool:
        """Whether a live prompt booked after it found any of its blocks in the cache."""
        order = int(booking.rid)
        return self.finders.get(booking.replica.index, 0) > 0 and any(
            b.cached_tokens > booking.cached_tokens and b.replica is booking.replica and int(b.rid) > order
            for b in self.live.values()
        )

    def _forget_own_blocks(self, booking: Booking, kept: int) -> None:
        """Forget the blocks of its prompt past its first `kept`: they will never be computed."""
        if self.settings.cache_mode == "blocks":
            booking.replica.cache.forget(booking.keys[kept:])
        if booking.seat is not None and booking.seat.keys is booking.keys:  # seat-prefix: what it read
            booking.seat.keys = booking.keys[:kept]
        host = booking.replica.seats.host if booking.replica.seats is not None else None
        if host is not None:  # saved from its seat before it hung up: only what it computed
            host.forget(booking.keys, kept)

    @staticmethod
    def _rehold(bookings: list[Booking]) -> None:
        """A seat is held until its reply ends: when the batches are planned again (a prompt came,
        in a lower seat or before a batch formed), earlier prompts' first tokens, and so their
        replies' ends, may come later. (In a reseat, a request admitted to a seat before a later
        plan moved its holder's end keeps that admission: rare, and at most a batch early.)"""
        for b in bookings:
            if b.seat is not None:
                b.seat.free_at = max(b.seat.free_at, b.reply_end)

    def _release(self, ghost: Booking, now: float) -> bool:
        """Cut a hung-up prompt's lane time to what it used by `now` and what live prompts booked
        after it still need of its own work: the blocks past those it found cached when booked
        (another prompt computes those; a live prompt that needs only them needs nothing of it).
        Forget the blocks it will never compute. Moves no other prefill (the caller reflows the
        lane once). True if it gave time back."""
        replica, prefill = ghost.replica, ghost.prefill
        block = replica.cache.block_tokens
        before = ghost.cached_tokens  # tokens already in context when its prefill began
        uncached = ghost.prompt_tokens - before
        holds = (before + self.timing.computed_tokens(prefill.seconds, uncached, before)) // block
        needed = 0  # of its own tokens: the blocks it found, another prompt computed (or keeps)
        order = int(ghost.rid)
        finders = self.live.values() if self.finders.get(replica.index) else ()  # none: none need it
        for b in finders:  # the live prompts booked after it on its replica that found more than it
            if b.cached_tokens > before and b.replica is replica and int(b.rid) > order:
                needed = max(needed, _shared(b, ghost) * block - before)
                if needed > 0 and needed >= holds * block - before:
                    return False  # a live prompt needs all it computes: nothing to give back
        if needed > uncached - self.timing.untiled_rows(uncached):
            return False  # a live prompt needs part of its last piece of few rows, which ends it
        booked_end = prefill.end  # when its blocks were last said to be used
        keep_s = self.timing.read_s(max(0, needed), before)
        if not replica.lane.shorten(prefill, now, keep_s):
            return False
        kept = (before + self.timing.computed_tokens(prefill.seconds, uncached, before)) // block
        self._forget_own_blocks(ghost, kept)
        # Its kept blocks were last used when its (shortened) prefill stops, not at the old end:
        # the time to live counts from then (unless a later prompt has used them since).
        replica.cache.restamp(ghost.keys[:kept], booked_end, max(now, prefill.end))
        return True

    def reset_caches(self) -> int:
        """Forget every cached block of every replica, as a restart would: the block cache, and
        with seat-prefix the prompts its seats (and their host tier) keep; how many were dropped."""
        dropped = 0
        for r in self.fleet.replicas:
            dropped += len(r.cache) + (r.seats.clear() if r.seats is not None else 0)
            r.cache.clear()
        return dropped


def _sooner(bookings: list[Booking], was: dict[str, tuple[float, float]], besides: set[str]) -> list[Booking]:
    """The `bookings` (but those whose ids are in `besides`) whose first token, or reply's end
    (its tokens follow the steps: a step taken out of its way), comes sooner than it `was` (by
    request id) before."""
    return [
        b
        for b in bookings
        if b.rid not in besides and (b.first_token_at < was[b.rid][0] or b.reply_end < was[b.rid][1])
    ]
