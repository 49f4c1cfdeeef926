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
from dataclasses import dataclass, field

from felab.metrics import ReplicaStats
from felab.prefix_cache import BLOCK_TOKENS, PrefixCache, block_keys
from felab.timing import PrefillLane, TimingModel

ROUTES = ("random", "round-robin", "affinity", "prefix")


@dataclass
class Replica:
    """One copy of the server: a cache, a prefill lane, and its counters for /metrics."""

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
        cache_blocks: int,
        cache_ttl_s: float | None,
        timing: TimingModel,
        seed: int = 0,
    ) -> None:
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        self.route, self.timing = route, timing
        self.replicas = [Replica(i, PrefixCache(cache_blocks, cache_ttl_s)) for i in range(replicas)]
        self.rng = random.Random(f"route/{seed}")
        self.turn = itertools.count()

    def pick(
        self, tokens: list[str], session: str | None, now: float, keys: list[int] | None = None
    ) -> Replica:
        """The replica this request goes to (`keys`: the prompt's block keys, if already computed)."""
        n = len(self.replicas)
        if n == 1:
            return self.replicas[0]
        if self.route == "round-robin":
            return self.replicas[next(self.turn) % n]
        if self.route == "affinity" and session:
            return self.replicas[rendezvous(session, n)]
        if self.route == "prefix":
            keys = block_keys(tokens) if keys is None else keys

            def first_token_at(r: Replica) -> float:  # as its lane would schedule it, booking nothing
                uncached = len(tokens) - r.cache.cached_blocks(keys) * BLOCK_TOKENS
                return r.lane.quote(now, self.timing, uncached)[1]

            return min(self.replicas, key=lambda r: (first_token_at(r), r.index))
        return self.replicas[self.rng.randrange(n)]  # random, and affinity without a session value
