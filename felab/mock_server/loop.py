"""The engine loop of one replica: steps formed as the modelled engine forms them.

With the lesson's defaults (no --batch-tokens) a step is one whole prompt, by arrival, and
replies decode beside the steps for free: the prefill lane, one prompt after another at the
full rate. A hang-up stops that step where it is (`shorten`: it reads at its rate, with no
steps inside it), so the time it did not use goes to the prompts behind it. With
--batch-tokens, the steps are llama-server's (or vLLM's, or mlx_lm.server's: `POLICIES`):

Each step (a forward pass), each stream writing its reply puts in one token; then llama-server
walks its seats in order, each with prompt tokens still to read putting in as many as there is
room for in `batch_tokens` (-b). A step lasts what the cost terms say of exactly what it holds
(`terms.step_seconds`: each piece after its own context, each stream's context), and a prompt's
first token comes at the end of the step holding its last prompt token. So four 2,600-token
prompts sent at once get first tokens at the ends of steps 2, 3, 4 and 6 (tokens 4,096, 6,144,
8,192 and 10,400 of 10,400 in a row), and a prompt in a lower seat goes first, whenever it came
(llama-server, measured: the first two of four sent at once, 548 and 549 ms).

Steps formed by `now` are history: nothing joins or leaves a step under way (but the lesson's
stops where it is), and what it computed stays (`formed_tokens`: exact). Later steps are a
plan, made again from the first step a change can touch: a prompt comes, one hangs up (it
leaves the next step), or one gets a seat (`withdraw` takes out those waiting for one, `rejoin`
puts each back). So a first token can move later or earlier; the router reads `free_at`, the
end of the plan.

A reply's tokens follow the steps: a stream writes one token in each step it is in, at the
step's end, so a step that also reads 2,048 tokens of another seat's prompt holds the reply
back for the whole step (llama-server, measured: gaps of 0.4 to 0.6 s in a reply while another
seat's prompt was read: docs/runs/2026-12-06-llama-reply-stalls.md). Between steps, where it
decodes alone, each token comes its gap after the one before (`Turn.gaps`: the booked gap on
average, each longer than the last by the context term of one token); stretches of decode alone
are not formed as steps. Nothing reads a clock: the same code runs live and in a replay.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections import deque
from dataclasses import dataclass

from felab.mock_server import terms
from felab.mock_server.step import Piece, Step, reply_context
from felab.mock_server.timing import Prefill, TimingModel


@dataclass(eq=False, slots=True)
class EngineStep:
    """One step: when it is formed (starts), when it is done, and the prompt tokens of each turn in it."""

    start: float
    end: float
    parts: list[tuple[Turn, int]]
    room: int = 0
    """The prompt tokens it had room for (its budget, less a token for each stream decoding)."""
    run: float = 0.0
    """With prefill first (mlx): when the run of steps it is in began, taking the requests waiting."""
    waiting: tuple[tuple[Turn, int], ...] = ()
    """With prefill first: the turns whose first tokens still wait after it, and for how many steps."""
    decoders: tuple[Turn, ...] = ()
    """The streams that write a reply token at its end (each has it as its last `marks` entry)."""


@dataclass(eq=False, slots=True)
class Turn(Prefill):
    """A prompt's turn in the loop: its first token is the end of the step holding its last token
    (its `seconds`: its time alone, on an idle loop)."""

    tokens: int = 1
    """Prompt tokens it reads (those not cached)."""
    cached: int = 0
    """Tokens of its prompt already in context before its first piece."""
    rank: float = 0.0
    """Its place in a step: its seat's number (llama.cpp walks its slots), else its arrival."""
    seat: int | None = None
    """Its seat's number where the engine keeps a KV cache per seat (llama.cpp: which ubatches
    its pieces share, terms/untiled.py); None: by arrival, or no seats."""
    reply: int = 0
    """Its reply's tokens: after its first, one in each step it is in, and one a `gap` between steps."""
    gap: float = 0.0
    """Its reply's mean gap between tokens where it decodes with no prompt read beside it
    (booking.py sets the one it books: a decode step of the streams decoding then, at the
    reply's mean context)."""
    growth: float = 0.0
    """How much longer each token's gap is than the one before it: each attends to one token more
    (the decode step's cost of one more token of context). Token k's gap (k >= 1) is
    `gap` + growth·(k − 1 − `middle`), so the reply's gaps still average `gap`."""
    middle: float = 0.0
    """The middle of its reply's gaps, (reply − 2) / 2, fixed when it is paced (a hang-up that
    cuts the reply short moves no token already due)."""
    marks: list[tuple[int, float]] = dataclasses.field(default_factory=list)
    """The reply tokens it writes at the ends of steps: (token index, time), in order."""
    read: int = 0
    """Its tokens in steps formed or planned."""
    last: EngineStep | None = None
    """The step holding its last token."""
    shown: EngineStep | None = None
    """With prefill first (`POLICIES`, mlx): the step at whose end its first token comes, the
    MLX_SHOW_AFTER-th formed back to back after `last`, or the last of them (None: `last`'s)."""
    waits: int = 0
    """With prefill first: how many more steps its first token waits for (`_wait`)."""
    holder: object = None
    """Whose turn it is (the booking core's Booking), for those who must follow its moves."""

    @property
    def end(self) -> float:
        """Its first token: when the step holding its last token is done (with prefill first: the
        step `shown`, MLX_SHOW_AFTER later, or the last of those formed back to back)."""
        step = self.shown or self.last
        return step.end if step is not None else self.start + self.seconds

    @property
    def reply_end(self) -> float:
        """When its stream writes its last reply token (as planned: no steps after the plan's)."""
        i = self.reply - 1 if self.reply > 1 else 0  # (token_at, inlined: a replay asks 500,000 times)
        marks = self.marks
        index, at = marks[-1] if marks and marks[-1][0] <= i else self._mark_before(i)
        return at + self.gaps(index, i - index) if i > index else at

    def _mark_before(self, i: int) -> tuple[int, float]:
        """The last token at or before index `i` written at a fixed time: a step's end, or the
        first token (index 0, at `end`)."""
        if not self.marks:
            return 0, self.end
        if self.marks[-1][0] <= i:  # (most asked: its last token, after its last step)
            return self.marks[-1]
        k = bisect.bisect_right(self.marks, i, key=lambda m: m[0])
        return self.marks[k - 1] if k else (0, self.end)

    def token_at(self, i: int) -> float:
        """When reply token `i` (0-based) comes: at the end of the step it is written in, or its
        gap after the token before it, between steps."""
        i = i if i > 0 else 0
        index, at = self._mark_before(i)
        return at + self.gaps(index, i - index)

    def gaps(self, index: int, n: int) -> float:
        """The seconds of the `n` gaps after token `index` (Σ of gap_k for k = index+1 .. index+n,
        gap_k = first + growth·k, with first the gap a token 0 would have)."""
        first = self.gap - self.growth * (1 + self.middle)
        return n * first + self.growth * (n * index + n * (n + 1) / 2)

    def written(self, index: int, elapsed: float) -> int:
        """How many tokens after token `index` it writes, each its gap after the one before, in
        `elapsed` seconds (with no step between)."""
        if not self.growth:
            return math.floor(elapsed / self.gap + 1e-9) if self.gap > 0 else 1 << 62
        slack = 1e-9 * self.gap  # (the float rounding of times a whole number of gaps apart)
        if self.gaps(index, 1) > elapsed + slack:  # (most asked: a step right after its last)
            return 0
        b = self.gap - self.growth * (1 + self.middle) + self.growth * (index + 0.5)
        n = max(0, math.floor((-b + math.sqrt(max(b * b + 2 * self.growth * elapsed, 0.0))) / self.growth))
        while n and self.gaps(index, n) > elapsed + slack:
            n -= 1
        while self.gaps(index, n + 1) <= elapsed + slack:
            n += 1
        return n

    def tokens_due(self, now: float) -> int:
        """How many of its reply tokens come by `now`: those at step ends by then, and those its
        gaps apart after the last of them, up to the next step's token."""
        if now < self.end:
            return 0
        k = bisect.bisect_right(self.marks, now, key=lambda m: m[1])
        index, at = self.marks[k - 1] if k else (0, self.end)
        upto = self.marks[k][0] if k < len(self.marks) else self.reply
        return min(index + 1 + self.written(index, now - at), upto, self.reply)


MLX_PROMPTS = 8
"""Prompts mlx_lm.server reads in one step at most (its --prompt-concurrency, 8 by default)."""
MLX_SHOW_AFTER = 2
"""Steps a first token waits for after the step holding its prompt's last piece, on mlx_lm.server
(0.32.2, generate.py, `BatchGenerator._next`): the next step moves the prompt to the batch that
decodes, the one after writes its first token in its decode pass, and a step's tokens are sent
once its prompt pass (the pieces of the prompts still read) is done too. So a 20-token prompt
sent with a long one waits for three of the long one's pieces, not all: with a prompt of about
9,000 tokens (5 pieces), 6.8 to 7.0 s against the long one's 15.4 to 16.7
(docs/runs/2026-12-06-mlx-first-token-steps.md)."""
POLICIES = ("llamacpp", "vllm", "mlx")
"""Whose prompt tokens a step takes first (--step-policy): by seat (llama.cpp), or by arrival
(vLLM's and SGLang's schedulers: `by_arrival`); mlx: by arrival, and prefill first (`prefill_first`):
a prompt's first token comes MLX_SHOW_AFTER steps after its last piece, so it waits for the pieces
of the prompts taken with it or after it in those steps (measured: 2 prompts sent at once, 1,290
to 1,420 ms each, one alone 720 to 800); mlx_lm.server takes new prompts only between runs of
steps (BUDGET_S); and each prompt puts up to `batch_tokens` of its own in a step, its
--prefill-step-size (`_take`), every piece computed as long as the step's longest (`_pieces`)."""
BUDGET_S = 0.5
"""mlx_lm.server takes new requests only between runs of steps (`_taken_by`): a run goes on while
there is work, until it has lasted more than 0.5 s (its TimeBudget, server.py). A prompt sent while
another's reply streams waits for the run's end (measured: a 12-word prompt 0.7 s into a 400-token
reply, 326 to 334 ms, alone 14 to 22: docs/runs/2026-12-06-mlx-time-budget.md)."""


class Loop:
    """The steps of one replica: formed from its turns by rank, each priced by the cost terms. The
    streams decoding take their tokens of the budget first (llama-server adds them to its batch
    before any prompt token; vLLM schedules running requests first); prompts fill the rest.
    `batch_tokens` None: the lesson's engine, one whole prompt a step, decode free."""

    def __init__(
        self,
        batch_tokens: int | None,
        rates: TimingModel,
        by_arrival: bool = False,
        prefill_first: bool = False,
        parse_s: float = 0.0,
    ) -> None:
        self.batch_tokens, self.rates, self.by_arrival = batch_tokens, rates, by_arrival or prefill_first
        self.prefill_first = prefill_first
        """A first token comes MLX_SHOW_AFTER steps after its last piece (or at a gap before that)."""
        self.parse_s = parse_s
        """A request's time from its arrival to its prefill's earliest start (the overhead)."""
        self.showing: list[Turn] = []
        """With prefill first: the turns whose first tokens wait for steps still to be formed."""
        self.price = terms.pricer(rates)
        """What a step costs (the cost terms, their coefficients worked out once)."""
        self.queue: deque[Turn] = deque()
        """Turns whose first token may still be ahead, in booking order."""
        self.streams: dict[int, Turn] = {}
        """Turns whose first token is planned and whose reply may still run, in order of first token."""
        self.span = 0.0
        """The longest reply booked (first token to last): older streams are over."""
        self.steps: deque[EngineStep] = deque()
        """Formed and planned steps, in order (those no turn needs any more dropped from the front)."""
        self.free_at = 0.0
        self.arrivals = itertools.count()
        self.replanned: dict[int, Turn] = {}
        """The turns the last plan placed again, by id, in order: their first tokens, or their
        replies' tokens (a stream in its steps), may have moved."""
        self.before: tuple[float, float] | None = None
        """The end and run of the last step dropped (`forget`): the last step when none is kept."""
        self.open: deque[EngineStep] = deque()
        """By arrival: the steps, in order, another prompt might join (not full, or after a gap)."""
        self.highest = -math.inf
        """By arrival: the highest rank any step has held (a newcomer above it goes after all)."""

    def book(self, ready: float, now: float, new: int, cached: int, rank: float | None, reply: int) -> Turn:
        """A prompt of `new` tokens after `cached`, ready at `ready` with this `rank` (its seat; None,
        or by arrival: its arrival), replying `reply` tokens: the steps from `ready` are planned again."""
        self.forget(now)
        tokens = max(new, 1)  # (all of it cached: the engine still reads its last token)
        turn = Turn(ready, self.alone_s(tokens, cached), math.inf, tokens=tokens, cached=cached)
        turn.rank = next(self.arrivals) if rank is None or self.by_arrival else rank
        turn.seat = None if rank is None or self.by_arrival else int(rank)
        turn.reply = reply
        if self.batch_tokens is not None:  # its stream is in the steps planned: their gaps count
            context = reply_context(cached + new, reply)  # its prompt, and half its reply on average
            turn.gap = self.price(Step(decodes=(context,)))  # (alone, until `pace` says)
            self.span = max(self.span, (reply - 1) * turn.gap)
        self.queue.append(turn)
        since = max(ready - self._window(), now)
        if self._goes_last(turn, since):
            self._after_all(turn, now)
        else:
            self._plan(now, self._untouched(turn, since), [turn])
        return turn

    def _goes_last(self, turn: Turn, since: float) -> bool:
        """Whether a newcomer ready at `since` moves no step planned, on the lesson's engine (one
        prompt a step, by arrival): it is ranked above every turn, and no step after `since` waits
        after a gap (its prompt not ready) that it could fill. Then `_after_all` books it, what
        `_plan` would do, without its walk (a replay's overloaded replica books 12,000 so, each
        behind hours of queue)."""
        if self.batch_tokens is not None or turn.rank <= self.highest:
            return False
        return not (self.open and self.open[-1].start > since)

    def _after_all(self, turn: Turn, now: float) -> None:
        """The lesson's engine, a newcomer that moves no step planned: its own step, after the
        last one, once it is ready; on an idle engine, from when it was ready, even if it was
        booked later (its body came slowly: the overhead is the parse)."""
        clock = max(turn.ready_at, self.free_at)
        step = EngineStep(clock, clock + turn.seconds, [(turn, turn.tokens)], turn.tokens, run=clock)
        turn.read, turn.start, turn.last = turn.tokens, clock, step  # (`_commit` and `_read`, of one
        self.replanned = {id(turn): turn}  # prompt read whole, with no stream in it)
        self._keep(step)
        self.free_at = step.end

    def pace(self, turn: Turn, gap: float, growth: float = 0.0) -> None:
        """Its reply's tokens come `gap` apart on average between the steps it is in, each gap
        `growth` longer than the one before (booking.py books a decode step of the streams decoding
        at its first token, at the reply's mean context; until then, its stream's alone)."""
        turn.gap, turn.growth, turn.middle = gap, growth, (turn.reply - 2) / 2
        self.span = max(self.span, turn.reply_end - turn.end)

    def alone_s(self, tokens: int, cached: int = 0) -> float:
        """Seconds `tokens` new tokens after `cached` take alone, in one piece (`terms.prompt_price`
        with no step size, asked once a request and again by every hang-up's bisection)."""
        return self.price(Step((Piece(tokens, cached, opens=True, cached=cached),)))

    def forget(self, now: float) -> None:
        """Drop what nothing can move any more: turns whose first token came, steps none needs,
        streams whose replies are over."""
        while self.queue and self.queue[0].end <= now:
            self.queue.popleft()
        self._forget_steps(now)
        if self.streams:  # (the lesson's engine keeps none)
            over = itertools.takewhile(lambda t: t.end < now - self.span, self.streams.values())
            for t in list(over):  # (the streams are in order of first token)
                del self.streams[id(t)]

    def _forget_steps(self, now: float) -> None:
        """Drop the steps at the front that are over by `now` and hold no turn still to come."""
        steps = self.steps
        while steps and steps[0].end <= now and all(t.end <= now for t, _ in steps[0].parts):
            step = steps.popleft()
            self.before = step.end, step.run
            if self.open and self.open[0] is step:
                self.open.popleft()

    def stop(self, turn: Turn, now: float) -> bool:
        """Its client hung up at `now`: its stream writes no more reply tokens (it leaves the next
        step). True if it was to write some in steps still to come (plan again: `reflow`)."""
        if turn.reply_end <= now:
            return False
        turn.reply = turn.tokens_due(now)
        return self.batch_tokens is not None  # (the lesson's replies are in no step)

    def formed_tokens(self, turn: Turn, now: float) -> int:
        """How many of its tokens are in steps formed by `now` (computed, whatever happens)."""
        if self.batch_tokens is None and turn.start < now < turn.end:
            # the lesson's step under way: read at its rate, with no steps inside it
            return self.rates.computed_tokens(now - turn.start, turn.tokens, turn.cached)
        planned = itertools.takewhile(lambda s: s.start >= now, reversed(self.steps))
        return turn.read - sum(k for s in planned for t, k in s.parts if t is turn)

    def shorten(self, turn: Turn, now: float, keep_s: float = 0.0) -> bool:
        """Keep the tokens `turn` has in steps formed by `now` (a step under way is computed whole),
        or the fewest whose time alone is `keep_s` (later prompts found them cached), whichever are
        more; it leaves the steps to come (`reflow`). True if it gave tokens back."""
        if turn.dropped or turn.end <= now:
            return False
        keep = self.formed_tokens(turn, now)
        if self.alone_s(keep, turn.cached) < keep_s:  # the fewest whose time alone is keep_s
            keep = bisect.bisect_left(
                range(turn.tokens), keep_s, keep, key=lambda k: self.alone_s(k, turn.cached)
            )
        if keep >= turn.tokens:
            return False
        if self.batch_tokens is None and turn.last is not None and turn.start < now:
            self._cut(turn.last, turn, keep, now)
        turn.tokens, turn.dropped = keep, not keep
        turn.seconds = self.alone_s(keep, turn.cached) if keep else 0.0
        return True

    def _cut(self, step: EngineStep, turn: Turn, keep: int, now: float) -> None:
        """The lesson's step under way, of `turn` alone, stops at `now` (or once it has read the
        `keep` tokens later prompts need): as the lane gave back the time it had not used."""
        step.parts, turn.read = [(turn, keep)], keep
        step.end = max(now, step.start + self.alone_s(keep, turn.cached))

    def reflow(self, now: float) -> list[Turn]:
        """Plan again from `now` (after hang-ups). The turns whose start, first token or reply's
        end moved (a stream in the steps planned again)."""
        turns = {id(t): t for t in self.queue}
        for step in itertools.takewhile(lambda s: s.start >= now, reversed(self.steps)):
            turns.update((id(t), t) for t in step.decoders)
        was = {k: _times(t) for k, t in turns.items()}
        self._unplan(now)
        self.queue = deque(t for t in self.queue if not t.dropped)
        self._plan(now, now, list(self.queue))
        return [t for k, t in turns.items() if not t.dropped and _times(t) != was[k]]

    def withdraw(self, turns: list[Turn], now: float) -> None:
        """Take these turns out (waiting for a seat: none in a step formed by `now`), plan the rest
        again; they are in no step, their start unknown (inf), until `rejoin` puts each back."""
        gone = {id(t) for t in turns}
        self.forget(now)
        self.queue = deque(t for t in self.queue if id(t) not in gone and t.end > now)  # (over: gone)
        self._unplan(now)
        for t in turns:
            self.streams.pop(id(t), None)
            t.last, t.shown, t.start, t.read, t.marks = None, None, math.inf, 0, []
        self.reflow(now)

    def rejoin(self, turn: Turn, ready_at: float, rank: float, now: float) -> list[Turn]:
        """Put back a turn taken out by `withdraw`, ready at `ready_at` (its admission) with this
        `rank` (its seat), as a newcomer is booked. The turns that plan placed again."""
        turn.ready_at, turn.rank = ready_at, turn.rank if self.by_arrival else rank
        turn.seat = None if self.by_arrival else int(rank)
        self.queue.append(turn)
        self._plan(now, self._untouched(turn, max(ready_at - self._window(), now)), [turn])
        return list(self.replanned.values())

    def _untouched(self, turn: Turn, since: float) -> float:
        """Where a newcomer ready at `since` first changes the plan: the start of the first planned
        step it would join (one with room, or with tokens of a turn it goes before), or of an idle
        gap it would fill. The steps before it stay as planned (with four seats busy, a prompt
        admitted to the last seat changes only the steps after the others' prompts). A newcomer
        ranked above every turn (booked by arrival) can join only an `open` step: found by
        bisection, not by a walk over a plan that holds an overloaded replica's whole queue."""
        if self.by_arrival and turn.rank > self.highest:  # (it goes after every turn)
            return self._next_open(since)
        later = list(itertools.takewhile(lambda s: s.start >= since, reversed(self.steps)))
        end = since  # a step formed before it is ready is none of its business, but it ends first:
        if len(later) < len(self.steps):
            end = max(end, self.steps[-1 - len(later)].end)
        for step in reversed(later):
            full = self._full(step)
            if step.start > end or not full or any(t.rank >= turn.rank for t, _ in step.parts):
                return step.start
            end = step.end
        return end

    def _next_open(self, since: float) -> float:
        """`_untouched` for a newcomer ready at `since` ranked above every turn: the first step
        planned from then if it is open to it, else the next `open` step, else the plan's end."""
        first = bisect.bisect_left(self.steps, since, key=lambda s: s.start)
        end = max(since, self.steps[first - 1].end) if first else since
        if first == len(self.steps):
            return end
        step = self.steps[first]
        if step.start > end or not self._full(step):
            return step.start
        at = bisect.bisect_right(self.open, step.start, key=lambda s: s.start)
        return self.open[at].start if at < len(self.open) else self.steps[-1].end

    def _full(self, step: EngineStep) -> bool:
        """Whether a step has no room for another prompt: its budget spent, or with prefill first
        (each prompt its own pieces: `_take`), MLX_PROMPTS prompts in it."""
        if self.prefill_first:
            return len(step.parts) >= MLX_PROMPTS
        return sum(k for _, k in step.parts) >= step.room

    def _unplan(self, since: float) -> list[Turn]:
        """Drop the planned steps that start at `since` or later; their tokens go back to their
        turns. The turns they held."""
        held: dict[int, Turn] = {}
        while self.open and self.open[-1].start >= since:
            self.open.pop()
        while self.steps and self.steps[-1].start >= since:
            step = self.steps.pop()
            for t in step.decoders:  # its token in this step (its last mark) is planned again
                t.marks.pop()
                held[id(t)] = t
            for t, k in step.parts:
                t.read -= k
                held[id(t)] = t
                if t.last is step:
                    t.last = t.shown = None
                    self.streams.pop(id(t), None)
        return list(held.values())

    def _plan(self, now: float, since: float, newcomers: list[Turn]) -> None:
        """Plan again from `since` (steps formed by `now` stay): step after step, as llama.cpp
        forms them, from the turns waiting."""
        waiting = {id(t): t for t in [*self._unplan(max(since, now)), *newcomers]}
        self.replanned = dict(waiting)
        turns = [t for t in waiting.values() if self._waits(t)]
        clock = max(now, self.steps[-1].end) if self.steps else now
        self._resume_showing(now)
        running = self._running(clock)
        while turns:
            clock = self._next(turns, clock, running)
            turns = [t for t in turns if t.read < t.tokens]
        self.free_at = self.steps[-1].end if self.steps else min(self.free_at, now)
        self._stretch_span()

    def _stretch_span(self) -> None:
        """`span` covers every reply the plan placed again that follows steps (`forget` keeps
        streams this long; worked out once a plan, not once a step)."""
        for t in self.replanned.values():
            if t.marks:
                self.span = max(self.span, t.reply_end - t.end)

    def _resume_showing(self, now: float) -> None:
        """With prefill first: the turns whose first tokens still waited after the last step kept
        (`EngineStep.waiting`) wait for the steps formed after it, so they are placed again too
        (unless that step ended by `now`: their first tokens came)."""
        self.showing = []
        if not (self.prefill_first and self.steps):
            return
        last = self.steps[-1]
        for t, waits in last.waiting:
            t.waits, t.shown = waits, None if t.last is last else last
            if last.end > now:
                self.showing.append(t)
        for t in self.showing:
            self.replanned.setdefault(id(t), t)

    def _next(self, turns: list[Turn], clock: float, running: list[Turn]) -> float:
        """Form the step at `clock` from the turns ready by then (with prefill first: taken by the
        engine, `_taken_by`), and return its end; with none, form nothing and return when the
        first of them is ready (taken: `_take_after`)."""
        taken = self._taken_by(turns, clock, running) if self.prefill_first else clock
        came = taken + self._window()  # (prefill first: the requests that came by the take)
        ready = sorted((t for t in turns if t.ready_at <= came), key=lambda t: t.rank)
        if not ready:
            return min(self._take_after(t.ready_at, running) for t in turns)
        if (first := min(t.ready_at for t in ready)) > clock:  # taken before it was ready (parsed)
            return first
        if self.prefill_first and self._idle(turns, clock, running):
            self._show(running)  # taken when idle: the run before wrote its first tokens and replies
        step = self._form(ready, clock, running)
        step.run = taken
        return self._run_on(step, turns, running).end

    def _window(self) -> float:
        """mlx_lm.server takes, one by one, the requests that came by a take, and each that comes
        while it takes (parses) the others: those ready within one overhead of the take. Requests
        sent at once are so taken together (measured: 4 at once, first tokens within 11 ms)."""
        return self.parse_s if self.prefill_first else 0.0

    def _last(self) -> tuple[float, float] | None:
        """The last step's end and the start of its run (None: no step yet)."""
        return (self.steps[-1].end, self.steps[-1].run) if self.steps else self.before

    def _idle_from(self, running: list[Turn], last_end: float) -> float:
        """When the engine runs out of work: its last step is over and every reply written."""
        return max([last_end, *(t.reply_end for t in running), *(t.reply_end for t in self.showing)])

    def _idle(self, turns: list[Turn], clock: float, running: list[Turn]) -> bool:
        """Whether the engine has no work at `clock`: no prompt of its run left to read, and its last
        step and every reply over."""
        last = self._last()
        if last is None or self._in_run(turns, last[1]):
            return last is None
        return clock >= self._idle_from(running, last[0])

    def _in_run(self, turns: list[Turn], run: float) -> bool:
        """Whether any of `turns` (each with prompt tokens left) was taken by the run from `run`."""
        return any(t.ready_at <= run + self._window() for t in turns)

    @staticmethod
    def _reply_take(end: float, run: float, at: float, later: bool) -> float:
        """A take while replies alone are written after the step ending at `end` (in the run from
        `run`): the first comes at the first step past the run's budget, then one each BUDGET_S
        (decode steps of a few ms, not formed here). The last at or before `at` (`run` if none
        yet), or with `later`, the first at or after it."""
        first = max(end, run + BUDGET_S)
        if later:
            return first + max(0, math.ceil((at - first) / BUDGET_S - 1e-9)) * BUDGET_S
        return run if at < first else first + math.floor((at - first) / BUDGET_S + 1e-9) * BUDGET_S

    def _taken_by(self, turns: list[Turn], clock: float, running: list[Turn]) -> float:
        """mlx_lm.server: the last time by `clock` it took the requests waiting. It takes them when
        it has no work, else when a run of steps has lasted BUDGET_S: at the end of the step under
        way, or, with replies alone to write (steps of a few ms, not formed here), BUDGET_S into the
        run; then a new run begins."""
        last = self._last()
        if last is None:
            return clock
        end, run = last
        if clock == end and self._in_run(turns, run):  # prompts taken, still to read:
            return clock if clock - run > BUDGET_S else run  # is the budget spent?
        if self._idle(turns, clock, running):
            return clock  # no work: it takes a request the moment it comes
        return self._reply_take(end, run, clock, later=False)

    def _take_after(self, ready: float, running: list[Turn]) -> float:
        """When a request waiting since `ready` is taken, with no prompt left to read in the run:
        at once if the engine is idle, else at the next take while replies are written, or when
        the last reply is done (`_taken_by`). Without prefill first: at `ready`."""
        last = self._last()
        if not self.prefill_first or last is None:
            return ready
        end, run = last
        idle, came = self._idle_from(running, end), ready - self._window()
        if came >= idle:
            return ready
        return min(self._reply_take(end, run, came, later=True), idle)

    def _waits(self, turn: Turn) -> bool:
        """Whether `turn` has tokens to plan; one all of whose tokens are in steps kept gets the
        last of those as its last step (a hang-up kept only what was formed)."""
        if turn.read >= turn.tokens and turn.last is None:
            turn.last = next((s for s in reversed(self.steps) if any(x is turn for x, _ in s.parts)), None)
        if turn.read or turn.dropped:
            return turn.read < turn.tokens and not turn.dropped
        turn.start = math.inf  # in no step: its start is planned
        return True

    def _form(self, ready: list[Turn], clock: float, running: list[Turn]) -> EngineStep:
        """The step formed at `clock` from the turns ready, by rank: each as many tokens as fit.
        A turn whose last token it holds starts writing its reply: it joins `running`."""
        if self.showing and not (self.steps and self.steps[-1].end == clock):  # a gap: shown, decoding
            self._show(running)
        decoding = _decoding(running, clock) if self.batch_tokens is not None else []  # first
        parts, budget = self._take(ready, len(decoding))
        batch = Step(self._pieces(parts), *_streams(decoding))
        return self._commit(clock, batch, parts, budget, decoding, running)

    def _run_on(self, step: EngineStep, turns: list[Turn], running: list[Turn]) -> EngineStep:
        """The steps back to back after `step`, if it holds the only prompt of `turns` ready (not
        with prefill first), until it is read or another is ready: what `_next` forms then,
        without working out again who is ready and who decodes. Each holds the streams of the step
        before that have tokens left (back to back, no token comes between them: each writes the
        token after the one it wrote in the step before) and as many of its tokens as fit. The
        last of them. (A replay's overloaded replica forms some 60,000 an hour of a prompt's piece
        and three streams.)"""
        if self.prefill_first or self.batch_tokens is None or len(step.parts) != 1:
            return step
        turn, size = step.parts[0][0], self.batch_tokens
        until = min([t.ready_at for t in turns if t is not turn], default=math.inf)
        streams: tuple[tuple[int, ...], tuple[int | None, ...]] = ((), ())
        while turn.read < turn.tokens and step.end < until:
            at, decoding = step.end, _following(step.decoders)
            if len(decoding) != len(streams[0]):  # (a stream ended: else the same streams, in order)
                streams = _streams(decoding)
            room = max(size - len(decoding), 1)
            k = min(room, turn.tokens - turn.read)
            piece = Piece(k, turn.cached + turn.read, not turn.read, turn.cached, turn.seat)
            step = self._commit(at, Step((piece,), *streams), [(turn, k)], room, decoding, running)
            step.run = at
        return step

    def _commit(
        self,
        clock: float,
        batch: Step,
        parts: list[tuple[Turn, int]],
        budget: int,
        decoding: list[tuple[Turn, int]],
        running: list[Turn],
    ) -> EngineStep:
        """The step at `clock` that runs `batch`: these prompt tokens (`budget`: its room) and
        streams decoding; priced, kept, its prompt tokens read and its reply tokens written."""
        step = EngineStep(clock, clock + self.price(batch), parts, budget)
        self._decode(step, decoding)
        self._wait(step, running)
        for t, k in parts:
            t.read, t.start = t.read + k, min(t.start, clock)
            if t.read >= t.tokens:
                self._read(t, step, running)
        self._keep(step)
        return step

    def _keep(self, step: EngineStep) -> None:
        """Add a step just formed to the plan, with what later plans read of it: the first tokens
        still waiting after it (prefill first); by arrival, the highest rank and whether it is `open`."""
        if self.prefill_first:
            step.waiting = tuple((t, t.waits) for t in self.showing)
        if self.by_arrival:
            for t, _ in step.parts:
                self.highest = max(self.highest, t.rank)
            if not self._full(step) or not self.steps or step.start > self.steps[-1].end:
                self.open.append(step)
        self.steps.append(step)

    def _decode(self, step: EngineStep, decoding: list[tuple[Turn, int]]) -> None:
        """Each stream in `step` writes its reply token (its index given) at the step's end."""
        step.decoders = tuple([t for t, _ in decoding])
        for t, index in decoding:
            t.marks.append((index, step.end))
            self.replanned.setdefault(id(t), t)  # its reply moved: its seat must follow (booking.py)

    def _wait(self, step: EngineStep, running: list[Turn]) -> None:
        """With prefill first: the first tokens waiting wait for `step` too; those for which it is
        the last (MLX_SHOW_AFTER after their last piece) come at its end, and their streams decode
        in the steps after it."""
        if not self.showing:  # (most steps: nothing waits)
            return
        for t in self.showing:
            t.shown, t.waits = step, t.waits - 1
        if any(not t.waits for t in self.showing):
            running += [t for t in self.showing if not t.waits]
            self.showing = [t for t in self.showing if t.waits]

    def _take(self, ready: list[Turn], decoding: int) -> tuple[list[tuple[Turn, int]], int]:
        """The prompt tokens of each turn in a step, and the step's budget. llama.cpp and vLLM: one
        budget of `batch_tokens` (less a token for each stream decoding), filled by rank. MLX (prefill
        first): each prompt waiting puts in up to `batch_tokens` of its own (mlx_lm's
        --prefill-step-size, 2,048), MLX_PROMPTS of them at most (its --prompt-concurrency)."""
        parts: list[tuple[Turn, int]] = []
        if self.batch_tokens is None:  # the lesson's engine: one prompt a step, the whole of it
            return [(ready[0], ready[0].tokens - ready[0].read)], ready[0].tokens - ready[0].read
        if self.prefill_first:
            parts = [(t, min(self.batch_tokens, t.tokens - t.read)) for t in ready[:MLX_PROMPTS]]
            return parts, self.batch_tokens * MLX_PROMPTS
        budget = room = max(self.batch_tokens - decoding, 1)  # (decode alone is no step here)
        for t in ready:
            if (k := min(room, t.tokens - t.read)) <= 0:
                break
            parts.append((t, k))
            room -= k
        return parts, budget

    def _pieces(self, parts: list[tuple[Turn, int]]) -> tuple[Piece, ...]:
        """What a step computes of each turn's tokens: its piece, after the tokens it has read.
        With prefill first, every piece is as long as the step's longest: mlx_lm.server (0.32.2,
        `PromptProcessingBatch.prompt`) right-pads them (`_right_pad_prompts`), so a 20-token piece
        beside a 2,048-token one costs 2,048 rows. Measured, its `BatchGenerator` driven for one
        step: a 2,048-token piece alone 1,103 to 1,750 ms; with a 20-token piece beside it 2,923 to
        3,486; with another 2,048, 2,442 to 3,490 (docs/runs/2026-12-06-mlx-first-token-steps.md)."""
        rows = max(k for _, k in parts) if self.prefill_first and parts else 0
        return tuple(
            [
                Piece(max(k, rows), t.cached + t.read, opens=not t.read, cached=t.cached, seq=t.seat)
                for t, k in parts
            ]
        )  # (a list first: a generator makes every step's tuple slower)

    def _read(self, turn: Turn, step: EngineStep, running: list[Turn]) -> None:
        """`turn`'s last token is in `step`: its first token comes at its end, and it starts writing
        its reply, a stream in the steps after; with prefill first, MLX_SHOW_AFTER steps later
        (`_wait`), or at a gap before that (`_show`)."""
        turn.last = step
        if self.batch_tokens is not None:  # (the lesson's replies are in no step: no stream to find)
            self.streams[id(turn)] = turn
        if self.prefill_first:
            turn.waits = MLX_SHOW_AFTER
            self.showing.append(turn)
        else:
            running.append(turn)

    def _show(self, running: list[Turn]) -> None:
        """With prefill first, a step formed after a gap (no prompt was waiting when the last one
        ended): the first tokens waiting came at the last one's end (the steps they waited for
        were a decode pass or two, a few ms, not formed here), and their streams decode."""
        running += self.showing
        self.showing = []

    def _running(self, clock: float) -> list[Turn]:
        """The streams whose reply is not over by `clock`: a plan's steps start at `clock` or
        later, so no other stream can decode in them. By seat or by arrival, those are the streams
        in the last step kept and those whose first token it wrote (a stream running at its end
        was running at its start); else the latest first tokens (`span`)."""
        if self.steps and not self.prefill_first:
            last = self.steps[-1]
            ended = [t for t, _ in last.parts if t.last is last]
            return [t for t in (*last.decoders, *ended) if t.reply_end > clock]
        return self._recent(clock)

    def _recent(self, clock: float) -> list[Turn]:
        """`_running` with prefill first, or with no step kept: the streams whose first token came
        within `span` of `clock` and whose reply is not over by then (not those still waiting to
        be shown: `_show` adds them)."""
        recent = itertools.takewhile(lambda t: t.end >= clock - self.span, reversed(self.streams.values()))
        shown = {id(t) for t in self.showing}
        return [t for t in recent if t.reply_end > clock and id(t) not in shown]


def _times(turn: Turn) -> tuple[float, float, float]:
    """Its start, first token and reply's end, to the nanosecond (float rounding is no move)."""
    return round(turn.start, 9), round(turn.end, 9), round(turn.reply_end, 9)


def _decoding(running: list[Turn], clock: float) -> list[tuple[Turn, int]]:
    """The streams writing a reply token in a step formed at `clock`, each with that token's
    index: its first token came, and it has tokens left after those it wrote a gap apart since
    its last step. Those with none left leave `running` (steps only move later)."""
    running[:] = [t for t in running if t.reply_end > clock]
    out: list[tuple[Turn, int]] = []
    for t in running:
        if t.end <= clock:
            index, at = t.marks[-1] if t.marks else (0, t.end)
            if (following := index + 1 + t.written(index, clock - at)) < t.reply:
                out.append((t, following))
    return out


def _following(decoders: tuple[Turn, ...]) -> list[tuple[Turn, int]]:
    """The streams of a step that write in the step right after it (back to back: no token comes
    between), each with its next token's index: those with tokens left."""
    return [(t, i) for t in decoders if (i := t.marks[-1][0] + 1) < t.reply]


def _streams(decoding: list[tuple[Turn, int]]) -> tuple[tuple[int, ...], tuple[int | None, ...]]:
    """What a step's batch holds of the streams decoding: each one's context, and their seats."""
    return tuple([_context(t) for t, _ in decoding]), _seats(decoding)


def _seats(decoding: list[tuple[Turn, int]]) -> tuple[int | None, ...]:
    """The seats of the streams decoding, in seat order (llama-server adds their tokens to a
    batch so); empty where any has none."""
    seats = [t.seat for t, _ in decoding if t.seat is not None]
    return tuple(sorted(seats)) if len(seats) == len(decoding) else ()


def _context(turn: Turn) -> int:
    """The context a stream's reply tokens attend to (step.reply_context: the prompt, half the reply)."""
    return reply_context(turn.cached + turn.tokens, turn.reply)
