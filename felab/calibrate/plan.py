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
    reference again  3 cold prompts of the reference length (3/10 of the longest): did the
                     machine's speed move while calibrate measured (evidence.drift_warning)?

How long it takes is the server's business: nearly all of it is prompt reading. Once the
cold step has timed two lengths (the first at least twice as long as the shortest), `Speed`
draws a line through their medians (a fixed overhead per request, seconds per prompt token)
and `Plan.projected_s` prices the plan with it: its requests' overheads, the prompt tokens the
server must read (not those its prefix cache keeps), and the gaps of the replies. So the
duration scales with the server's time per token: on a server that reads a cold 3,000-token
prompt in 1 s (3,000 tokens/s) the plan reads about 162,000 tokens, about a minute (59 s on
tests/test_calibrate_virtual.py's virtual clock, 56 s projected); twice as slow a server takes
about twice as long, a little less below 1,000 tokens/s, where the cold step leaves out the
lengths that would take over 8 s each (300 tokens/s: about 4 minutes; 100: about 13). The
line leaves out attention, which grows with a prompt's length: where it counts (a CPU), the
projection is somewhat short.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from felab.calibrate import probes, prompts
from felab.calibrate.probes import BIGGEST, SMALLEST_CONTEXT, Prober, ServerFacts
from felab.errors import FelabError

SEAT_ROOM = probes.DECODE_MAX_TOKENS + 64
"""Tokens of a seat kept free beside the longest probe prompt (a reply, and the template's)."""
QUESTION_TOKENS = 20
"""About the tokens of a short question after a cached opening (prompts.QUESTIONS, the template's)."""
DECODE_PROMPT_TOKENS = 60
"""About the tokens of a decode probe's prompt (200 characters, and the template's)."""


@dataclass(frozen=True)
class Speed:
    """How fast this server reads a cold prompt: the medians of two cold lengths, and the line
    through them, seconds = overhead + tokens x per token; and the gap between reply tokens."""

    short: tuple[int, float]
    """The shorter length: its tokens, its median TTFT in seconds."""
    long: tuple[int, float]
    """The longer length: its tokens, its median TTFT in seconds (what the projection line says)."""
    gap_s: float = 0.0
    """Median time between reply tokens (0: no reply had two tokens of text)."""

    @property
    def per_token_s(self) -> float:
        """The slope; where noise makes it 0 or less, the longer prompt's time over its tokens."""
        (n1, t1), (n2, t2) = self.short, self.long
        slope = (t2 - t1) / (n2 - n1) if n2 > n1 else 0.0
        return slope if slope > 0 else t2 / max(n2, 1)

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.long[1] - self.per_token_s * self.long[0])

    def seconds(self, tokens: int) -> float:
        """A cold prompt of `tokens`, by the line."""
        return self.overhead_s + tokens * self.per_token_s


def speed_of(cold: list[list[probes.Sample]]) -> Speed:
    """The speed from the cold step's first and last lengths so far (medians of their repeats)."""

    def point(group: list[probes.Sample]) -> tuple[int, float]:
        return (
            int(statistics.median(s.prompt_tokens for s in group)),
            statistics.median(s.ttft_ms for s in group) / 1000,
        )

    gaps = [t for g in cold for s in g if (t := s.tpot_ms) is not None]
    return Speed(point(cold[0]), point(cold[-1]), statistics.median(gaps) / 1000 if gaps else 0.0)


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
    reference_again: int = 3
    """Cold prompts of the reference length sent again after every other timing probe (only the
    token count's few short requests come after them: counting.find): against that
    length's repeats at the start, whether the machine's speed moved while calibrate measured
    (evidence.drift_warning). On this 2-core machine it moved 1.65x between a calibration and
    the held-out rounds a minute later, and a profile fitted across such a change mixes both."""

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
            + self.reference_again
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
        again = self.reference_again * int(self.biggest * REFERENCE_SHARE)
        return 100 + cold + opened + rows + self.together_sent + self.pushed_sent + again + 60 * 7

    @property
    def together_sent(self) -> int:
        """Prompt tokens of the prompts sent at once (all read: none shares a prefix)."""
        return self.together_tokens * self.streams * self.together_rounds

    @property
    def pushed_sent(self) -> int:
        """Prompt tokens of the pushed-out probe (an opening twice, a short prompt per seat)."""
        return 2 * self.pushed_tokens + probes.PUSH_TOKENS * self.push_seats if self.push_seats else 0

    @property
    def speed_at(self) -> int:
        """The cold length after which the speed is known: the first at least twice the shortest
        (the second of the full plan's; never later than the third, before any is left out)."""
        lengths = self.cold_lengths
        return next(i for i, n in enumerate(lengths) if n >= 2 * lengths[0])

    def cold_sent(self, speed: Speed) -> list[int]:
        """The cold lengths `probes.cold` sends on a server of this speed (it leaves out, from the
        fourth on, a length that would take over SLOWEST_PROBE_S: `probes._slow`)."""
        kept: list[int] = []
        for n in self.cold_lengths:
            if len(kept) >= 3 and 2 * speed.seconds(kept[-1]) / kept[-1] * n > probes.SLOWEST_PROBE_S:
                break
            kept.append(n)
        return kept

    def read_tokens(self, speed: Speed) -> int:
        """About how many prompt tokens the server reads (not those its prefix cache keeps): each
        cold prompt whole, an opening once, and after it only what is new."""
        cold = sum(self.cold_sent(speed)) * self.repeats
        opened = sum(
            o + 2 * self.suffix_tokens + (self.warm + 1) * QUESTION_TOKENS for o in self.opening_lengths
        )
        targets = self.row_targets
        rows = self.rows_opening + sum(targets) + max(targets) + 60 if self.rows else 0
        decode = DECODE_PROMPT_TOKENS * sum(self.decode_streams)
        again = self.reference_again * self.reference_tokens(speed)
        return 100 + cold + opened + rows + self.together_sent + decode + self.pushed_sent + again

    def reference_tokens(self, speed: Speed) -> int:
        """The reference length on a server of this speed: of the cold lengths it sends, the one
        nearest REFERENCE_SHARE of the longest (`reference_group`)."""
        return nearest_reference(self.cold_sent(speed), self.biggest)

    def reply_gaps(self) -> int:
        """The gaps between reply tokens the plan waits for: one a prompt probe, the short
        questions' longer replies, and the decode probes' (streams at once share their steps)."""
        questions = len(self.opening_lengths) * self.warm * (probes.FOLLOW_UP_MAX_TOKENS - 2)
        return self.requests() + questions + probes.DECODE_MAX_TOKENS * len(self.decode_streams)

    def projected_s(self, speed: Speed, more_requests: int = 0, more_tokens: int = 0) -> float:
        """How long the whole plan takes on a server of this speed (with `more_requests` of
        `more_tokens` in all besides: calibrate's count of tokens), by the speed's line."""
        tokens = self.read_tokens(speed) + more_tokens
        requests = self.requests() + more_requests
        return requests * speed.overhead_s + tokens * speed.per_token_s + self.reply_gaps() * speed.gap_s


SHORTER: tuple[dict[str, Any], ...] = (
    {},
    {"repeats": 3, "together_rounds": 2},
    {"repeats": 2, "warm": 2, "together_rounds": 2},
    {"repeats": 1, "together_rounds": 1, "rows": False},
    {"repeats": 1, "together_rounds": 1, "warm": 1, "decode_streams": (1, 2), "rows": False},
)
"""Ever smaller plans, for a small --max-requests: fewer repeats first, then fewer steps."""


def make_plan(facts: ServerFacts, max_requests: int, besides: int = 0) -> Plan:
    """The largest plan that fits the server's context and `max_requests`, with `besides` more
    requests sent after it (calibrate's count of tokens); a FelabError if none does."""
    biggest = BIGGEST
    if facts.seat_context is not None:
        biggest = min(biggest, facts.seat_context - SEAT_ROOM)
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
        if plan.announced() + besides <= max_requests:
            return plan
    least = Plan(biggest, push_seats=facts.seats or 0, **SHORTER[-1]).announced() + besides
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
    reference_before: list[probes.Sample] = field(default_factory=list)
    """The reference length's cold prompts at the start (`reference_group`: one of `cold`)."""
    reference_after: list[probes.Sample] = field(default_factory=list)
    """The same length's cold prompts sent again after every other timing probe (empty: none)."""


def measure(
    p: Prober, plan: Plan, facts: ServerFacts, on_speed: Callable[[Speed], None] | None = None
) -> Measurements:
    """Run the plan's steps in order, with a progress line for each. Once the cold step has timed
    the plan's first lengths, `on_speed` gets the server's speed (calibrate's time bound: it may stop
    there, before the plan's long prompts)."""
    n = (6 if plan.rows else 5) + (1 if plan.push_seats else 0)
    last = n - 1 if plan.push_seats else n  # (decode's step)
    p.say(f"  1/{n}  a first short call (does it answer, and report its prompt tokens?)")
    m = Measurements(facts, probes.first_call(p))
    p.learn_chars_per_token([m.first])
    p.say(
        f"  2/{n}  cold prompts of {len(plan.cold_lengths)} lengths, {plan.repeats}x each (prefill, overhead)"
    )
    m.cold = probes.cold(p, plan.cold_lengths, plan.repeats, _after(plan.speed_at, on_speed))
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
    m.reference_before = reference_group(m.cold, plan.biggest)
    m.reference_after = again(p, m.reference_before, plan.reference_again)
    return m


REFERENCE_SHARE = 0.3
"""The reference probe: the cold prompts of the length nearest this share of the longest."""


def nearest_reference(lengths: list[int], biggest: int) -> int:
    """Of these prompt lengths, the reference one: nearest REFERENCE_SHARE of the longest (the first
    such)."""
    return min(lengths, key=lambda n: abs(n - REFERENCE_SHARE * biggest))


def reference_group(cold: list[list[probes.Sample]], biggest: int) -> list[probes.Sample]:
    """The cold prompts of the reference length (the profile's `reference_tokens`: `--check` and
    the end of calibrate send that length again); empty if none was measured."""
    groups = [g for g in cold if g]
    if not groups:
        return []
    tokens = nearest_reference([g[0].prompt_tokens for g in groups], biggest)
    return next(g for g in groups if g[0].prompt_tokens == tokens)


def again(p: Prober, reference: list[probes.Sample], n: int) -> list[probes.Sample]:
    """`n` cold prompts of the reference's length, new text each, after every other timing probe."""
    if not reference or n <= 0:
        return []
    tokens = reference[0].prompt_tokens
    p.say(f"  and the reference prompts again ({tokens:,} tokens, cold): did the machine's speed move?")
    return [p.call(prompts.fresh(p.tokens_to_chars(tokens), p.rng)) for _ in range(n)]


def _after(
    at: int, on_speed: Callable[[Speed], None] | None
) -> Callable[[list[list[probes.Sample]]], None] | None:
    """What the cold step calls after each length: `on_speed` once, after the length `at`."""
    if on_speed is None:
        return None
    known = on_speed

    def then(cold: list[list[probes.Sample]]) -> None:
        if len(cold) == at + 1:
            known(speed_of(cold))

    return then
