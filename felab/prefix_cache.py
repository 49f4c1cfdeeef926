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
"""

from __future__ import annotations

from collections import OrderedDict

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
    """Full blocks of earlier prompts, least recently used first."""

    def __init__(self, capacity_blocks: int = 4096) -> None:
        self.capacity = capacity_blocks
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def uncached_tokens(self, tokens: list[str]) -> int:
        """How many tokens of this prompt must be prefilled: all after the longest cached prefix."""
        hit = 0
        for key in block_keys(tokens):
            if key not in self.blocks:
                break
            self.blocks.move_to_end(key)  # a hit makes the block recently used
            hit += BLOCK_TOKENS
        return len(tokens) - hit

    def insert(self, tokens: list[str]) -> None:
        """After prefill: keep this prompt's full blocks, evicting the least recently used."""
        for key in block_keys(tokens):
            self.blocks[key] = None
            self.blocks.move_to_end(key)
        while len(self.blocks) > self.capacity:
            self.blocks.popitem(last=False)

    def clear(self) -> None:
        self.blocks.clear()

    def __len__(self) -> int:
        return len(self.blocks)
