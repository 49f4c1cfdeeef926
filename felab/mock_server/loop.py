"""The engine loop of one replica (--batch-tokens): steps formed as llama-server forms them.

llama-server runs one step (a forward pass) after another. To form a step it walks its seats
(slots) in order, and each seat with prompt tokens still to read puts in as many as there is
room for in `batch_tokens` (its -b). A step lasts what the cost terms say of exactly what it
holds, each prompt's piece with its own context (`terms.step_seconds`), and a prompt's first
token comes at the end of the step holding its last prompt token. So four 2,600-token prompts
sent at once get first tokens at the ends of steps 2, 3, 4 and 6 (tokens 4,096, 6,144, 8,192
and 10,400 of the 10,400 in a row), not at 2,600, 5,200, 7,800 and 10,400; and a prompt in a
lower seat goes first, whenever it came (measured on llama-server: after earlier work had left
the seats in another order, the first prompt sent got its first token with the second, at 548
and 549 ms).

Steps formed by `now` are history: nothing joins or leaves a step under way, and what it
computed stays computed (`formed_tokens`, exact: no time is turned back into tokens). The
later steps are a plan, made again from the first step a change can touch: when a prompt comes,
when one hangs up (it leaves the next step), and, with seats, when one gets a seat (`withdraw`
takes out the prompts waiting for one, `rejoin` puts each back when it has one; with no seats,
prompts go in arrival order). So a booked first token can move later (a prompt arrives before
its last step is formed, or takes a lower seat) or earlier (one ahead hangs up); the router
reads `free_at`, the end of the last planned step. Nothing here reads a clock: every method is
told the time, so the same code runs live and in a replay.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import types
from collections import deque
from dataclasses import dataclass
from typing import Any, cast

from felab.mock_server import terms
from felab.mock_server.step import Piece, Step
from felab.mock_server.timing import Prefill


def rates_with(timing: Any, batch_slowdown: float) -> terms.Rates:
    """The rates the terms read: `timing` (a TimingModel), with the batch slowdown if it lacks it."""
    if hasattr(timing, "batch_slowdown"):
        return cast(terms.Rates, timing)
    return cast(
        terms.Rates, types.SimpleNamespace(**dataclasses.asdict(timing), batch_slowdown=batch_slowdown)
    )


@dataclass(eq=False, slots=True)
class EngineStep:
    """One step: when it is formed (starts), when it is done, and the prompt tokens of each turn in it."""

    start: float
    end: float
    parts: list[tuple[Turn, int]]


@dataclass(eq=False, slots=True)
class Turn(Prefill):
    """A prompt's turn in the loop: its first token is the end of the step holding its last token.
    Its `seconds` are what it would take alone (what a hang-up keeps is counted by `tokens`)."""

    tokens: int = 1
    """Prompt tokens it reads (those not cached)."""
    cached: int = 0
    """Tokens of its prompt already in context before its first piece."""
    rank: float = 0.0
    """Its place when a step takes the waiting prompts: its seat's number (llama.cpp walks its
    slots in order), or its arrival where there are no seats."""
    read: int = 0
    """Its tokens in steps formed or planned."""
    last: EngineStep | None = None
    """The step holding its last token."""
    holder: object = None
    """Whose turn it is (the booking core's Booking), for those who must follow its moves."""

    @property
    def end(self) -> float:
        """Its first token: when the step holding its last token is done."""
        return self.last.end if self.last is not None else self.start + self.seconds

    @property
    def done(self) -> float:
        return self.end

    def piece(self, k: int) -> Piece:
        """Its next `k` tokens, after those read before them."""
        return Piece(k, self.cached + self.read, opens=not self.read, cached=self.cached)


class Loop:
    """The steps of one replica: formed from its turns by rank, each priced by the cost terms."""

    def __init__(self, batch_tokens: int, rates: terms.Rates) -> None:
        self.batch_tokens, self.rates = batch_tokens, rates
        self.queue: deque[Turn] = deque()
        """Turns whose first token may still be ahead, in booking order."""
        self.steps: deque[EngineStep] = deque()
        """Formed and planned steps, in order (those no turn needs any more dropped from the front)."""
        self.free_at = 0.0
        self.arrivals = itertools.count()
        self.replanned: list[Turn] = []
        """The turns the last plan placed again (their first tokens may have moved)."""
        self.top = (-math.inf, -math.inf)
        """The highest rank and the latest ready time booked: a newcomer at or past both only adds
        to the end of the plan (first come first served, and a backlog stays cheap)."""

    def book(
        self, ready_at: float, now: float, tokens: int, cached: int = 0, rank: float | None = None
    ) -> Turn:
        """A prompt of `tokens` new tokens after `cached` ones, ready at `ready_at` with this `rank`
        (None: its arrival). Only the steps from when it is ready are planned again."""
        self.forget(now)
        turn = Turn(ready_at, self.alone_s(tokens, cached), math.inf, tokens=max(tokens, 1), cached=cached)
        turn.rank = next(self.arrivals) if rank is None else rank
        since = max(ready_at, now)  # a step formed before it is ready is none of its business
        if (turn.rank, ready_at) >= self.top and self.steps:  # last in line: only the end moves
            since = max(since, self.steps[-1].start)
        self.top = (max(self.top[0], turn.rank), max(self.top[1], ready_at))
        self.queue.append(turn)
        self._plan(now, since, [turn])
        return turn

    def alone_s(self, tokens: int, cached: int = 0) -> float:
        """Seconds `tokens` new tokens after `cached` take alone, in one piece."""
        return terms.prompt_seconds(tokens, cached, self.rates)

    def forget(self, now: float) -> None:
        """Drop what nothing can move any more: turns whose first token came, steps none needs."""
        while self.queue and self.queue[0].end <= now:
            self.queue.popleft()
        while self.steps and all(t.end <= now for t, _ in self.steps[0].parts):
            self.steps.popleft()

    def formed_tokens(self, turn: Turn, now: float) -> int:
        """How many of its tokens are in steps formed by `now` (computed, whatever happens)."""
        return turn.read - sum(k for s in self._planned(now) for t, k in s.parts if t is turn)

    def cancel(self, turn: Turn, now: float, keep_s: float = 0.0) -> list[Turn]:
        """Its client hung up at `now`: `shorten`, then plan again. The turns that moved."""
        return self.reflow(now) if self.shorten(turn, now, keep_s) else []

    def shorten(self, turn: Prefill, now: float, keep_s: float = 0.0) -> bool:
        """Keep the tokens `turn` has in steps formed by `now` (a step under way is computed whole),
        or the fewest whose time alone is `keep_s` (later prompts found their blocks cached),
        whichever are more; it leaves the steps not formed (`reflow` plans them again). True if
        it gave tokens back; with none kept, it leaves the loop."""
        if not isinstance(turn, Turn) or turn.dropped or turn.end <= now:
            return False
        keep = max(self.formed_tokens(turn, now), self._tokens_in(turn, keep_s))
        if keep >= turn.tokens:
            return False
        turn.tokens, turn.dropped = keep, not keep
        turn.seconds = self.alone_s(keep, turn.cached) if keep else 0.0
        return True

    def _tokens_in(self, turn: Turn, seconds: float) -> int:
        """The fewest of its tokens whose time alone is at least `seconds` (a bisection)."""
        lo, hi = 0, turn.tokens
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self.alone_s(mid, turn.cached) >= seconds - 1e-12 else (mid + 1, hi)
        return lo

    def reflow(self, now: float) -> list[Turn]:
        """Plan again from `now` (after hang-ups). The turns whose start or first token moved."""
        was = {id(t): (t.start, t.end) for t in self.queue}
        self._unplan(now)
        self.queue = deque(t for t in self.queue if not t.dropped)
        self._plan(now, now, list(self.queue))
        return [t for t in self.queue if not _same((t.start, t.end), was[id(t)])]

    def withdraw(self, turns: list[Turn], now: float) -> None:
        """Take these turns out (none has a token in a step formed by `now`: they wait for a seat)
        and plan the rest again from `now`. They keep their tokens, in no step, their start
        unknown (inf), until `rejoin` puts each back."""
        gone = {id(t) for t in turns}
        self.forget(now)
        self.queue = deque(t for t in self.queue if id(t) not in gone and t.end > now)  # (over: gone)
        self._unplan(now)
        for t in turns:
            t.last, t.start, t.read = None, math.inf, 0
        self.reflow(now)

    def rejoin(self, turn: Turn, ready_at: float, rank: float, now: float) -> list[Turn]:
        """Put back a turn taken out by `withdraw`, ready at `ready_at` (its admission) with this
        `rank` (its seat), as a newcomer is booked. The turns that plan placed again."""
        turn.ready_at, turn.rank = ready_at, rank
        self.top = (max(self.top[0], rank), max(self.top[1], ready_at))
        self.queue.append(turn)
        self._plan(now, max(ready_at, now), [turn])
        return self.replanned

    def _planned(self, now: float) -> list[EngineStep]:
        """The steps not formed by `now` (they start at `now` or later)."""
        i = len(self.steps)
        while i and self.steps[i - 1].start >= now:
            i -= 1
        return list(itertools.islice(self.steps, i, None))

    def _unplan(self, since: float) -> list[Turn]:
        """Drop the planned steps that start at `since` or later; their tokens go back to their
        turns. The turns they held."""
        held: dict[int, Turn] = {}
        while self.steps and self.steps[-1].start >= since:
            step = self.steps.pop()
            for t, k in step.parts:
                t.read -= k
                held[id(t)] = t
                if t.last is step:
                    t.last = None
        return list(held.values())

    def _plan(self, now: float, since: float, newcomers: list[Turn]) -> None:
        """Plan again from `since` (steps formed by `now` stay): step after step, as llama.cpp
        forms them, from the turns waiting."""
        waiting = {id(t): t for t in [*self._unplan(max(since, now)), *newcomers]}
        self.replanned = list(waiting.values())
        turns = [t for t in self.replanned if self._waits(t)]
        clock = max(now, self.steps[-1].end) if self.steps else now
        while turns:
            ready = sorted((t for t in turns if t.ready_at <= clock), key=lambda t: t.rank)
            if not ready:
                clock = min(t.ready_at for t in turns)
                continue
            clock = self._form(ready, clock).end
            turns = [t for t in turns if t.read < t.tokens]
        self.free_at = self.steps[-1].end if self.steps else min(self.free_at, now)

    def _waits(self, turn: Turn) -> bool:
        """Whether `turn` has tokens to plan; one all of whose tokens are in steps kept gets the
        last of those as its last step (a hang-up kept only what was formed)."""
        if turn.read >= turn.tokens and turn.last is None:
            turn.last = next((s for s in reversed(self.steps) if any(x is turn for x, _ in s.parts)), None)
        if turn.read or turn.dropped:
            return turn.read < turn.tokens and not turn.dropped
        turn.start = math.inf  # in no step: its start is planned
        return True

    def _form(self, ready: list[Turn], clock: float) -> EngineStep:
        """The step formed at `clock` from the turns ready, by rank: each as many tokens as fit."""
        parts: list[tuple[Turn, int]] = []
        room = self.batch_tokens
        for t in ready:
            if (k := min(room, t.tokens - t.read)) <= 0:
                break
            parts.append((t, k))
            room -= k
        seconds = terms.step_seconds(Step(tuple(t.piece(k) for t, k in parts)), self.rates)
        step = EngineStep(clock, clock + seconds, parts)
        for t, k in parts:
            t.read, t.start = t.read + k, min(t.start, clock)
            if t.read >= t.tokens:
                t.last = step
        self.steps.append(step)
        return step


def _same(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """The same times, but for float rounding."""
    return all(math.isclose(x, y, rel_tol=0, abs_tol=1e-9) or x == y for x, y in zip(a, b, strict=True))
