"""The practice server's timing model: how long a real server would take.

    time to first token = overhead + wait (for a seat, then the prefill lane) + prefill
                          (--batch-tokens B: until the batch holding its last token is done)
    prefill             = uncached / prefill rate
                          + max(attention_ns·1e-9 · uncached · (context before + uncached / 2),
                                cached_token_us·1e-6 · cached)
                          + untiled_ns·1e-9 · rows · (context before + uncached)
                                                           (a last piece of few rows: below)
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

A last piece of few rows (`--ubatch-tokens U --tile-tokens T --untiled-ns k`; off by default).
llama.cpp computes a prompt in pieces of U tokens (its -ub, 512), the last piece holding the
rest, rows = uncached mod U. On a CPU its attention takes a piece's tokens in tiles of T rows
(64: GGML_FA_TILE_Q); a piece of fewer than T tokens is read one token at a time instead, each
a pass over the whole context, as a decode step is. So a prompt 30 tokens past a multiple of 512
costs about 30 passes more than one 100 tokens past it, and a short question after a long cached
opening costs its rows times the context, whatever the rate. Measured on llama-server (the kit's
tiny model, one thread): 53 new tokens after 2,504 cached took 85 ms, 73 took 13 ms; cold,
2,599 tokens took 226 ms and 2,627 took 177 ms; k ≈ 620 ns per row and context token at 1,000
to 2,600 tokens of context. Calibrate finds U, T and k (probes.rows).

How concurrent requests share the server. Like one GPU, each replica has one
prefill lane: prompts are prefilled one after another, in arrival order, each
at the full rate (a FIFO queue). Decoding is batched, as in vLLM or llama.cpp
with several slots: every stream decodes at once (at the full rate unless a
profile sets a slowdown), so the queue for prefill, and for a seat where seats
are limited (seats.py), is what makes a busy server's TTFT grow.

Batches (`--batch-tokens B`, llama.cpp's -b; none by default). llama-server forms a batch
of up to B prompt tokens each time the one before it is done: it walks its seats (slots)
in order, and each seat with prompt tokens still to read puts in as many as there is room
for. A prompt's first token comes when the batch holding its last token is done. So four
2,600-token prompts sent at once get first tokens at the ends of batches 2, 3, 4 and 6
(tokens 4,096, 6,144, 8,192 and 10,400 of the 10,400 in a row), not at 2,600, 5,200, 7,800
and 10,400; and a prompt in a lower seat goes first, whenever it came: after earlier work
has left the seats in another order, the first prompt sent can get its first token with
the second (measured on llama-server: 548 and 549 ms). `BatchLane` keeps the batches
formed (history: nothing joins or leaves a batch under way) and plans the rest the same
way, again each time a prompt comes or hangs up (with seats, only the prompts that may start:
`withdraw` takes out those waiting for a seat, `rejoin` puts each back when it has one);
with no seats, prompts go in arrival order.

So a booked first token can move *later*, when a prompt arrives before its last batch is
formed, or takes a lower seat. A batch lasts as long as its parts, each part the time of
its tokens by the formula: the rate's share evenly, attention's by place (token i of a prompt
after c cached tokens attends to c + i), so a prompt's last tokens cost more than its first
(`BatchedPrefill.part_s`); and `batch_slowdown` longer when it holds parts of several prompts
(calibrate measures it: llama.cpp splits such a batch into small equal pieces per seat). Left
out: the decode tokens of running streams, which llama-server puts in each batch too. (The
figures behind both: docs/practice-server.md.) The router (`free_at`, `quote`) reads the end of
the last planned batch; the gauges, each prompt's first batch and first token.

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
    The last three (off by default) cost a prompt's last piece when it has too few rows for
    attention's tiles: `ubatch_tokens`, `tile_tokens`, `untiled_ns` (the module's docstring).
    """

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

    def prefill_s(self, uncached_tokens: int, context_before: int = 0) -> float:
        """Seconds to prefill the tokens the cache did not have, after `context_before` tokens
        already in context (the cached part): the linear term, plus attention, where each new
        token attends to the context and to the new tokens before it (on average half of them),
        and at least `cached_token_us` for each cached token (the max: see the docstring above),
        plus a last piece of few rows read one at a time (`untiled_s`)."""
        return self.read_s(uncached_tokens, context_before) + self.untiled_s(uncached_tokens, context_before)

    def alone_ms(self, uncached_tokens: int, context_before: int = 0) -> float:
        """The TTFT of one prompt alone on an idle server, ms: the overhead, then its prefill."""
        return self.overhead_ms + 1000 * self.prefill_s(uncached_tokens, context_before)

    def read_s(self, tokens: int, context_before: int = 0) -> float:
        """Seconds to read `tokens` after `context_before` by the formula alone, as the first tokens
        of a longer prompt are read (in whole pieces: no last piece of few rows)."""
        attention = self.attention_s(tokens, context_before)
        return tokens / self.prefill_tokens_per_s + max(attention, self.reuse_s(context_before))

    def untiled_rows(self, uncached_tokens: int) -> int:
        """The rows of the prompt's last piece if it is read one at a time, else 0: the rest after
        whole pieces of `ubatch_tokens` (none: one piece), when fewer than `tile_tokens`."""
        rows = uncached_tokens % self.ubatch_tokens if self.ubatch_tokens else uncached_tokens
        return rows if 0 < rows < self.tile_tokens else 0

    def untiled_s(self, uncached_tokens: int, context_before: int = 0) -> float:
        """What that last piece costs beyond the formula: each of its rows a pass over the context."""
        rows = self.untiled_rows(uncached_tokens)
        return self.untiled_ns * 1e-9 * rows * (context_before + uncached_tokens) if rows else 0.0

    def attention_s(self, uncached_tokens: int, context_before: int = 0) -> float:
        """Attention's part of a prefill: each new token attends to the context and to the new
        tokens before it (on average half of them)."""
        return self.attention_ns * 1e-9 * uncached_tokens * (context_before + uncached_tokens / 2)

    def growth(self, uncached_tokens: int, context_before: int = 0) -> tuple[float, int, float]:
        """How a prompt's prefill grows along it, for a lane that batches: the share of `read_s`
        that is attention (0 where the cached floor is the larger side of the max), the tokens
        before it, and its last piece's cost (`untiled_s`, paid by the batch holding its last token)."""
        attention = self.attention_s(uncached_tokens, context_before)
        read = self.read_s(uncached_tokens, context_before)
        share = attention / read if read and attention >= self.reuse_s(context_before) else 0.0
        return share, context_before, self.untiled_s(uncached_tokens, context_before)

    def reuse_s(self, cached_tokens: int) -> float:
        """The least a prefill after `cached_tokens` cached ones spends on them (0 by default)."""
        return self.cached_token_us * 1e-6 * cached_tokens

    def prefilled_tokens(self, seconds: float, context_before: int = 0) -> int:
        """How many tokens `seconds` of prefill computes after `context_before` (read_s inverted:
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

    def computed_tokens(self, seconds: float, uncached_tokens: int, context_before: int = 0) -> int:
        """How many of a prompt's `uncached_tokens` `seconds` of its prefill computed: all once its
        `prefill_s` is over; before that, what `read_s` gives in that time, but never its last
        piece of few rows, which ends its prefill (a hang-up keeps these tokens' blocks)."""
        if seconds >= self.prefill_s(uncached_tokens, context_before):
            return uncached_tokens
        done = self.prefilled_tokens(seconds, context_before)
        return min(done, uncached_tokens - self.untiled_rows(uncached_tokens))

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
