"""Replicas behind one address, and how each request picks one (`--replicas N --route R`).

A replica is one complete copy of the server: its own prefix cache and its own
prefill lane (its own GPU). Replicas share nothing, so a replica reuses only
what *it* has seen. Which replica a request reaches decides what it finds:

    random       any replica, uniformly (seeded by --seed)
    round-robin  each replica in turn
    affinity     the session value picks the replica: the `x-session-affinity`
                 header, else the request's `user` field (as Fireworks does).
                 Rendezvous hashing: every replica scores hash(session, replica)
                 and the highest wins, so a session always lands on the same
                 replica, and adding one moves only about 1/N of the sessions.
                 No session value: random, as a load balancer that knows nothing.
    prefix       cache-aware: the replica that would give this prompt its first
                 token soonest. Its cached prefix saves prefill time; a queue in
                 its prefill lane costs waiting time. So it is the replica with
                 the longest cached prefix unless that one is busy, and the least
                 loaded when none holds any. Cache-aware routers weigh the same
                 two things (SGLang's router, llm-d's prefix and queue scorers).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from felab.mock_server.cache import PrefixCache
from felab.mock_server.timing import PrefillLane, TimingModel

ROUTES = ("random", "round-robin", "affinity", "prefix")

TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
"""vLLM's buckets for vllm:time_to_first_token_seconds."""


@dataclass
class ReplicaStats:
    """One replica's counters (what /metrics shows). The requests it serves now are the model's
    live bookings (booking.py)."""

    requests: int = 0
    prompt_tokens: int = 0
    """Every admitted prompt token is looked up in the cache: also vLLM's prefix-cache queries."""
    hits: int = 0
    """Prompt tokens found in the cache (the usage's cached_tokens)."""
    generation_tokens: int = 0
    """Reply tokens sent (counted when a reply ends: all of them, or those due before a hang-up)."""
    ttft_bucket_counts: list[int] = field(default_factory=lambda: [0] * len(TTFT_BUCKETS_S))
    """How many first tokens came within each of TTFT_BUCKETS_S (a cumulative histogram); a
    request whose client hung up before its first token has none, so it is not counted."""
    ttft_sum_s: float = 0.0
    ttft_count: int = 0

    def admit(self, prompt: int, cached: int) -> None:
        """Count one request as the replica takes it (cached: prompt tokens found in the cache)."""
        self.requests += 1
        self.prompt_tokens += prompt
        self.hits += cached

    def served(self, ttft_s: float | None, tokens: int) -> None:
        """Its reply is over: count the tokens it got and, if its first token came, that TTFT."""
        self.generation_tokens += tokens
        if ttft_s is None:
            return
        for i, upper in enumerate(TTFT_BUCKETS_S):
            self.ttft_bucket_counts[i] += ttft_s <= upper
        self.ttft_sum_s += ttft_s
        self.ttft_count += 1


@dataclass
class Replica:
    """One copy of the server: a cache, a prefill lane, and its counters."""

    index: int
    cache: PrefixCache
    lane: PrefillLane = field(default_factory=PrefillLane)
    stats: ReplicaStats = field(default_factory=ReplicaStats)


def rendezvous(session: str, n: int) -> int:
    """The replica (0..n-1) whose hash with the session scores highest: stable across restarts."""

    def score(i: int) -> bytes:
        return hashlib.blake2b(f"{session}/{i}".encode(), digest_size=8).digest()

    return max(range(n), key=score)


class Fleet:
    """N replicas and the rule that routes a request to one of them."""

    def __init__(
        self,
        replicas: int,
        route: str,
        cache: tuple[int, int, float | None],
        timing: TimingModel,
        seed: int,
    ) -> None:
        """`cache`: each replica's (capacity in blocks, tokens per block, time to live or None)."""
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        self.route, self.timing = route, timing
        self.replicas = [Replica(i, PrefixCache(*cache)) for i in range(replicas)]
        self.rng = random.Random(f"route/{seed}")
        self.turn = itertools.count()

    def pick(
        self,
        prompt_tokens: int,
        keys: Sequence[int],
        session: str | None,
        now: float,
        ready: float | None = None,
    ) -> Replica:
        """The replica this prompt goes to (`keys`: its block keys; `ready`: when its prefill may
        start, arrival plus overhead, as the booking will ask its lane; default now plus overhead)."""
        n = len(self.replicas)
        if n == 1:
            return self.replicas[0]
        if self.route == "round-robin":
            return self.replicas[next(self.turn) % n]
        if self.route == "affinity" and session:
            return self.replicas[rendezvous(session, n)]
        if self.route == "prefix":
            start = now + self.timing.overhead_ms / 1000 if ready is None else ready

            def first_token_at(r: Replica) -> float:  # as its lane would schedule it, booking nothing
                uncached = prompt_tokens - r.cache.cached_blocks(keys, now) * r.cache.block_tokens
                return r.lane.quote(start, self.timing.prefill_s(uncached)).end

            return min(self.replicas, key=lambda r: (first_token_at(r), r.index))
        return self.replicas[self.rng.randrange(n)]  # random, and affinity without a session value
