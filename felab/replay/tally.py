"""What a replay adds up: one `Tally` per configuration, then one summary row.

Both drivers (virtual time, real time) feed it the same way, one finished request
at a time, so their rows can be put side by side. It keeps running sums, plus the
few things a summary cannot be summed from:

- every TTFT and queueing delay, 8 bytes each (`array('d')`), for the percentiles
  (felab.stats.percentile: a percentile needs all the values);
- for traces with sessions, the replica that served each session's last request, to
  count how often the next one reaches the same replica (affinity's whole point).

Nothing else about a request is kept: memory grows with the cache, not with the trace.
The summary is a pure function of the tally; nothing here prints.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from felab.prices import Price
from felab.stats import percentile


@dataclass
class Tally:
    """Running sums over the requests of one configuration."""

    requests: int = 0
    failed: int = 0
    first_error: str | None = None
    failed_prompt_max: int | None = None
    """The longest prompt of a failed request, by the trace: what a larger context must hold."""
    longest_error: str | None = None
    """That request's message. A restart it advises fits every prompt that failed; one sized for
    the first refused may not (a server of 8,192 tokens: 32,768 advised for the first, 87,169 the
    longest, on the Mooncake trace's first 20)."""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    first_arrival_s: float | None = None
    last_arrival_s: float = 0.0
    ttft_s: array = field(default_factory=lambda: array("d"))
    queue_s: array = field(default_factory=lambda: array("d"))
    last_replica: dict[str, int] = field(default_factory=dict)
    """session -> the replica that served its last request (traces with sessions only)."""
    followed: int = 0
    """Requests whose session was seen before."""
    same_replica: int = 0
    """Of those, how many reached the replica that served the session's last request."""
    unreported: int = 0
    """Requests whose server did not report cached or prompt tokens (real time only): the
    figures that need them are then shown as unknown, not assumed."""
    send_lag_s: array | None = None
    """How late each request left (real time only: the virtual clock is never late)."""
    in_flight_max: int | None = None
    """The most requests booked and not yet over at once, where the driver holds them (virtual time):
    a fleet that cannot keep up holds nearly every request, and the replay's memory grows with it."""
    lane_uncached: list[int] | None = None
    """Uncached prompt tokens each replica prefilled, where the driver sees them (virtual time)."""
    token_s: list[float] | None = None
    """Per replica, its in-flight tokens integrated over time, in token-seconds, where the driver
    sees when each reply ends (virtual time): the load figure's numerator (`in_flight`)."""
    busy_from_s: float | None = None
    busy_to_s: float = 0.0
    """The window the load is averaged over: the first arrival to the last reply's end."""

    def held(self, replica: int, replicas: int, tokens: int, start_s: float, end_s: float) -> None:
        """One request held `tokens` (its prompt and its reply) on `replica` from `start_s` (its
        arrival) to `end_s` (its reply's end): add it to the replica's in-flight token-seconds."""
        if self.token_s is None:
            self.token_s = [0.0] * replicas
        self.token_s[replica] += tokens * max(0.0, end_s - start_s)
        self.busy_from_s = start_s if self.busy_from_s is None else min(self.busy_from_s, start_s)
        self.busy_to_s = max(self.busy_to_s, end_s)

    def in_flight(self) -> list[float] | None:
        """Each replica's load as the routers count it: the tokens of the requests it holds (prompt
        and reply, from arrival to the reply's end: Dynamo's active blocks, the prefix route's
        `active_tokens`), averaged over the window from the first arrival to the last reply's end."""
        if self.token_s is None or self.busy_from_s is None:
            return None
        window = self.busy_to_s - self.busy_from_s
        return [t / window for t in self.token_s] if window > 0 else None

    def add(
        self,
        arrival_s: float,
        prompt_tokens: int,
        cached_tokens: int,
        ttft_s: float,
        queue_s: float | None = None,
        replica: int | None = None,
        session: str | None = None,
    ) -> None:
        """Count one request that got its first token (`None`: the driver cannot see it)."""
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.cached_tokens += cached_tokens
        self.arrived(arrival_s)
        self.ttft_s.append(ttft_s)
        if queue_s is not None:
            self.queue_s.append(queue_s)
        if session is not None and replica is not None:
            before = self.last_replica.get(session)
            if before is not None:
                self.followed += 1
                self.same_replica += before == replica
            self.last_replica[session] = replica

    def fail(self, arrival_s: float, message: str, prompt_tokens: int | None = None) -> None:
        """Count one request that failed: it is not a measurement, only a count, its message and
        its prompt's length."""
        self.failed += 1
        self.first_error = self.first_error or message
        if prompt_tokens is not None and prompt_tokens > (self.failed_prompt_max or 0):
            self.failed_prompt_max, self.longest_error = prompt_tokens, message
        self.arrived(arrival_s)

    def arrived(self, at_s: float) -> None:
        """Widen the span (in real time, requests are tallied in the order they finish)."""
        first = self.first_arrival_s
        self.first_arrival_s = at_s if first is None else min(first, at_s)
        self.last_arrival_s = max(self.last_arrival_s, at_s)


def ms(values: array, p: float) -> float | None:
    value = percentile(values, p)
    return None if value is None else value * 1000


def busy_pct(t: Tally, uncached: int, capacity_tps: float | None, span: float) -> float | None:
    """Prefill time over the span, in %: the busiest lane's if known, else the fleet's average."""
    if not capacity_tps or span <= 0:
        return None
    if t.lane_uncached:
        return 100 * max(t.lane_uncached) / (capacity_tps / len(t.lane_uncached)) / span
    return 100 * uncached / capacity_tps / span


def summary(
    tally: Tally,
    loads: Sequence[float] | None,
    price: Price,
    wall_s: float,
    capacity_tps: float | None = None,
) -> dict[str, Any]:
    """One configuration's row (JSON-ready; `None` where a figure was not measured).

    `loads`: each replica's load, where the driver can see it: its time-averaged in-flight tokens
    (`Tally.in_flight`, virtual time). `load_max_over_mean` is the busiest replica's over the mean:
    1 is even; a router that piles work on a few replicas shows far above 1 even when every
    replica served as many requests (a request counts for what it holds, and for how long).
    `capacity_tps`: prompt tokens the whole fleet can prefill a second, where it is known;
    `prefill_busy_pct` is the uncached tokens' prefill time over the span, for the busiest
    lane where each lane's load is known (virtual time), else the fleet's average: above
    100, that lane cannot keep up and its queue grows for as long as the traffic lasts.
    Costs: input tokens at the list price, and with the cached ones at the cached price.
    """
    t = tally
    span = t.last_arrival_s - (t.first_arrival_s or 0.0)
    uncached = t.prompt_tokens - t.cached_tokens
    known = t.unreported == 0  # a hit rate over some requests only would mislead
    mean_load = sum(loads) / len(loads) if loads else None
    return {
        "requests": t.requests,
        "failed": t.failed,
        "first_error": t.first_error,
        "failed_prompt_max": t.failed_prompt_max,
        "longest_error": t.longest_error,
        "prompt_tokens": t.prompt_tokens if known else None,
        "cached_tokens": t.cached_tokens if known else None,
        "hit_pct": 100 * t.cached_tokens / t.prompt_tokens if t.prompt_tokens and known else None,
        "ttft_p50_ms": ms(t.ttft_s, 50),
        "ttft_p95_ms": ms(t.ttft_s, 95),
        "ttft_p99_ms": ms(t.ttft_s, 99),
        "queue_p50_ms": ms(t.queue_s, 50),
        "queue_p95_ms": ms(t.queue_s, 95),
        "prefill_busy_pct": busy_pct(t, uncached, capacity_tps, span),
        "load_max": max(loads) if loads else None,
        "load_mean": mean_load,
        "load_max_over_mean": max(loads) / mean_load if loads and mean_load else None,
        "in_flight_max": t.in_flight_max,
        "same_replica_pct": 100 * t.same_replica / t.followed if t.followed else None,
        "cost_list_usd": t.prompt_tokens * price.input / 1e6 if known else None,
        "cost_cached_usd": (uncached * price.input + t.cached_tokens * price.cached) / 1e6 if known else None,
        "send_lag_p99_ms": ms(t.send_lag_s, 99) if t.send_lag_s is not None else None,
        "span_s": span,
        "wall_s": wall_s,
        "x_real_time": span / wall_s if wall_s > 0 else None,
    }
