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
    prefix       cache-aware: the replicas whose work so far (in-flight tokens over time) is
                 at most 1.2 times the mean, or at most 8 average requests' work above it, are
                 candidates; of those, as NVIDIA Dynamo's KV
                 router scores a worker, each replica's cost is, in blocks,
                     prefill_weight x (its prefill backlog + this prompt's uncached tokens)
                     + the tokens of the requests it is serving (their prompts and replies)
                 and the lowest cost wins. The first term is what a cached prefix saves and
                 a queue costs; the second is its load, so a far busier replica loses to an
                 idle one that holds nearly as much. Ties (a prompt no replica holds, on idle
                 replicas) are drawn at random from the tied replicas (seeded by --seed), never
                 the lowest index first; `route_temperature` above 0 samples every replica
                 with softmax weights over its normalised cost instead (Dynamo's temperature).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from felab.mock_server.cache import PrefixCache
from felab.mock_server.loop import Loop
from felab.mock_server.routes_sglang import CacheAware
from felab.mock_server.seats import Seats
from felab.mock_server.timing import TimingModel

ROUTES = ("random", "round-robin", "affinity", "prefix", "sglang-cache-aware")

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
    finished: int = 0
    """Replies over (whole, or cut by a hang-up): `requests - finished` are in flight."""

    def admit(self, prompt: int, cached: int) -> None:
        """Count one request as the replica takes it (cached: prompt tokens found in the cache)."""
        self.requests += 1
        self.prompt_tokens += prompt
        self.hits += cached

    def served(self, ttft_s: float | None, tokens: int) -> None:
        """Its reply is over: count the tokens it got and, if its first token came, that TTFT."""
        self.finished += 1
        self.generation_tokens += tokens
        if ttft_s is None:
            return
        for i, upper in enumerate(TTFT_BUCKETS_S):
            self.ttft_bucket_counts[i] += ttft_s <= upper
        self.ttft_sum_s += ttft_s
        self.ttft_count += 1


@dataclass
class Replica:
    """One copy of the server: a cache, a prefill lane, its counters, and its seats (if limited)."""

    index: int
    cache: PrefixCache
    lane: Loop
    """Its engine loop (loop.py): with the lesson's defaults, one whole prompt a step, by arrival."""
    stats: ReplicaStats = field(default_factory=ReplicaStats)
    active_tokens: int = 0
    """Prompt and reply tokens of the requests it serves now (kept by PracticeModel.book and
    finish through `hold`, for the prefix router's load term: Dynamo's active blocks)."""
    seats: Seats | None = None
    """How many requests it runs at once (seats.py); None: no limit."""
    token_s: float = 0.0
    """Its in-flight tokens integrated over time until `held_at` (token-seconds): the work it has
    held since it started, the prefix router's long-run load."""
    held_at: float | None = None

    def hold(self, tokens: int, at: float) -> None:
        """`tokens` more (fewer, if negative) in flight from `at` on (a request booked, a reply over):
        the work held so far is added up to `at` first (`Fleet.works`)."""
        if self.held_at is not None:
            self.token_s += self.active_tokens * max(0.0, at - self.held_at)
        self.held_at = at if self.held_at is None else max(self.held_at, at)
        self.active_tokens += tokens


def rendezvous(session: str, n: int) -> int:
    """The replica (0..n-1) whose hash with the session scores highest: stable across restarts."""

    def score(i: int) -> bytes:
        return hashlib.blake2b(f"{session}/{i}".encode(), digest_size=8).digest()

    return max(range(n), key=score)


@dataclass(frozen=True)
class Weights:
    """The prefix router's knobs (Settings.route_prefill_weight, route_temperature, route_cache_threshold)."""

    prefill: float = 1.0
    temperature: float = 0.0
    cache_threshold: float = 0.3
    balance: float = 1.2
    """A replica whose long-run work (`Fleet.works`) is over this times the mean is not a candidate
    (chosen on four traces of different shapes: docs/fleet.md, "Balance on traces it was not tuned on")..."""
    balance_abs: float = 8.0
    """... if it is also over the mean by more than this many average requests' work (lesson 06's
    sessions keep their replica: 8 sessions of 6 turns on 18 replicas)."""


class Fleet:
    """N replicas and the rule that routes a request to one of them."""

    def __init__(
        self,
        replicas: int,
        route: str,
        cache: tuple[int, int, float | None],
        timing: TimingModel,
        seed: int,
        weights: Weights = Weights(),
    ) -> None:
        """`cache`: each replica's (capacity in blocks, tokens per block, time to live or None)."""
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        self.route, self.timing, self.weights = route, timing, weights
        self.replicas = [
            Replica(i, PrefixCache(*cache), Loop(None, timing, by_arrival=True)) for i in range(replicas)
        ]
        self.rng = random.Random(f"route/{seed}")
        self.next_replica = itertools.count()
        self.routed = 0
        self.sglang = CacheAware()  # --route sglang-cache-aware (routes_sglang.py)

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
            return self.replicas[next(self.next_replica) % n]
        if self.route == "affinity" and session:
            return self.replicas[rendezvous(session, n)]
        if self.route == "prefix":
            return self.replicas[self.prefix_choice(prompt_tokens, keys, now, ready)]
        if self.route == "sglang-cache-aware":
            loads = [r.stats.requests - r.stats.finished for r in self.replicas]
            block = self.replicas[0].cache.block_tokens
            return self.replicas[self.sglang.choose(keys, prompt_tokens, block, loads)]
        return self.replicas[self.rng.randrange(n)]  # random, and affinity without a session value

    def prefix_choice(self, prompt_tokens: int, keys: Sequence[int], now: float, ready: float | None) -> int:
        """The replica `--route prefix` picks, in two steps (llm-d's filter, then Dynamo's scorer):

        1. **Filter by long-run load.** Each replica's work is its in-flight tokens integrated over
           time since it started (`works`: token-seconds). A replica whose work is over
           `balance` times the fleet's mean *and* over the mean by more than `balance_abs`
           requests' worth (the average request's work so far) sits this request out, however
           much of it it holds. Two thresholds, as SGLang's router has (relative and absolute):
           with fewer sessions than replicas (lesson 06: 8 on 18) every replica holding one is
           far above the mean, yet moving a session would only lose its history.
        2. **Score the others.** The lowest cost wins; for a cold prompt (no replica left holds
           more than `cache_threshold` of it), the lowest cost as if none held any, and among
           equals the one caching least (SGLang's rule: a cold prompt goes to the smallest tree).

        Step 2 alone balances what is in flight *now*; on a lightly loaded fleet most replicas are
        idle at any moment, so the replicas holding popular prefixes (a shared opening, a long
        session) win nearly every request while never looking busy, and their share of the hour's
        work grows without bound (load max/mean 8.8 at 64 replicas on the kit's agent trace, 35.6
        at 256). Step 1 bounds that share; a replica left out gets the prompt's prefix cached too,
        so a hot prefix ends up on as many replicas as its traffic needs.
        """
        start = now + self.timing.overhead_ms / 1000 if ready is None else ready
        work = self.works(now)
        total = sum(work)
        mean = total / len(work)
        self.routed += 1
        cap = max(self.weights.balance * mean, mean + self.weights.balance_abs * total / self.routed)
        pool = [r for r, w in zip(self.replicas, work, strict=True) if w <= cap]
        pool = pool or [self.replicas[work.index(min(work))]]  # (a balance under 1 may leave none)
        found = [r.cache.cached_blocks(keys, now) * r.cache.block_tokens for r in pool]
        if max(found) > self.weights.cache_threshold * prompt_tokens:
            return pool[self.lowest(self.costs(pool, [prompt_tokens - f for f in found], start))].index
        costs = self.costs(pool, [prompt_tokens] * len(pool), start)
        return pool[self.lowest(costs, [len(r.cache) for r in pool])].index

    def works(self, now: float) -> list[float]:
        """Each replica's long-run load: its in-flight tokens integrated over time up to `now`
        (token-seconds; `Replica.hold` adds them up as they change). All at once: a replay's
        router asks it of 64 replicas for each of 12,000 requests."""
        return [
            0.0 if r.held_at is None else r.token_s + r.active_tokens * max(0.0, now - r.held_at)
            for r in self.replicas
        ]

    def costs(self, pool: list[Replica], uncached: list[int], start: float) -> list[float]:
        """Dynamo's worker cost of each replica of `pool`, in blocks: weighted prefill (its lane's
        backlog when this prompt could start, plus the `uncached` tokens it would compute) plus
        the tokens it serves now."""
        rate, weight = self.timing.prefill_tokens_per_s, self.weights.prefill
        return [
            (weight * (max(0.0, r.lane.free_at - start) * rate + u) + r.active_tokens) / r.cache.block_tokens
            for r, u in zip(pool, uncached, strict=True)
        ]

    def lowest(self, costs: list[float], then: Sequence[int] | None = None) -> int:
        """The index of the cheapest replica (then the least `then`): a seeded draw among those tied
        (temperature 0), or a softmax draw over the costs normalised by the highest (Dynamo's)."""
        t = self.weights.temperature
        if t > 0:
            top = max(costs) or 1.0
            odds = [math.exp(-(c - min(costs)) / top / t) for c in costs]
            return self.rng.choices(range(len(costs)), weights=odds)[0]
        best = min(costs)
        tied = [i for i, c in enumerate(costs) if c <= best + 1e-9]
        if then is not None:
            least = min(then[i] for i in tied)
            tied = [i for i in tied if then[i] == least]
        return tied[self.rng.randrange(len(tied))] if len(tied) > 1 else tied[0]
