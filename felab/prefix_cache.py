"""A block-hash prefix cache: the idea behind vLLM's automatic prefix caching, in a few lines.

1. Tokenize: the practice server's "tokens" are 4-character pieces of the
   prompt (real tokenizers average about 4 characters a token in English).
2. Cut the tokens into blocks of BLOCK_TOKENS (64). Only full blocks are cached.
3. Give each block a key that hashes its parent's key and its own tokens. A
   block's key therefore stands for *everything before it too*: change one
   token and that block's key and every later key change.
4. Walk the blocks from the start; stop at the first key not in the cache.
   What was found is reused; the rest must be prefilled.

The cache holds at most `capacity` blocks and evicts the least recently used.
With a time to live (`ttl_s`, the server's `--cache-ttl`), blocks unused for
that long expire, as caches on real servers do when a session goes idle.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable

CHARS_PER_TOKEN = 4
BLOCK_TOKENS = 64


def tokenize(text: str) -> list[str]:
    """Deterministic toy tokenizer: 4-character pieces."""
    return [text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]


def block_keys(tokens: list[str]) -> list[int]:
    """One key per *full* block; each key covers its block and all blocks before it."""
    keys, parent = [], 0
    for start in range(0, len(tokens) - BLOCK_TOKENS + 1, BLOCK_TOKENS):
        parent = hash((parent, "".join(tokens[start : start + BLOCK_TOKENS])))
        keys.append(parent)
    return keys


class PrefixCache:
    """Full blocks of earlier prompts, least recently used first, each with the time it was last used."""

    def __init__(
        self,
        capacity_blocks: int = 4096,
        ttl_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.capacity, self.ttl_s, self.clock = capacity_blocks, ttl_s, clock
        self.blocks: OrderedDict[int, float] = OrderedDict()  # key -> when last used

    def uncached_tokens(self, tokens: list[str], keys: list[int] | None = None) -> int:
        """How many tokens of this prompt must be prefilled: all after the longest cached prefix.

        `keys`: the prompt's block keys, if already computed. The server hashes each prompt
        once, when it arrives (as vLLM does), and looks it up with those keys.
        """
        self.expire()
        found = []
        for key in block_keys(tokens) if keys is None else keys:
            if key not in self.blocks:
                break
            found.append(key)
        self.touch(found)  # a hit makes the blocks recently used
        return len(tokens) - len(found) * BLOCK_TOKENS

    def insert(self, tokens: list[str], used_at: float | None = None, keys: list[int] | None = None) -> None:
        """After prefill: keep this prompt's full blocks, evicting the least recently used.

        `used_at`: when the server is done reading them (the end of this prompt's prefill),
        if later than now. The time to live counts from then. `keys`: as for uncached_tokens().
        """
        self.touch(block_keys(tokens) if keys is None else keys, used_at)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)

    def touch(self, keys: list[int], used_at: float | None = None) -> None:
        """Mark blocks used (default: now), the last block first: a prompt's tail goes before its start."""
        now = self.clock() if used_at is None else used_at
        for key in reversed(keys):
            self.blocks[key] = now
            self.blocks.move_to_end(key)

    def expire(self) -> None:
        """Forget blocks unused for longer than `ttl_s`; the least recently used come first."""
        if self.ttl_s is None:
            return
        oldest_kept = self.clock() - self.ttl_s
        while self.blocks and next(iter(self.blocks.values())) < oldest_kept:
            self.blocks.popitem(last=False)

    def cached_blocks(self, keys: list[int]) -> int:
        """How many leading blocks of `keys` are cached, marking nothing used (for a router's peek)."""
        self.expire()
        return sum(1 for _ in itertools.takewhile(self.blocks.__contains__, keys))

    def clear(self) -> None:
        self.blocks.clear()

    def __len__(self) -> int:
        return len(self.blocks)
