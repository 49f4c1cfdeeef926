"""How long the practice server takes, and in what order it does its work.

    time to first token = overhead + wait (for a seat, then the prefill lane) + prefill
    prefill             = the prompt's steps, each priced by the cost terms
    each further token  = one decode step, priced by the same terms

What a step costs is not written here: each cost term is one small file in
felab/mock_server/terms/, and a step's time is the sum of coefficient × basis over them
(the formula, and how to add a term: terms/__init__.py). `TimingModel` holds the settings
the terms read and asks the registry: `prefill_s` is `terms.prompt_seconds`,
`token_interval_s` a decode step's `terms.step_seconds` (with the pricer made once: `price`).

Defaults (the lesson's, in config.py): 15 ms overhead, prefill at 2,500 tokens/s, decode at
400 tokens/s, every other term 0, no seat limit. A cold 3,045-token prompt:
15 + 3045/2500·1000 ≈ 1,233 ms. The same prompt with all but its last ~50 tokens cached:
15 + 50/2.5 ≈ 35 ms. `streams` is the number of requests decoding on the replica when a
request's first token comes (itself included), fixed when it is booked.

How concurrent requests share the server. Each replica runs an engine loop (`Loop`,
loop.py): steps formed from its requests, each priced by the terms. With the lesson's
defaults a step is one whole prompt, so, like one GPU, a replica has one prefill lane:
prompts are prefilled one after another, in arrival order, each at the full rate. Decoding is
batched, as in vLLM or llama.cpp with several slots: every stream decodes at once, beside the
steps, so the queue for prefill, and for a seat where seats are limited (seats.py), is what
makes a busy server's TTFT grow. With `--batch-tokens B` (llama.cpp's -b) the steps are
llama-server's: pieces of up to B prompt tokens, and decode tokens sharing them.

The lane is a plan of steps with known times, not a lock: a request's first-token time is
known when it arrives, so the server sleeps until exact deadlines and the prediction is what
the client sees. When a client hangs up, the lesson's step under way stops where it is, its
time not used is given back, and the prompts queued behind it move up (`Loop.shorten`, then
`Loop.reflow`), as a real engine aborts the request. Only the part of its work that prompts
booked after it count on is kept (they found its blocks in the cache: see
`PracticeModel.cancel` in booking.py). How many tokens a prefill cut short computed is the
registry's time turned back into tokens, the same way for every term
(`TimingModel.computed_tokens`). Nothing here reads a clock: every method is told the time, so
the same code runs live (the event loop's clock) and in a replay (a virtual clock).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from felab.mock_server import terms
from felab.mock_server.step import Piece, Step
from felab.mock_server.terms import untiled


@dataclass(frozen=True)
class TimingModel:
    """The settings the cost terms read (their defaults live in config.py; what each term means:
    felab/mock_server/terms/), and the times of one prompt and one reply token by them."""

    overhead_ms: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    attention_ns: float = 0.0
    masked_attention_ns: float = 0.0
    decode_slowdown: float = 0.0
    cached_token_us: float = 0.0
    decode_context_ns: float = 0.0
    ubatch_tokens: int | None = None
    tile_tokens: int = 0
    untiled_ns: float = 0.0
    batch_slowdown: float = 0.0

    def prefill_s(self, uncached_tokens: int, context_before: int = 0) -> float:
        """Seconds to prefill the tokens the cache did not have, after the `context_before` it had:
        a prompt alone on an idle engine, the sum of its terms (`terms.prompt_seconds`)."""
        return terms.prompt_price(self.price, uncached_tokens, context_before)

    def alone_ms(self, uncached_tokens: int, context_before: int = 0) -> float:
        """The TTFT of one prompt alone on an idle server, ms: the overhead, then its prefill."""
        return self.overhead_ms + 1000 * self.prefill_s(uncached_tokens, context_before)

    def token_interval_s(self, streams: int = 1, context: int = 0) -> float:
        """Seconds between two reply tokens of one stream: a decode step of `streams` streams, each
        with `context` tokens of context (booking.py passes the reply's mean: step.reply_context;
        both fixed when a request is booked: an approximation, as the number of streams changes)."""
        return self.price(Step(decodes=(context,) * max(streams, 1)))

    @cached_property
    def price(self) -> Callable[[Step], float]:
        """What a step costs under these settings (`terms.pricer`, made once: a replay asks it
        twice a request)."""
        return terms.pricer(self)

    @cached_property
    def tiled(self) -> TimingModel:
        """The same model with no piece short of a tile: how the first tokens of a longer prompt
        are read (only a prompt's last piece can have few rows: terms/untiled.py)."""
        return dataclasses.replace(self, tile_tokens=0)

    def read_s(self, tokens: int, context_before: int = 0) -> float:
        """Seconds until the first `tokens` of a longer prompt are read, after `context_before`:
        what a prompt that short costs, read in whole tiles."""
        return self.tiled.prefill_s(tokens, context_before)

    def untiled_rows(self, uncached_tokens: int) -> int:
        """The rows of the prompt's last piece if it is read one at a time, else 0 (terms/untiled.py)."""
        return untiled.rows(Piece(uncached_tokens), self)

    def untiled_s(self, uncached_tokens: int, context_before: int = 0) -> float:
        """What that last piece adds to the prompt's prefill (0 when it has none)."""
        return self.prefill_s(uncached_tokens, context_before) - self.read_s(uncached_tokens, context_before)

    def prefilled_tokens(self, seconds: float, context_before: int = 0, most: int | None = None) -> int:
        """How many tokens `seconds` of prefill read after `context_before` (at most `most`):
        `read_s` turned back into tokens by bisection. One routine for every term: each adds time
        with each token, so `read_s` only grows, and at least by 1 / prefill rate a token. (A
        nanosecond's slack: a time summed another way, start + seconds - start, may lose a bit.)"""
        top = int((seconds + 1e-9) * self.prefill_tokens_per_s) + 1 if most is None else most
        fits = bisect.bisect_right(
            range(top + 1), seconds + 1e-9, key=lambda n: self.read_s(n, context_before)
        )
        return max(fits - 1, 0)

    def computed_tokens(self, seconds: float, uncached_tokens: int, context_before: int = 0) -> int:
        """How many of a prompt's `uncached_tokens` `seconds` of its prefill computed (a hang-up
        keeps their blocks): all once its `prefill_s` is over; before that, what `read_s` gives in
        that time, but never its last piece of few rows, which ends its prefill."""
        if seconds >= self.prefill_s(uncached_tokens, context_before):
            return uncached_tokens
        most = uncached_tokens - self.untiled_rows(uncached_tokens)
        return self.prefilled_tokens(seconds, context_before, most)


@dataclass(eq=False, slots=True)  # each prefill is itself: the lane finds and removes it by identity
class Prefill:
    """One prompt's turn in a lane: it may start at `ready_at` and takes `seconds` once started."""

    ready_at: float
    seconds: float
    start: float
    dropped: bool = False
    """Hung up before it started, with nothing kept: it leaves the lane at the next reflow."""

    @property
    def end(self) -> float:
        """When its prefill is done: the time of its first token."""
        return self.start + self.seconds
