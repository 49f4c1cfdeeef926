"""Traces of shapes the kit was not tuned on, for the balance check (`python -m felab.replay.balance`).

The prefix route was tuned on Mooncake's conversation trace. A router that balances only
there has learnt the trace, not the job; so the balance check also replays shapes that stress
it differently, each written here in Mooncake's format (512-token blocks, `session_id` on every
line), the same file for the same seed:

    openings   a few long shared openings (4 system prompts of 6,000 tokens, chosen 8:4:2:1),
               many short sessions (1 to 3 turns of short messages): the replicas that hold
               the popular openings attract nearly everything
    bursts     a quiet chat background (one request every 2 s) and, every minute, a burst of
               300 requests within 2 s sharing one of 3 long instructions (8,000 tokens) with a
               document of their own (1,000 to 10,000 tokens): a batch job's shape

Block ids follow Mooncake's rule (an id stands for its block and everything before it): an
opening's full blocks have the same ids wherever it is sent; what follows gets new ids.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Iterator
from typing import IO

BLOCK = 512


def opening_ids(k: int, tokens: int, first: int) -> list[int]:
    """The ids of opening k's full blocks (k's own range, from `first`)."""
    return list(range(first + k * 1000, first + k * 1000 + tokens // BLOCK))


def line(at_s: float, tokens: int, reply: int, ids: list[int], session: str) -> dict:
    return {
        "timestamp": round(at_s * 1000),
        "input_length": tokens,
        "output_length": reply,
        "hash_ids": ids,
        "session_id": session,
    }


def openings(seed: int = 0, minutes: float = 30.0, rate: float = 3.0) -> Iterator[dict]:
    """Sessions at `rate` a second, each on one of 4 openings (8:4:2:1), 1 to 3 short turns."""
    rng = random.Random(f"openings/{seed}")
    new_id = itertools.count(10_000)
    opening_tokens = 6000
    lines: list[dict] = []
    at, index = 0.0, 0
    while at < minutes * 60:
        k = rng.choices(range(4), weights=(8, 4, 2, 1))[0]
        ids, history, t = opening_ids(k, opening_tokens, 0), opening_tokens, at
        for _ in range(rng.randint(1, 3)):
            tokens = history + rng.randint(100, 600)
            ids += [next(new_id) for _ in range(tokens // BLOCK - len(ids))]
            partial = [next(new_id)] if tokens % BLOCK else []
            reply = rng.randint(50, 300)
            lines.append(line(t, tokens, reply, ids[: tokens // BLOCK] + partial, f"open-{index}"))
            history, t = tokens + reply, t + rng.uniform(5, 30)
        at, index = at + rng.expovariate(rate), index + 1
    yield from sorted(lines, key=lambda x: x["timestamp"])


def bursts(seed: int = 0, minutes: float = 30.0) -> Iterator[dict]:
    """A chat background (a request every 2 s on average) and a 300-request burst every minute."""
    rng = random.Random(f"bursts/{seed}")
    new_id = itertools.count(10_000)
    lines: list[dict] = []
    at = 0.0
    while at < minutes * 60:  # the background: one-off prompts of 500 to 8,000 tokens
        tokens = rng.randint(500, 8000)
        ids = [next(new_id) for _ in range(-(-tokens // BLOCK))]
        lines.append(line(at, tokens, rng.randint(50, 500), ids, f"chat-{len(lines)}"))
        at += rng.expovariate(0.5)
    for minute in range(int(minutes)):
        k = minute % 3
        for j in range(300):
            tokens = 8000 + rng.randint(1000, 10_000)
            full = opening_ids(k, 8000, 0)
            ids = full + [next(new_id) for _ in range(-(-tokens // BLOCK) - len(full))]
            start = minute * 60 + 30 + rng.uniform(0, 2)
            lines.append(line(start, tokens, rng.randint(20, 200), ids, f"batch-{minute}-{j}"))
    yield from sorted(lines, key=lambda x: x["timestamp"])


def write(shape: str, out: IO[str], seed: int = 0, minutes: float = 30.0) -> int:
    """Write one shape's trace, a JSON object a line; how many requests."""
    count = 0
    for request in SHAPES[shape](seed, minutes):
        out.write(json.dumps(request, separators=(", ", ": ")) + "\n")
        count += 1
    return count


SHAPES: dict[str, Callable[[int, float], Iterator[dict]]] = {"openings": openings, "bursts": bursts}
