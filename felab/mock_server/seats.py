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
free longest (also when the most it shares is no more than a tenth of it, a chat template's
few tokens: llama.cpp's --slot-prompt-similarity). Of seats alike, llama.cpp takes the lowest
of the most similar and the highest of those free longest (a fresh server's first request goes
to its last seat), and so does the twin: seat numbers decide which prompt goes first in a step
and which share a ubatch (terms/untiled.py). Prefixes are compared in whole blocks of
`--block-tokens` tokens (the keys of cache.py), so a reuse is rounded down to a block: set a
smaller block for a finer match.
With `--host-cache-tokens`, prompts that leave their seats are saved in a second tier behind
them, llama-server's host-memory cache (`--cache-ram`), and may come back into another seat
(`restore`; host_cache.py).

Like the prefill lane, seats read no clock: the caller says what time it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from felab.mock_server.host_cache import HostCache

SIMILAR = 0.1
"""llama.cpp's --slot-prompt-similarity: a seat whose prompt covers more than this share of the
new one is chosen for it (else the one free longest)."""
KEEP_IN_SEAT = 0.5
"""A seat so chosen that keeps at least this share of its prompt is used as it is, with no look
in the host cache (llama.cpp looks only when a seat would lose most of what it holds)."""


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
    host: HostCache | None = None
    """The host-memory tier behind the seats (seat-prefix mode with --host-cache-tokens)."""

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
        best = max(range(len(free)), key=lambda i: shared[i])  # (of equals, the lowest seat)
        if shared[best] <= SIMILAR * len(keys):  # (none, or a chat template's few tokens)
            best = max(range(len(free)), key=lambda i: (-free[i].free_at, i))  # not similar: free longest
        return free[best], at, shared[best]  # (of equals, the highest seat: llama.cpp's `<=`)

    def hold(
        self, seat: Seat, admission: float, until: float, keys: Sequence[int], holder: object = None
    ) -> None:
        """A request admitted at `admission` holds `seat` until `until` (its reply's end)."""
        seat.free_at, self.last_admission, seat.holder = until, admission, holder
        if self.by_prefix:
            seat.keys = keys

    def clear(self) -> int:
        """Forget every seat's last prompt and the host tier's saved ones (`/admin/reset`: a cold
        start without a restart); the blocks dropped. Requests running keep their seats."""
        dropped = sum(len(s.keys) for s in self.seats)
        for s in self.seats:
            s.keys = ()
        return dropped + (self.host.clear() if self.host is not None else 0)

    def restore(self, seat: Seat, at: float, keys: Sequence[int], shared: int) -> int:
        """With a host cache: the leading blocks of `keys` the seat holds once its prompt is saved
        and the best saved prompt copied in (`shared`, what its own prompt shares, if none is
        better or the seat keeps most of its prompt); then every other seat free at `at` is saved
        too (llama.cpp's --cache-idle-slots, on by default). Called once, as a request is booked."""
        if self.host is None:
            return shared
        similar = shared > SIMILAR * len(keys) and shared >= KEEP_IN_SEAT * len(seat.keys)
        if not similar:  # chosen as the free seat with most in common, or the one free longest
            self.host.save(seat.keys)
            shared = self.host.load(keys, seat.keys, shared)
        for other in self.seats:
            if other is not seat and other.free_at <= at:
                self.host.save(other.keys)
        return shared
