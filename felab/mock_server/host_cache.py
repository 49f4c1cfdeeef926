"""A second cache tier behind the seats: llama-server's host-memory prompt cache (`--cache-ram`).

With `--cache-mode seat-prefix` a seat keeps only the prompt it last read (seats.py). A real
llama-server keeps more: when a seat's prompt is about to be replaced, its KV state is copied
to host memory, and a later prompt that shares a prefix with a saved one has that state copied
back into its seat instead of being read again. An opening pushed out of its seat by other
work comes back from RAM, not from scratch. (llama.cpp's tools/server, the version the kit builds:
`server_prompt_cache` in server-task.cpp, used by `get_available_slot` in server-context.cpp.)

What the server does, and what this model keeps of it:

    save     when a seat is chosen for a new prompt (and, with --cache-idle-slots, on by default,
             every idle seat at each new request), its prompt is saved, unless a saved prompt
             already holds it whole; saved prompts it holds whole are dropped (`alloc`)
    load     the saved prompt sharing the longest prefix with the new one is copied into the seat
             if it keeps at least a quarter of itself (f_keep >= 0.25) and beats what the seat
             holds; it leaves the cache (it is in the seat now) (`load`)
    evict    oldest saved first, past the size limit (`update`)

The server's limit is in MiB (`--cache-ram`, 8192 by default; 0: off) and, beside it, in tokens:
its whole context (`-c`), raised while the MiB allow. The twin has no bytes, so its limit is in
tokens (`--host-cache-tokens`): the server's `-c` is its floor; a larger model's KV fills the
MiB sooner (MiB x 2^20 / the KV bytes of a token). Prompts are compared in whole blocks, as in
the seats, and a restored prompt's tokens count as cached: they cost the cached floor, plus
`--host-restore-us` each for the copy (on the kit's tiny model, 1 KiB of KV a token, it is too
small to measure: see docs/practice-server.md).

Like the seats, this reads no clock: the booking core calls it as it books a request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

KEEP_AT_LEAST = 0.25
"""A saved prompt is restored only if the new one keeps at least this share of it (llama.cpp's
"don't trash large prompts")."""


def shared_blocks(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading block keys two prompts share. Keys are chained (a key stands for its
    block and every block before it: cache.py), so they agree exactly up to the last key they
    share: a bisection."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[mid - 1] == b[mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass
class HostCache:
    """One replica's saved prompts (their block keys), oldest first, within `limit_blocks`."""

    limit_blocks: int
    saved: deque[Sequence[int]] = field(default_factory=deque)
    held_blocks: int = 0
    """Blocks of all saved prompts together."""

    def save(self, keys: Sequence[int]) -> bool:
        """Save a seat's prompt (llama.cpp's `alloc`): not if a saved one holds it whole, nor if it
        alone is over the limit; saved ones it holds whole go; the oldest go until it fits.
        True if it was saved."""
        n = len(keys)
        if n == 0 or n > self.limit_blocks:
            return False
        if any(len(old) >= n and old[n - 1] == keys[n - 1] for old in self.saved):
            return False  # already held whole
        self._drop_held_by(keys)
        while self.saved and self.held_blocks + n > self.limit_blocks:
            self.held_blocks -= len(self.saved.popleft())
        self.saved.append(keys)
        self.held_blocks += n
        return True

    def _drop_held_by(self, keys: Sequence[int]) -> None:
        """Drop the saved prompts `keys` holds whole (keys are chained: a saved prompt is a prefix
        of `keys` when its last key is `keys`' key at that length)."""
        n = len(keys)
        kept = deque(old for old in self.saved if not (len(old) <= n and keys[len(old) - 1] == old[-1]))
        self.saved, self.held_blocks = kept, sum(len(old) for old in kept)

    def load(self, keys: Sequence[int], seat_keys: Sequence[int], seat_shared: int) -> int:
        """How many leading blocks of `keys` the seat holds once the best saved prompt is copied
        into it (llama.cpp's `load`): `seat_shared` (what its own prompt shares) if none beats it.
        A saved prompt beats the best so far if the new prompt keeps a larger share of it (f_keep)
        and it covers a larger share of the new prompt (f_sim); one kept under a quarter is
        never taken. The one taken leaves the cache."""
        if not keys:
            return seat_shared
        best_keep = seat_shared / len(seat_keys) if seat_keys else -1.0  # an empty seat: any wins
        best_shared, best_at = seat_shared, -1
        for i, old in enumerate(self.saved):
            shared = shared_blocks(old, keys)
            keep = shared / len(old)
            if keep >= KEEP_AT_LEAST and keep > best_keep and shared > best_shared:
                best_keep, best_shared, best_at = keep, shared, i
        if best_at >= 0:
            taken = self.saved[best_at]
            del self.saved[best_at]
            self.held_blocks -= len(taken)
        return best_shared

    def clear(self) -> int:
        """Drop every saved prompt (`/admin/reset`); how many blocks they held."""
        dropped, self.held_blocks = self.held_blocks, 0
        self.saved.clear()
        return dropped

    def forget(self, keys: Sequence[int], kept: int) -> None:
        """A prompt saved while its request ran was hung up on: keep only its first `kept` blocks
        (those computed), as the seat it left does."""
        for i, old in enumerate(self.saved):
            if old is keys:
                self.held_blocks -= len(keys) - kept
                if kept:
                    self.saved[i] = keys[:kept]
                else:
                    del self.saved[i]
                return
