"""A replica's seats: how many requests it runs at once (`--seats`), and who waits for one.

llama.cpp's `-np N` (its "slots") and vLLM's `--max-num-seqs` bound the requests a server
runs at once. A running request holds its seat from admission until its reply ends (or its
client hangs up); past the bound, requests wait for a seat, first come first served, and
that wait is part of their time to first token (it shows as `vllm:num_requests_waiting`).

    admission = max(ready, the earliest a seat is free, the previous request's admission)

With seats, llama.cpp splits its context evenly: each seat holds `context_tokens // seats`
tokens (app.py refuses a longer prompt with llama.cpp's own 400 body).

With `--cache-mode seat-prefix` (llama.cpp's cache) each seat also keeps the prompt it last
read, and a request reuses the longest common prefix with its seat's prompt; it takes the
free seat whose prompt shares the most with it (llama.cpp's slot similarity), else the one
free longest. Prefixes are compared in whole blocks of `--block-tokens` tokens (the keys of
cache.py), so a reuse is rounded down to a block: set a smaller block for a finer match.

Like the prefill lane, seats read no clock: the caller says what time it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(eq=False)
class Seat:
    """One seat: when it is free again, and (seat-prefix) the block keys of its last prompt."""

    free_at: float = 0.0
    keys: Sequence[int] = ()
    holder: object = None
    """The request admitted to it last (the booking core's Booking)."""


def common_blocks(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading block keys two prompts share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class Seats:
    """The seats of one replica, and the admission of the request admitted last (FIFO)."""

    count: int
    by_prefix: bool = False
    """Choose among free seats by the prefix their last prompt shares (seat-prefix mode)."""
    seats: list[Seat] = field(default_factory=list)
    last_admission: float = 0.0

    def __post_init__(self) -> None:
        self.seats = self.seats or [Seat() for _ in range(self.count)]

    def admit(self, ready: float, keys: Sequence[int]) -> tuple[Seat, float, int]:
        """The seat this request gets, when, and how many leading blocks it reuses there (0
        unless seat-prefix). Marks nothing: `hold` does, once the reply's end is known."""
        at = max(ready, min(s.free_at for s in self.seats), self.last_admission)
        free = [s for s in self.seats if s.free_at <= at]
        if not self.by_prefix:
            return min(free, key=lambda s: s.free_at), at, 0
        shared = [common_blocks(keys, s.keys) for s in free]
        best = max(range(len(free)), key=lambda i: (shared[i], -free[i].free_at))
        return free[best], at, shared[best]

    def hold(
        self, seat: Seat, admission: float, until: float, keys: Sequence[int], holder: object = None
    ) -> None:
        """A request admitted at `admission` holds `seat` until `until` (its reply's end)."""
        seat.free_at, self.last_admission, seat.holder = until, admission, holder
        if self.by_prefix:
            seat.keys = keys
