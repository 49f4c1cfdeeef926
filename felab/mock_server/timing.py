"""The practice server's timing model: how long a real server would take.

    time to first token = overhead + wait (for a seat, then the prefill lane) + prefill
                          (--batch-tokens B: until the batch holding its last token is done)
    prefill             = uncached / prefill rate
                          + max(attention_ns·1e-9 · uncached · (context before + uncached / 2),
                                cached_token_us·1e-6 · cached)
    each further token  = 1 / decode rate · (1 + decode_slowdown · (streams - 1))
                          + decode_context_ns·1e-9 · prompt tokens        after the one before

Defaults (the lesson's, in config.py): 15 ms overhead, prefill at 2,500 tokens/s,
decode at 400 tokens/s, no attention term, no slowdown, no seat limit. A cold
3,045-token prompt: 15 + 3045/2500·1000 ≈ 1,233 ms. The same prompt with all but its
last ~50 tokens cached: 15 + 50/2.5 ≈ 35 ms. The attention term makes prefill grow
faster than linearly with the prompt, and a prompt read after a long cached context
cost more per token; `streams` is the number of requests decoding on the replica when
a request's first token comes (itself included), fixed when it is booked.

Two terms follow the context a request brings, both 0 by default (today's model).
`cached_token_us` is a floor on what reading new tokens after cached ones costs: at
least this much per cached token, paid in the prefill of the request that reuses them
(a cached prefix is not free). Measured on llama.cpp (CPU, the kit's tiny model): 24
new tokens after 5,170 cached took 70 ms, 414 after 5,190 took 88 ms, a short prompt
alone 6 ms. A few new tokens are read almost one by one, each a pass over the whole
cached context as a decode step is, so their cost follows the context, not the pairs
the attention term counts; a long new part is read in large batches, where the
attention term is the larger, hence the max. Where an engine copies a cached prompt
back in (llama.cpp's `--cache-ram`, when a prompt returns to another seat; vLLM's
offloaded blocks), that copy is a cost per cached token too. `decode_context_ns`
makes each reply token cost more after a long prompt: every decode step attends to
the whole context (the prompt's tokens; the reply's own few are left out: an
approximation, fixed at booking like `streams`).

How concurrent requests share the server. Like one GPU, each replica has one
prefill lane: prompts are prefilled one after another, in arrival order, each
at the full rate (a FIFO queue). Decoding is batched, as in vLLM or llama.cpp
with several slots: every stream decodes at once (at the full rate unless a
profile sets a slowdown), so the queue for prefill, and for a seat where seats
are limited (seats.py), is what makes a busy server's TTFT grow.

Batches (`--batch-tokens B`, llama.cpp's -b; none by default). llama-server builds each
batch of up to B prompt tokens from the waiting prompts in order, and a prompt's first
token comes only when the batch holding its last token is done. `BatchLane` keeps the
work first come first served (a prompt's work ends at start + seconds, and the next one's
starts then), but a prompt's first token is the end of its last batch, which the prompts
ready when that batch was formed fill: four 2,600-token prompts sent at once get first
tokens at the ends of batches 2, 3, 4 and 6 (tokens 4,096, 6,144, 8,192, 10,400 of the
10,400 in a row), not at 2,600, 5,200, 7,800 and 10,400.

So a booked first token can move *later*, when a prompt arrives before its last batch is
formed (so always while that first token is still to come); after a hang-up the prompts
whose work is not over are placed again by the same rule (`BatchLane.place`).
Approximations: a prompt's time (attention included) is spread evenly over its tokens, and
the decode tokens of running streams, which llama-server puts in each batch too, are not
counted. The router (`free_at`, `quote`) and the gauges read work, not batches.

The lane is a queue of bookings with known times, not a lock: a request's
first-token time is known when it arrives (with batches, it may still move later,
as above: the wait for it then waits again), so the server sleeps until exact
deadlines and the prediction is what the client sees. When a client hangs up,
its booking gives back the time it had not used, and the prefills queued
behind it move up (`PrefillLane.cancel`), as a real engine aborts the request.
Only the part of its work that prompts booked after it count on is kept (they
found its blocks in the cache: see `PracticeModel.cancel` in booking.py).
Nothing here reads a clock: every method is told the time, so the same code
runs live (the event loop's clock) and in a replay (a virtual clock).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class TimingModel:
    """The rates of the modelled server (their defaults live in config.py).

    Two terms are 0 by default (lesson 06's linear model) and set by a calibrated profile:
    `attention_ns`, attention's cost per new token per token it attends to (a prompt read
    after a long context costs more per token than the same prompt read cold), and
    `decode_slowdown`, how much each further stream decoding on the replica slows a stream.
    Two more, also 0 by default, follow the context (see the module's docstring):
    `cached_token_us`, the cost of each cached prompt token to the request reusing it, and
    `decode_context_ns`, what each token of context adds to the time of each reply token.
    """

    overhead_ms: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    attention_ns: float = 0.0
    decode_slowdown: float = 0.0
    cached_token_us: float = 0.0
    decode_context_ns: float = 0.0

    def prefill_s(self, uncached_tokens: int, context_before: int = 0) -> float:
        """Seconds to prefill the tokens the cache did not have, after `context_before` tokens
        already in context (the cached part): the linear term, plus attention, where each new
        token attends to the context and to the new tokens before it (on average half of them),
        and at least `cached_token_us` for each cached token (the max: see the docstring above)."""
        attention = self.attention_ns * 1e-9 * uncached_tokens * (context_before + uncached_tokens / 2)
        return uncached_tokens / self.prefill_tokens_per_s + max(attention, self.reuse_s(context_before))

    def reuse_s(self, cached_tokens: int) -> float:
        """The least a prefill after `cached_tokens` cached ones spends on them (0 by default)."""
        return self.cached_token_us * 1e-6 * cached_tokens

    def prefilled_tokens(self, seconds: float, context_before: int = 0) -> int:
        """How many tokens `seconds` of prefill computes after `context_before` (prefill_s inverted:
        both of the max's sides must fit in `seconds`, so the fewer tokens of the two)."""
        k, b = self.attention_ns * 1e-9, 1 / self.prefill_tokens_per_s
        if k == 0:
            done = int(round(seconds * self.prefill_tokens_per_s))
        else:
            b += k * context_before  # solve k/2 u² + b u = seconds for u
            done = int((math.sqrt(b * b + 2 * k * seconds) - b) / k + 1e-9)
        if self.cached_token_us:
            rest = max(0.0, seconds - self.reuse_s(context_before))  # the floor's side
            done = min(done, int(rest * self.prefill_tokens_per_s))
        return done

    def token_interval_s(self, streams: int = 1, context: int = 0) -> float:
        """Seconds between two generated tokens of one stream, with `streams` decoding on its
        replica and `context` tokens before the reply (both fixed when a request is booked: an
        approximation, as the number of streams changes and the reply grows the context)."""
        base = (1 + self.decode_slowdown * max(streams - 1, 0)) / self.decode_tokens_per_s
        return base + self.decode_context_ns * 1e-9 * context


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

    def book(self, ready_at: float, seconds: float, now: float, tokens: int = 0) -> Prefill:
        """Book the lane for one prompt, behind every prompt booked before it (`tokens`, how
        many it prefills, matters only to a lane that batches: `BatchLane`)."""
        while self.queue and self.queue[0].end <= now:  # over: nothing can move them any more
            self.queue.popleft()
        turn = self.quote(ready_at, seconds)
        self.queue.append(turn)
        self.free_at = turn.end
        return turn

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
    """One batch of prompt tokens: when it is formed (starts), how many tokens it holds, and when
    it is done: the first token of every prompt whose last token is in it."""

    start: float
    tokens: int
    end: float


@dataclass(eq=False, slots=True)
class BatchedPrefill(Prefill):
    """A prompt's turn in a lane that batches: its first token is the end of its last batch."""

    tokens: int = 1
    """Prompt tokens it prefills; its `seconds` are spread over them evenly (an approximation)."""
    fill: int = 0
    """How many of them joined `joined`, the batch open when it was placed."""
    joined: Batch | None = None
    batch: Batch | None = None
    """The batch holding its last token."""

    @property
    def end(self) -> float:
        """Its first token: when the batch holding its last token is done."""
        return self.batch.end if self.batch is not None else self.start + self.seconds


class BatchLane(PrefillLane):
    """A lane that prefills in batches of up to `batch_tokens` prompt tokens (llama.cpp's -b).

    Work is still first come first served: a prompt's work ends at start + seconds and the next
    prompt's starts then (`free_at` and the router's `quote` keep reading work ends). Only first
    tokens change: each comes at the end of the batch holding the prompt's last token, and that
    batch is filled with the tokens of the prompts that were waiting when it was formed.
    """

    def __init__(self, batch_tokens: int) -> None:
        super().__init__()
        self.batch_tokens = batch_tokens
        self.open: Batch | None = None
        """The batch holding the last booked prompt's last token: later prompts may join it."""

    def book(self, ready_at: float, seconds: float, now: float, tokens: int = 0) -> Prefill:
        while self.queue and self.queue[0].end <= now:  # its batch is done: nothing moves it
            self.queue.popleft()
        turn = BatchedPrefill(ready_at, seconds, 0.0, tokens=max(tokens, 1))
        self.open = self.place(turn, self.free_at, self.open, ready_at)
        self.queue.append(turn)
        self.free_at = turn.done
        return turn

    def place(
        self, turn: BatchedPrefill, free_at: float, open: Batch | None, floor: float, started: bool = False
    ) -> Batch:
        """Place `turn` behind a prompt whose work ends at `free_at` and whose last token is in
        `open` (None: no batch to join), as ready at `floor` at the earliest (a turn `started`
        keeps its start). The batch holding its last token, open to the next prompt.

        It joins `open` if it was waiting when that batch was formed and the batch has room:
        its first tokens fill the batch, whose end (the first token of every prompt ending in
        it) moves later by their time. Its other tokens fill batches of its own; its last one
        starts at token k0, at start + seconds · k0 / tokens (its time spread evenly)."""
        n, s, b = turn.tokens, turn.seconds, self.batch_tokens
        joins = open is not None and max(turn.ready_at, floor) <= open.start and open.tokens < b
        if not started:  # joining, it starts as the prompt before it ends; else after that batch too
            last_end = open.end if open is not None else free_at
            turn.start = free_at if joins else max(turn.ready_at, floor, free_at, last_end)
        turn.joined, turn.fill = open, 0
        if joins and open is not None:
            turn.fill = min(b - open.tokens, n)
            open.tokens += turn.fill
            open.end = turn.start + s * turn.fill / n
            if turn.fill == n:  # all of it in that batch: its first token is that batch's end
                turn.batch = open
                return open
        k0 = turn.fill + b * ((n - turn.fill - 1) // b)
        turn.batch = Batch(turn.start + s * k0 / n, n - k0, turn.start + s)
        return turn.batch

    def shorten(self, turn: Prefill, now: float, keep_s: float = 0.0) -> bool:
        """As the plain lane's; the tokens it prefills shrink with its seconds (spread evenly)."""
        seconds = turn.seconds
        if not super().shorten(turn, now, keep_s):
            return False
        if isinstance(turn, BatchedPrefill):
            turn.tokens = max(1, round(turn.tokens * turn.seconds / seconds))
        return True

    def reflow(
        self,
        now: float,
        before: Callable[[Prefill], None] | None = None,
        after: Callable[[Prefill], None] | None = None,
    ) -> list[Prefill]:
        """Place again, with `place`, every prompt whose work is not over by `now` (one started
        keeps its start; `before`/`after` as the plain lane's, for those not started). Their
        joins are undone first, the last first, so that each batch holds only the tokens of the
        prompts before them. The turns whose start or first token moved."""
        turns = [t for t in self.queue if isinstance(t, BatchedPrefill)]  # every one of them is
        was = [(t.start, t.end) for t in turns]
        first = next((i for i, t in enumerate(turns) if t.done >= now), len(turns))
        for t in reversed(turns[first:]):  # (each end is set again by the turn placed last in it)
            if t.fill and t.joined is not None:
                t.joined.tokens -= t.fill
        prior = turns[first - 1] if first else None
        free_at, open = (prior.done, prior.batch) if prior else (now, turns[0].joined if turns else None)
        for t in turns[first:]:
            if t.dropped:
                continue
            started = t.start <= now
            if before and not started:
                before(t)
            open = self.place(t, free_at, open, -math.inf if started else now, started)
            free_at = t.done
            if after and not started:
                after(t)
        self.queue = deque(t for t in turns if not t.dropped)
        self.free_at = self.queue[-1].done if self.queue else min(self.free_at, now)
        self.open = open if self.queue else None
        return [t for t, w in zip(turns, was, strict=True) if not t.dropped and (t.start, t.end) != w]
