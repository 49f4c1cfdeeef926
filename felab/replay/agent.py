"""An agent workload of the kit's own, in Mooncake's format, with a session id on every line.

Lesson 06's agent, at any scale:

    one opening      3,028 tokens (its instructions, tools and policy), the same for every session
    turns            each adds the user's message (a question and a tool result) and the reply
                     before it, so the prompt is the whole history so far and grows every turn
    gaps             a few seconds between turns (reading, tool calls); now and then an idle
                     spell of minutes (the user went away), longer than a cache keeps blocks
    sessions         arrive at random (a Poisson process) at --rate a second

Block ids follow Mooncake's rule: an id stands for its block and everything before it.
The opening's full blocks have the same ids in every session; a session's history is its
own. A prompt's full blocks keep their ids in every later prompt of the session (the
history only grows), and a partial last block gets a new id each time (its text changes).

Sessions are merged in time order with a heap of the sessions still running, so the file
is written as it is made: memory grows with the sessions active at once, not the trace.
The same flags and seed write the same file.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

OPENING_TOKENS = 3028
"""Lesson 06's opening (prefix_bench.py's PREAMBLE: 12,113 characters ÷ 4)."""
MESSAGE_TOKENS = (150, 350)
"""A turn's user message: the question and a tool result (affinity_bench.py's is about 250)."""
REPLY_TOKENS = (20, 100)
GAP_S = (2.0, 8.0)
"""Seconds between two turns of a busy session."""


@dataclass(frozen=True)
class AgentShape:
    """What the generator is told (the flags of `felab agent-trace`)."""

    sessions: int = 500
    rate: float = 0.5
    """Sessions starting per second, on average."""
    turns: int = 20
    """Turns per session on average (each session draws from turns/2 to 3·turns/2)."""
    idle_share: float = 0.1
    """Chance that a turn comes after an idle spell instead of a short gap."""
    idle_s: float = 300.0
    """An idle spell lasts from half to one and a half times this."""
    block_tokens: int = 64
    seed: int = 0


@dataclass
class Totals:
    """What the written trace holds, for the line printed after it."""

    requests: int = 0
    prompt_tokens: int = 0
    repeated_tokens: int = 0
    """Tokens in full blocks some earlier prompt already had: the most any cache could reuse."""
    span_s: float = 0.0


def session(shape: AgentShape, index: int, start_s: float, new_id: Iterator[int]) -> Iterator[dict]:
    """One session's requests, in time order (a line of the trace each, plus `_repeated`)."""
    rng = random.Random(f"agent/{shape.seed}/{index}")
    b = shape.block_tokens
    ids = list(range(OPENING_TOKENS // b))  # the opening's full blocks: the same in every session
    history, at = OPENING_TOKENS, start_s
    turns = rng.randint(max(1, shape.turns // 2), max(1, shape.turns * 3 // 2))
    for turn in range(turns):
        length = history + rng.randint(*MESSAGE_TOKENS)
        full, known = length // b, len(ids)
        ids += [next(new_id) for _ in range(full - known)]
        seen = known if index or turn else 0  # the trace's very first prompt: its opening is new too
        partial = [next(new_id)] if length % b else []
        reply = rng.randint(*REPLY_TOKENS)
        yield {
            "timestamp": round(at * 1000),
            "input_length": length,
            "output_length": reply,
            "hash_ids": ids[:full] + partial,
            "session_id": f"agent-{index}",
            "_repeated": min(full, seen) * b,
        }
        history = length + reply
        idle = rng.random() < shape.idle_share
        at += rng.uniform(0.5, 1.5) * shape.idle_s if idle else rng.uniform(*GAP_S)


def requests(shape: AgentShape) -> Iterator[dict]:
    """Every session's requests, merged in time order."""
    starts = random.Random(f"agent/{shape.seed}/starts")
    first_new = OPENING_TOKENS // shape.block_tokens
    new_id = itertools.count(first_new)
    running: list[tuple[int, int, dict, Iterator[dict]]] = []  # (ms, session, its next line, the rest)
    begun, next_start = 0, 0.0
    while begun < shape.sessions or running:
        if begun < shape.sessions and (not running or next_start * 1000 <= running[0][0]):
            rest = session(shape, begun, next_start, new_id)
            line = next(rest)
            heapq.heappush(running, (line["timestamp"], begun, line, rest))
            begun, next_start = begun + 1, next_start + starts.expovariate(shape.rate)
            continue
        _, index, line, rest = heapq.heappop(running)
        yield line
        following = next(rest, None)
        if following is not None:
            heapq.heappush(running, (following["timestamp"], index, following, rest))


def write(shape: AgentShape, out: IO[str]) -> Totals:
    """Write the trace, one JSON object a line; what it holds."""
    totals = Totals()
    for line in requests(shape):
        totals.requests += 1
        totals.prompt_tokens += line["input_length"]
        totals.repeated_tokens += line.pop("_repeated")
        totals.span_s = line["timestamp"] / 1000
        out.write(json.dumps(line, separators=(", ", ": ")) + "\n")
    return totals
