"""The practice server's timing model: how long a real server would take.

    time to first token = overhead + wait for the prefill lane + uncached tokens / prefill rate
    each further token  = 1 / decode rate after the one before

Defaults (the lesson's): 15 ms overhead, prefill at 2,500 tokens/s, decode at
400 tokens/s. A cold 3,045-token prompt: 15 + 3045/2500·1000 ≈ 1,233 ms. The
same prompt with all but its last ~50 tokens cached: 15 + 50/2.5 ≈ 35 ms.

How concurrent requests share the server. Like one GPU, the server has one
prefill lane: prompts are prefilled one after another, in arrival order, each
at the full rate (a FIFO queue). Decoding is batched, as in vLLM or llama.cpp
with several slots: every stream decodes at the full rate at once, so the
queue for prefill is what makes a busy server's TTFT grow.

The lane is kept as a number (the time it next falls free), not as a lock:
each request's finish time is known when it arrives, so the server sleeps
until exact deadlines and the model's prediction is what the client sees.
With `--replicas N` each replica has a lane of its own (felab/fleet.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimingModel:
    """The rates of the modelled server; all appear as flags of the practice server."""

    overhead_ms: float = 15.0
    prefill_tokens_per_s: float = 2500.0
    decode_tokens_per_s: float = 400.0

    def prefill_s(self, uncached_tokens: int) -> float:
        """Seconds to prefill the tokens the cache did not have."""
        return uncached_tokens / self.prefill_tokens_per_s

    def token_interval_s(self) -> float:
        """Seconds between two generated tokens of one stream."""
        return 1.0 / self.decode_tokens_per_s


class PrefillLane:
    """One prefill at a time, first come first served, tracked as 'free again at' time."""

    def __init__(self) -> None:
        self.free_at = 0.0

    def quote(self, arrival: float, model: TimingModel, uncached_tokens: int) -> tuple[float, float]:
        """(start of its prefill, time of its first token) if this prompt were booked now; books nothing."""
        start = max(arrival + model.overhead_ms / 1000, self.free_at)
        return start, start + model.prefill_s(uncached_tokens)

    def schedule(self, arrival: float, model: TimingModel, uncached_tokens: int) -> tuple[float, float]:
        """Book the lane for one prompt; return (start of its prefill, time of its first token)."""
        start, self.free_at = self.quote(arrival, model, uncached_tokens)
        return start, self.free_at
