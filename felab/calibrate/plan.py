"""What calibrate sends, worked out before it sends anything: so it can say so up front.

A plan is a list of steps, each with its number of requests. Its total is what
calibrate announces (and, for a paid target, asks you to confirm); the Prober
refuses to send one request more. The prompt lengths follow the server's
context: the longest probe fits a seat with room to spare, or calibrate says the
server is too small before it sends anything.

    cold prompts     7 lengths from ~100 tokens to the longest, 5 of each
    openings         3 openings (a quarter, half and 4/5 of the longest), each cold, then 3 times with a
                     short question after it, then with the question and more text
    rows             one opening (3/10 of the longest), then new parts of 8 to 280 tokens after it, and a
                     little past 256, 512, 1,024 and 2,048 (a last piece of few rows: probes.rows)
    together         4 cold prompts at once, 4 times
    decode           1 stream, then 2 and 4 at once
    pushed out       (a server with seats) an opening, one short prompt per seat, the opening again:
                     does a prompt that left its seats come back cached (llama.cpp's --cache-ram)?
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from felab.calibrate import probes
from felab.calibrate.probes import BIGGEST, SMALLEST_CONTEXT, Prober, ServerFacts
from felab.errors import FelabError


@dataclass(frozen=True)
class Plan:
    biggest: int
    """The longest probe prompt, tokens."""
    repeats: int = 5
    """Cold prompts of each length: their median is one point of the fit. With 3, one slow
    prompt of three (a shared machine's) moved a point, and the fitted rate, by several %."""
    warm: int = 3
    together_rounds: int = 4
    """Rounds of 4 prompts at once. Which prompt the engine starts first is a race between
    the requests; with 2 rounds, two batch sizes fitted about as well, run to run."""
    streams: int = 4
    decode_streams: tuple[int, ...] = (1, 2, 4)
    rows: bool = True
    """Send the rows probe (left out of the smallest plans)."""
    push_seats: int = 0
    """The server's seats: the pushed-out probe sends one prompt per seat (0: no seats, no probe)."""

    @property
    def cold_lengths(self) -> list[int]:
        return sorted({100, *(int(self.biggest * f) for f in (0.06, 0.15, 0.3, 0.5, 0.75, 1.0))})

    @property
    def opening_lengths(self) -> list[int]:
        return [int(self.biggest * f) for f in (0.25, 0.5, 0.8)]

    @property
    def suffix_tokens(self) -> int:
        return max(60, self.biggest // 16)

    @property
    def rows_opening(self) -> int:
        return int(self.biggest * 0.3)

    @property
    def row_targets(self) -> list[int]:
        return probes.row_targets(self.biggest - self.rows_opening) if self.rows else []

    @property
    def pushed_tokens(self) -> int:
        return int(self.biggest * 0.3)

    @property
    def together_tokens(self) -> int:
        return int(self.biggest * 0.4)

    def requests(self) -> int:
        """How many requests the plan sends at most (a step cut short for time sends fewer)."""
        return (
            1
            + len(self.cold_lengths) * self.repeats
            + len(self.opening_lengths) * (2 + self.warm)
            + (3 + len(self.row_targets) if self.rows else 0)
            + self.together_rounds * self.streams
            + sum(self.decode_streams)
            + (2 + self.push_seats if self.push_seats else 0)
        )

    def spare(self) -> int:
        """Requests kept for replies that carry no text, each sent again with new text
        (`Prober.call`): a fifth of the plan, at least 5 (a tiny model here gave no text in about
        1 reply of 10). Sent only if such replies come."""
        return max(5, self.requests() // 5)

    def announced(self) -> int:
        """What calibrate announces and never exceeds: the plan, and the requests kept spare."""
        return self.requests() + self.spare()

    def prompt_tokens(self) -> int:
        """About how many prompt tokens the plan sends (for the announcement; billed on a paid target)."""
        cold = sum(self.cold_lengths) * self.repeats
        opened = sum(o * (2 + self.warm) + self.suffix_tokens * 2 for o in self.opening_lengths)
        targets = self.row_targets
        rows = (
            (3 + len(targets)) * self.rows_opening + sum(targets) + 2 * max(targets, default=0)
            if self.rows
            else 0
        )
        together = self.together_tokens * self.streams * self.together_rounds
        pushed = 2 * self.pushed_tokens + probes.PUSH_TOKENS * self.push_seats if self.push_seats else 0
        return 100 + cold + opened + rows + together + pushed + 60 * 7


SHORTER: tuple[dict[str, Any], ...] = (
    {},
    {"repeats": 3, "together_rounds": 2},
    {"repeats": 2, "warm": 2, "together_rounds": 2},
    {"repeats": 1, "together_rounds": 1, "rows": False},
    {"repeats": 1, "together_rounds": 1, "warm": 1, "decode_streams": (1, 2), "rows": False},
)
"""Ever smaller plans, for a small --max-requests: fewer repeats first, then fewer steps."""


def make_plan(facts: ServerFacts, max_requests: int) -> Plan:
    """The largest plan that fits the server's context and `max_requests`; a FelabError if none does."""
    biggest = BIGGEST
    if facts.seat_context is not None:
        biggest = min(biggest, facts.seat_context - probes.DECODE_MAX_TOKENS - 64)
    if biggest < SMALLEST_CONTEXT:
        seat = f"{facts.seat_context:,} tokens" + (" per seat" if facts.seats else "")
        raise FelabError(
            f"this server's context ({seat}) is too small for calibrate's probes, which need prompts "
            f"of at least {SMALLEST_CONTEXT:,} tokens to tell prefill's terms apart. Restart it with a "
            f"larger context (llama.cpp: seats of 8,192 tokens, e.g. -c 32768 -np 4), calibrate it, and "
            f"use the profile with the context you really run (--context-tokens, --seats)."
        )
    for change in SHORTER:
        plan = Plan(biggest, push_seats=facts.seats or 0, **change)
        if plan.announced() <= max_requests:
            return plan
    least = Plan(biggest, push_seats=facts.seats or 0, **SHORTER[-1]).announced()
    raise FelabError(
        f"calibrate needs at least {least} requests to measure what it fits; --max-requests is "
        f"{max_requests}. Allow {least} or more."
    )


@dataclass
class Measurements:
    """Everything the probes measured, as the fit reads it."""

    facts: ServerFacts
    first: probes.Sample
    cold: list[list[probes.Sample]] = field(default_factory=list)
    """Cold prompts: the repeats of each length."""
    openings: list[probes.Opening] = field(default_factory=list)
    rows: list[probes.Sample] = field(default_factory=list)
    """New parts of chosen lengths after one cached opening (empty: not measured)."""
    together: list[list[probes.Sample]] = field(default_factory=list)
    decode: dict[int, list[probes.Sample]] = field(default_factory=dict)
    pushed: probes.Return | None = None
    """An opening pushed out of every seat and sent again (None: no seats, not measured)."""


def measure(p: Prober, plan: Plan, facts: ServerFacts) -> Measurements:
    """Run the plan's steps in order, with a progress line for each."""
    n = (6 if plan.rows else 5) + (1 if plan.push_seats else 0)
    last = n - 1 if plan.push_seats else n  # (decode's step)
    p.say(f"  1/{n}  a first short call (does it answer, and report its prompt tokens?)")
    m = Measurements(facts, probes.first_call(p))
    p.learn_chars_per_token([m.first])
    p.say(
        f"  2/{n}  cold prompts of {len(plan.cold_lengths)} lengths, {plan.repeats}x each (prefill, overhead)"
    )
    m.cold = probes.cold(p, plan.cold_lengths, plan.repeats)
    p.say(f"  3/{n}  {len(plan.opening_lengths)} openings, each sent again with new text (prefix cache)")
    m.openings = probes.openings(p, plan.opening_lengths, plan.suffix_tokens, plan.warm)
    if plan.rows:
        p.say(f"  4/{n}  new parts of {len(plan.row_targets)} lengths after an opening (a small last piece)")
        m.rows = probes.rows(p, plan.rows_opening, plan.row_targets)
    p.say(f"  {last - 1}/{n}  {plan.streams} cold prompts at once (how prefill is shared)")
    m.together = probes.together(p, plan.together_tokens, plan.streams, plan.together_rounds)
    p.say(
        f"  {last}/{n}  replies, {probes.DECODE_MAX_TOKENS} tokens, "
        f"1 to {max(plan.decode_streams)} at once (decode)"
    )
    m.decode = probes.decode(p, plan.decode_streams)
    if plan.push_seats:  # last: the prompts it sends push earlier probes' prompts out of the seats
        p.say(f"  {n}/{n}  an opening pushed out of every seat, then sent again (a cache beyond the seats)")
        m.pushed = probes.pushed_out(p, plan.push_seats, plan.pushed_tokens)
    return m
