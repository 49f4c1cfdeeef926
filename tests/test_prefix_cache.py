"""The block-hash prefix cache: what it reuses, what it cannot, and what it evicts."""

from __future__ import annotations

import pytest

from felab.mock_server.cache import BLOCK_TOKENS, PrefixCache, block_keys, prompt_keys, tokenize

OPENING = "".join(f"rule {i}: be kind. " for i in range(700))  # ~12,000 characters


class Cache(PrefixCache):
    """The cache as the server uses it, told the time; prompts given as tokens (hashed here)."""

    def __init__(self, capacity_blocks: int = 4096) -> None:
        super().__init__(capacity_blocks)

    def uncached(self, tokens: list[str], now: float = 0.0) -> int:
        return self.uncached_tokens(len(tokens), block_keys(tokens), now)

    def add(self, tokens: list[str], at: float = 0.0) -> None:
        self.insert(block_keys(tokens), used_at=at)


def test_tokenize_is_four_character_pieces() -> None:
    assert tokenize("abcdefghij") == ["abcd", "efgh", "ij"]
    assert len(tokenize("x" * 12_112)) == 3028


@pytest.mark.parametrize("chars_per_token", [4.0, 3.6, 3.9, 2.5, 1.0, 7.3])
@pytest.mark.parametrize("block", [1, 16, 64])
def test_prompt_keys_from_the_text_are_the_tokens_keys(chars_per_token: float, block: int) -> None:
    text = "".join(f"w{i} é. " for i in range(400))
    for n in [*range(0, 300), 1_000, 2_047, 2_048, len(text)]:
        tokens = tokenize(text[:n], chars_per_token)
        assert prompt_keys(text[:n], chars_per_token, block) == (len(tokens), block_keys(tokens, block))


def test_only_full_blocks_get_keys() -> None:
    assert block_keys(["t"] * (BLOCK_TOKENS - 1)) == []
    assert len(block_keys(["t"] * (3 * BLOCK_TOKENS + 5))) == 3


def test_a_cold_prompt_is_all_uncached() -> None:
    cache = Cache()
    tokens = tokenize(OPENING)
    assert cache.uncached(tokens) == len(tokens)


def test_a_shared_3000_token_prefix_caches_every_full_block() -> None:
    cache = Cache()
    opening = tokenize(OPENING[: 3000 * 4])
    cache.add(opening + tokenize("first question?"))
    second = opening + tokenize("a different, longer second question?")
    full_blocks = 3000 // BLOCK_TOKENS  # 46 blocks = 2,944 tokens
    assert cache.uncached(second) == len(second) - full_blocks * BLOCK_TOKENS


def test_a_changed_first_token_caches_nothing() -> None:
    cache = Cache()
    tokens = tokenize(OPENING)
    cache.add(tokens)
    changed = ["X!!!"] + tokens[1:]
    assert cache.uncached(changed) == len(changed)


def test_a_change_in_the_middle_keeps_only_the_blocks_before_it() -> None:
    cache = Cache()
    tokens = tokenize(OPENING)
    cache.add(tokens)
    changed = list(tokens)
    changed[10 * BLOCK_TOKENS + 3] = "????"
    assert cache.uncached(changed) == len(changed) - 10 * BLOCK_TOKENS


def test_least_recently_used_blocks_are_evicted_first() -> None:
    cache = Cache(capacity_blocks=2)
    a, b, c = (tokenize(ch * BLOCK_TOKENS * 4) for ch in "abc")  # one block each
    cache.add(a)
    cache.add(b)
    assert cache.uncached(a) == 0  # touching a makes b the oldest
    cache.add(c)  # over capacity: b goes
    assert len(cache) == 2
    assert cache.uncached(b) == BLOCK_TOKENS
    assert cache.uncached(a) == 0
    assert cache.uncached(c) == 0


def test_clear_forgets_everything() -> None:
    cache = Cache()
    tokens = tokenize(OPENING)
    cache.add(tokens)
    cache.clear()
    assert len(cache) == 0
    assert cache.uncached(tokens) == len(tokens)
