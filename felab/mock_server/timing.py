"""How long the practice server takes, and in what order it does its work.

    time to first token = overhead + wait (for a seat, then the prefill lane) + prefill
    prefill             = the prompt's steps, each priced by the cost terms
    each further token  = one decode step, priced by the same terms

What a step costs is not written here: each cost term is one small file in
felab/mock_server/terms/, and a step's time is the sum of coefficient × basis over them
(the formula, and how to add a term: terms/__init__.py). `TimingModel` holds the settings
the terms read and asks the registry: `prefill_s` is `terms.prompt_seconds`,
`token_interval_s` a decode step's `terms.step_seconds`.

Defaults (the lesson's, in config.py): 15 ms overhead, prefill at 2,500 tokens/s, decode at
400 tokens/s, every other term 0, no seat limit. A cold 3,045-token prompt:
15 + 3045/2500·1000 ≈ 1,233 ms. The same prompt with all but its last ~50 tokens cached:
15 + 50/2.5 ≈ 35 ms. `streams` is the number of requests decoding on the replica when a
request's first token comes (itself included), fixed when it is booked.

How concurrent requests share the server. Like one GPU, each replica has one prefill lane:
prompts are prefilled one after another, in arrival order, each at the full rate (a FIFO
queue, `PrefillLane`). Decoding is batched, as in vLLM or llama.cpp with several slots: every
stream decodes at once, so the queue for prefill, and for a seat where seats are limited
(seats.py), is what makes a busy server's TTFT grow. With `--batch-tokens B` (llama.cpp's -b)
the lane forms llama-server's batches instead (`BatchLane`, below).

The lane is a queue of bookings with known times, not a lock: a request's first-token time is
known when it arrives, so the server sleeps until exact deadlines and the prediction is what
the client sees. When a client hangs up, its booking gives back the time it had not used, and
the prefills queued behind it move up (`PrefillLane.cancel`), as a real engine aborts the
request. Only the part of its work that prompts booked after it count on is kept (they found
its blocks in the cache: see `PracticeModel.cancel` in booking.py). How many tokens a prefill
cut short computed is the registry's time turned back into tokens, the same way for every term
(`TimingModel.computed_tokens`). Nothing here reads a clock: every method is told the time, so
the same code runs live (the event loop's clock) and in a replay (a virtual clock).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from felab.mock_server import terms
from felab.mock_server.step import Piece, Step
from felab.mock_server.terms import untiled


@dataclass(frozen=True)
class TimingModel:
    """The settings the cost terms read (their defaults live in config.py; what each term means:
    felab/mock_server/terms/), and the times of one prompt and one reply token by them."""

    overhead_ms: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    attention_ns: float = 0.0
    decode_slowdown: float = 0.0
    cached_token_us: float = 0.0
    decode_context_ns: float = 0.0
    ubatch_tokens: int | None = None
    tile_tokens: int = 0
    untiled_ns: float = 0.0
    batch_slowdown: float = 0.0

    def prefill_s(self, uncached_tokens: int, context_before: int = 0) -> float:
        """Seconds to prefill the tokens the cache did not have, after the `context_before` it had:
        a prompt alone on an idle engine, the sum of its terms (`terms.prompt_seconds`)."""
        return terms.prompt_seconds(uncached_tokens, context_before, self)

    def alone_ms(self, uncached_tokens: int, context_before: int = 0) -> float:
        """The TTFT of one prompt alone on an idle server, ms: the overhead, then its prefill."""
        return self.overhead_ms + 1000 * self.prefill_s(uncached_tokens, context_before)

    def token_interval_s(self, streams: int = 1, context: int = 0) -> float:
        """Seconds between two reply tokens of one stream: a decode step of `streams` streams, each
        with `context` tokens before its reply (both fixed when a request is booked: an
        approximation, as the number of streams changes and the reply grows the context)."""
        return terms.step_seconds(Step(decodes=(context,) * max(streams, 1)), self)

    @cached_property
    def tiled(self) -> TimingModel:
        """The same model with no piece short of a tile: how the first tokens of a longer prompt
        are read (only a prompt's last piece can have few rows: terms/untiled.py)."""
        return dataclasses.replace(self, tile_tokens=0)

    def read_s(self, tokens: int, context_before: int = 0) -> float:
        """Seconds until the first `tokens` of a longer prompt are read, after `context_before`:
        what a prompt that short costs, read in whole tiles."""
        return terms.prompt_seconds(tokens, context_before, self.tiled)

    def untiled_rows(self, uncached_tokens: int) -> int:
        """The rows of the prompt's last piece if it is read one at a time, else 0 (terms/untiled.py)."""
        return untiled.rows(Piece(uncached_tokens), self)

    def untiled_s(self, uncached_tokens: int, context_before: int = 0) -> float:
        """What that last piece adds to the prompt's prefill (0 when it has none)."""
        return self.prefill_s(uncached_tokens, context_before) - self.read_s(uncached_tokens, context_before)

    def prefilled_tokens(self, seconds: float, context_before: int = 0, most: int | None = None) -> int:
        """How many tokens `seconds` of prefill read after `context_before` (at most `most`):
        `read_s` turned back into tokens by bisection. One routine for every term: each adds time
        with each token, so `read_s` only grows, and at least by 1 / prefill rate a token. (A
        nanosecond's slack: a time summed another way, start + seconds - start, may lose a bit.)"""
        top = int((seconds + 1e-9) * self.prefill_tokens_per_s) + 1 if most is None else most
        fits = bisect.bisect_right(
            range(top + 1), seconds + 1e-9, key=lambda n: self.read_s(n, context_before)
        )
        return max(fits - 1, 0)

    def computed_tokens(self, seconds: float, uncached_tokens: int, context_before: int = 0) -> int:
        """How many of a prompt's `uncached_tokens` `seconds` of its prefill computed (a hang-up
        keeps their blocks): all once its `prefill_s` is over; before that, what `read_s` gives in
        that time, but never its last piece of few rows, which ends its prefill."""
        if seconds >= self.prefill_s(uncached_tokens, context_before):
            return uncached_tokens
        most = uncached_tokens - self.untiled_rows(uncached_tokens)
        return self.prefilled_tokens(seconds, context_before, most)

    def growth(self, uncached_tokens: int, context_before: int = 0) -> tuple[float, int, float]:
        """For `BatchLane` only (it goes with it): the share of `read_s` that is attention, the
        tokens before the prompt, and its last piece's cost (`untiled_s`)."""
        step = Step((Piece(uncached_tokens, context_before, cached=context_before),))
        attention = terms.coefficients(self)["attention"] * terms.basis(step, self)["attention"]
        read = self.read_s(uncached_tokens, context_before)
        return (
            (attention / read if read else 0.0),
            context_before,
            self.untiled_s(uncached_tokens, context_before),
        )


@dataclass(eq=False, slots=True)  # each prefill is itself: the lane finds and removes it by identity
class Prefill:
    """One prompt's turn in a lane: it may start at `ready_at` and takes `seconds` once started."""

    ready_at: float
    seconds: float
    start: float
    dropped: bool = False
    """Hung up before it started, with nothing kept: it leaves the lane at the next reflow."""

    @property
    def end(self) -> float:
        """When its prefill is done: the time of its first token."""
        return self.start + self.seconds

    @property
    def done(self) -> float:
        """When its work in the lane ends and the next prompt's may start (its `end`, unbatched)."""
        return self.start + self.seconds


class PrefillLane:
    """One prefill at a time, first come first served."""

    def __init__(self) -> None:
        self.queue: deque[Prefill] = deque()
        """Booked prefills not known to be over yet, in order."""
        self.free_at = 0.0

    def quote(self, ready_at: float, seconds: float) -> Prefill:
        """The turn this prompt would get if booked now; books nothing (a router's question)."""
        return Prefill(ready_at, seconds, max(ready_at, self.free_at))

    def book(
        self,
        ready_at: float,
        seconds: float,
        now: float,
        tokens: int = 0,
        rank: float | None = None,
        growth: tuple[float, int, float] = (0.0, 0, 0.0),
    ) -> Prefill:
        """Book the lane for one prompt, behind every prompt booked before it (`tokens`, how
        many it prefills, its `rank` and `growth`, matter only to a lane that batches: `BatchLane`)."""
        self.forget(now)
        turn = self.quote(ready_at, seconds)
        self.queue.append(turn)
        self.free_at = turn.end
        return turn

    def forget(self, now: float) -> None:
        """Drop the prefills over by `now` from the front: nothing can move them any more."""
        while self.queue and self.queue[0].end <= now:
            self.queue.popleft()

    def cancel(self, turn: Prefill, now: float, keep_s: float = 0.0) -> list[Prefill]:
        """The client hung up at `now`: keep the lane time `turn` used (and `keep_s` of it, if
        later prompts need that much of its work), give back the rest.

        Returns the prefills that moved up (their `start` changed), so their waiters can be woken.
        """
        return self.reflow(now) if self.shorten(turn, now, keep_s) else []

    def shorten(self, turn: Prefill, now: float, keep_s: float = 0.0) -> bool:
        """Cut `turn` to the time it used by `now` or `keep_s`, whichever is longer (never longer
        than it was); one that never started and keeps nothing leaves the lane. Moves no other
        turn (`reflow` does, once, after any number of these). True if it gave time back."""
        if turn.dropped or turn.start + turn.seconds <= now:
            return False  # already prefilled: the lane time was spent
        kept = min(turn.seconds, max(now - turn.start, keep_s, 0.0))
        if kept >= turn.seconds:
            return False  # every second of it is still needed
        turn.seconds = kept
        turn.dropped = kept == 0 and turn.start > now  # still waiting, and nobody needs its work
        return True

    def reflow(
        self,
        now: float,
        before: Callable[[Prefill], None] | None = None,
        after: Callable[[Prefill], None] | None = None,
    ) -> list[Prefill]:
        """Place again, in order, every prefill not started by `now`: `before(turn)` may move its
        `ready_at` earlier (a seat freed up: seats.py), then it starts as soon as it is ready and
        the prefill before it is done (never before `now`); `after(turn)` sees its new times.
        Turns dropped by `shorten` leave the lane. The turns that moved."""
        self.queue = deque(turn for turn in self.queue if not turn.dropped)
        moved, base = [], now
        for turn in self.queue:
            if turn.start <= now:  # started: its start is history
                base = max(base, turn.end)
                continue
            if before:
                before(turn)
            start = max(turn.ready_at, base)
            if start != turn.start:
                turn.start = start
                moved.append(turn)
            base = turn.end
            if after:
                after(turn)
        self.free_at = self.queue[-1].end if self.queue else min(self.free_at, now)
        return moved


# ── Batches of prompt tokens (--batch-tokens) ────────────────────────────────


@dataclass(eq=False, slots=True)
class Batch:
    """One batch of prompt tokens: when it is formed (starts), when it is done (the first token of
    every prompt whose last token is in it), and the tokens of each prompt in it."""

    start: float
    end: float
    parts: list[tuple[BatchedPrefill, int]]


@dataclass(eq=False, slots=True)
class BatchedPrefill(Prefill):
    """A prompt's turn in a lane that batches: its first token is the end of its last batch."""

    tokens: int = 1
    """Prompt tokens it prefills; its `seconds` but the tail are spread over them as its terms say,
    the tail paid by its last token's part (`part_s`)."""
    tail: float = 0.0
    """Seconds of its `seconds` that its last piece of few rows adds (TimingModel.untiled_s): paid
    by the part holding its last token, not spread."""
    growth: float = 0.0
    """The share of its other seconds that is attention: a token's share grows with its place."""
    context: int = 0
    """Tokens in context before its first (its cached part), for the attention share."""
    rank: float = 0.0
    """Its place when a batch takes the waiting prompts: its seat's number (llama.cpp walks its
    slots in order), or its arrival where there are no seats."""
    batch: Batch | None = None
    """The batch holding its last token."""
    left: int = 0
    """Its tokens in no batch, formed or planned (while the lane plans)."""
    holder: object = None
    """Whose turn it is (the booking core's Booking), for those who must follow its moves."""

    @property
    def end(self) -> float:
        """Its first token: when the batch holding its last token is done."""
        return self.batch.end if self.batch is not None else self.start + self.seconds

    @property
    def done(self) -> float:
        """Its work ends with its last batch."""
        return self.end

    def share(self, upto: int) -> float:
        """The share of its seconds (but its `tail`) its first `upto` tokens take: the rate's part
        evenly, the attention part as each token attends to the context and the tokens before it (token i
        costs ∝ context + i, so the first x cost ∝ x·(2·context + x))."""
        g = self.growth
        return (1 - g) * upto / self.tokens + (g * self.attended(upto) if g else 0.0)

    def attended(self, upto: int) -> float:
        """The share of its attention its first `upto` tokens take: x·(2c + x) of u·(2c + u)."""
        c = self.context
        return upto * (2 * c + upto) / (self.tokens * (2 * c + self.tokens))

    def part_s(self, done: int, k: int) -> float:
        """Seconds of its tokens `done` to `done + k` (a batch's part): the last part pays the tail."""
        read = (self.seconds - self.tail) * (self.share(done + k) - self.share(done))
        return read + (self.tail if done + k >= self.tokens else 0.0)

    def tokens_in(self, seconds: float) -> int:
        """The fewest of its first tokens that take at least `seconds` (`share` inverted: with
        attention its first tokens are cheap, so `seconds` hold more of them than an even share)."""
        if seconds >= self.seconds:
            return self.tokens
        if seconds <= 0:
            return 0
        u, c, g = self.tokens, self.context, self.growth
        a = g / (u * (2 * c + u))  # share(k) = a·k² + b·k
        b = 2 * a * c + (1 - g) / u
        q = min(1.0, seconds / (self.seconds - self.tail))  # (the tail comes after its last token)
        k = q / b if a == 0 else (math.sqrt(b * b + 4 * a * q) - b) / (2 * a)
        return min(u, math.ceil(k - 1e-9))

    def keep_first(self, keep: int) -> None:
        """Keep its first `keep` tokens only (a hang-up): their seconds, and their attention share
        (no tail: the twin counts a prompt cut short as read in whole pieces, an approximation where
        the batch size is not a multiple of the piece size)."""
        read = self.seconds - self.tail
        attention = read * self.growth * self.attended(keep)
        self.seconds = read * self.share(keep)
        self.growth = attention / self.seconds if self.seconds else 0.0
        self.tokens, self.tail = keep, 0.0


class BatchLane(PrefillLane):
    """A lane that prefills in batches of up to `batch_tokens` prompt tokens (llama.cpp's -b).

    Each batch is formed when the one before it is done (or when a prompt is ready, on an idle
    lane), from the prompts waiting then, in order of `rank`, each giving as many of its tokens
    as there is room for; a batch lasts as long as its parts (`BatchedPrefill.part_s`), and
    `slowdown` longer when it holds parts of more than one prompt. A batch formed is history:
    nothing joins or leaves it. The batches not formed yet are a plan, made again from where a
    newcomer can change it (`_plan`).
    """

    def __init__(self, batch_tokens: int, slowdown: float = 0.0) -> None:
        super().__init__()
        self.batch_tokens = batch_tokens
        self.slowdown = slowdown
        """How much longer a batch shared by several prompts takes than its parts alone."""
        self.batches: deque[Batch] = deque()
        """Formed and planned batches, in order (those done are dropped from the front)."""
        self.arrivals = itertools.count()
        self.replanned: list[BatchedPrefill] = []
        """The prompts the last plan placed again (their first tokens may have moved)."""
        self.top = (-math.inf, -math.inf)
        """The highest rank and the latest ready time booked: a newcomer at or past both only
        adds to the end of the plan (first come first served, and a backlog stays cheap)."""

    def book(
        self,
        ready_at: float,
        seconds: float,
        now: float,
        tokens: int = 0,
        rank: float | None = None,
        growth: tuple[float, int, float] = (0.0, 0, 0.0),
    ) -> Prefill:
        """`growth`: the share of `read_s` (its seconds but the tail) that is attention, the tokens
        before the prompt and its last piece's cost, the tail (TimingModel.growth): its later tokens
        cost more than its first, and the batch holding its last token pays the tail (`part_s`)."""
        self.forget(now)  # (a prompt's end is its last batch's)
        while self.batches and all(t.end <= now for t, _ in self.batches[0].parts):  # history
            self.batches.popleft()
        turn = BatchedPrefill(ready_at, seconds, math.inf, tokens=max(tokens, 1))
        turn.growth, turn.context, turn.tail = growth
        turn.rank, turn.left = next(self.arrivals) if rank is None else rank, turn.tokens
        since = max(ready_at, now)  # a batch formed before it is ready is none of its business
        if (turn.rank, ready_at) >= self.top and self.batches:  # last in line: only the end moves
            since = max(since, self.batches[-1].start)
        self.top = (max(self.top[0], turn.rank), max(self.top[1], ready_at))
        self.queue.append(turn)
        self._plan(now, since, [turn])
        return turn

    def quote(self, ready_at: float, seconds: float) -> Prefill:
        return Prefill(ready_at, seconds, max(ready_at, self.free_at))  # the router's question

    def formed_tokens(self, turn: BatchedPrefill, now: float) -> int:
        """How many of its tokens are in batches formed by `now` (computed, whatever happens)."""
        later = sum(k for b in self._after(now) for t, k in b.parts if t is turn)
        return turn.tokens - turn.left - later

    def shorten(self, turn: Prefill, now: float, keep_s: float = 0.0) -> bool:
        """Keep the tokens `turn` has in batches formed by `now` (a batch under way is computed
        whole), or those `keep_s` of its time prefills, whichever are more; drop the rest."""
        if not isinstance(turn, BatchedPrefill) or turn.dropped or turn.end <= now:
            return False
        keep = max(self.formed_tokens(turn, now), turn.tokens_in(keep_s))
        if keep >= turn.tokens:
            return False
        turn.left -= turn.tokens - max(keep, 1)  # (below 0 until `reflow` takes back its plan)
        if keep:
            turn.keep_first(keep)
        else:
            turn.seconds, turn.tokens, turn.growth, turn.tail = 0.0, 1, 0.0, 0.0
        turn.dropped = keep == 0
        return True

    def reflow(
        self,
        now: float,
        before: Callable[[Prefill], None] | None = None,
        after: Callable[[Prefill], None] | None = None,
    ) -> list[Prefill]:
        """Plan again from `now` (after hang-ups): `before(turn)` may move the `ready_at` of a
        prompt with no token in a formed batch (a seat freed up), `after(turn)` sees its new
        times. The turns whose start or first token moved."""
        was = {id(t): (t.start, t.end) for t in self.queue}
        self._unplan(now)
        self.queue = deque(t for t in self.queue if not t.dropped)
        turns = [t for t in self.queue if isinstance(t, BatchedPrefill)]
        fresh = [t for t in turns if t.left == t.tokens]  # in no formed batch: not started
        self._plan(now, now, turns)
        for t in fresh:
            if before:  # one at a time: each is admitted (a seat) seeing the ones before it held
                before(t)
                self._plan(now, now, turns)
            if after:
                after(t)
        return [t for t in self.queue if not _same((t.start, t.end), was[id(t)])]

    def withdraw(self, turns: list[BatchedPrefill], now: float) -> None:
        """Take these prompts out of the lane (none has a token in a batch formed by `now`: they
        wait for a seat) and plan the rest again from `now`. They keep their tokens and seconds,
        in no batch, their start unknown (inf), until `rejoin` puts each back."""
        gone = {id(t) for t in turns}
        while self.batches and all(t.end <= now for t, _ in self.batches[0].parts):
            self.batches.popleft()  # history: nothing can move them any more
        self.queue = deque(t for t in self.queue if id(t) not in gone and t.end > now)  # (over: gone)
        self._unplan(now)
        for t in turns:
            t.batch, t.start, t.left = None, math.inf, t.tokens
        self.reflow(now)

    def rejoin(self, turn: BatchedPrefill, ready_at: float, rank: float, now: float) -> list[BatchedPrefill]:
        """Put back a prompt taken out by `withdraw`, ready at `ready_at` (its admission) with this
        `rank` (its seat), as a newcomer is booked: only the batches from when it is ready are
        planned again. The prompts that plan placed again (their first tokens may have moved)."""
        turn.ready_at, turn.rank, turn.left = ready_at, rank, turn.tokens
        self.top = (max(self.top[0], rank), max(self.top[1], ready_at))
        self.queue.append(turn)
        self._plan(now, max(ready_at, now), [turn])
        return self.replanned

    def _after(self, now: float) -> list[Batch]:
        """The batches not formed by `now`: planned (they start at `now` or later)."""
        i = len(self.batches)
        while i and self.batches[i - 1].start >= now:
            i -= 1
        return list(itertools.islice(self.batches, i, None))

    def _unplan(self, since: float) -> list[BatchedPrefill]:
        """Drop the planned batches that start at `since` or later (never one formed before it);
        their tokens go back to their prompts. The prompts they held."""
        held: dict[int, BatchedPrefill] = {}
        while self.batches and self.batches[-1].start >= since:
            batch = self.batches.pop()
            for t, k in batch.parts:
                t.left += k
                held[id(t)] = t
                if t.batch is batch:
                    t.batch = None
        return list(held.values())

    def _plan(self, now: float, since: float, newcomers: list[BatchedPrefill]) -> None:
        """Plan again from `since` (batches formed by `now` stay): the prompts waiting, batch
        after batch, as llama.cpp forms them: by rank, each as many tokens as fit."""
        waiting = {id(t): t for t in [*self._unplan(max(since, now)), *newcomers]}
        self.replanned = list(waiting.values())
        for t in waiting.values():
            if not t.left and t.batch is None:  # all its tokens in batches kept: its last one
                t.batch = next((b for b in reversed(self.batches) if any(x is t for x, _ in b.parts)), None)
        turns = [t for t in waiting.values() if t.left > 0 and not t.dropped]
        for t in turns:
            if t.left == t.tokens:
                t.start = math.inf  # in no batch: its start is planned below
        clock = max(now, self.batches[-1].end) if self.batches else now
        while turns:
            ready = sorted((t for t in turns if t.ready_at <= clock), key=lambda t: t.rank)
            if not ready:
                clock = min(t.ready_at for t in turns)
                continue
            batch, room, work = Batch(clock, clock, []), self.batch_tokens, 0.0
            for t in ready:
                if (k := min(room, t.left)) <= 0:
                    break
                batch.parts.append((t, k))
                work += t.part_s(t.tokens - t.left, k)
                t.left, room, t.start = t.left - k, room - k, min(t.start, clock)
                if not t.left:
                    t.batch = batch
            batch.end = clock + work * (1 + self.slowdown if len(batch.parts) > 1 else 1)
            self.batches.append(batch)
            turns = [t for t in turns if t.left > 0]
            clock = batch.end
        self.free_at = self.batches[-1].end if self.batches else min(self.free_at, now)


def _same(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """The same times, but for float rounding (a batch's end is a sum of its parts, in any order)."""
    return all(math.isclose(x, y, rel_tol=0, abs_tol=1e-9) or x == y for x, y in zip(a, b, strict=True))
