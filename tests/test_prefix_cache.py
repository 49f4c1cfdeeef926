"""The block-hash prefix cache: what it reuses, what it cannot, and what it evicts."""

from __future__ import annotations

from felab.prefix_cache import BLOCK_TOKENS, PrefixCache, block_keys, tokenize

OPENING = "".join(f"rule {i}: be kind. " for i in range(700))  # ~12,000 characters


def test_tokenize_is_four_character_pieces() -> None:
    assert tokenize("abcdefghij") == ["abcd", "efgh", "ij"]
    assert len(tokenize("x" * 12_112)) == 3028


def test_only_full_blocks_get_keys() -> None:
    assert block_keys(["t"] * (BLOCK_TOKENS - 1)) == []
    assert len(block_keys(["t"] * (3 * BLOCK_TOKENS + 5))) == 3


def test_a_cold_prompt_is_all_uncached() -> None:
    cache = PrefixCache()
    tokens = tokenize(OPENING)
    assert cache.uncached_tokens(tokens) == len(tokens)


def test_a_shared_3000_token_prefix_caches_every_full_block() -> None:
    cache = PrefixCache()
    opening = tokenize(OPENING[: 3000 * 4])
    cache.insert(opening + tokenize("first question?"))
    second = opening + tokenize("a different, longer second question?")
    full_blocks = 3000 // BLOCK_TOKENS  # 46 blocks = 2,944 tokens
    assert cache.uncached_tokens(second) == len(second) - full_blocks * BLOCK_TOKENS


def test_a_changed_first_token_caches_nothing() -> None:
    cache = PrefixCache()
    tokens = tokenize(OPENING)
    cache.insert(tokens)
    changed = ["X!!!"] + tokens[1:]
    assert cache.uncached_tokens(changed) == len(changed)


def test_a_change_in_the_middle_keeps_only_the_blocks_before_it() -> None:
    cache = PrefixCache()
    tokens = tokenize(OPENING)
    cache.insert(tokens)
    changed = list(tokens)
    changed[10 * BLOCK_TOKENS + 3] = "????"
    assert cache.uncached_tokens(changed) == len(changed) - 10 * BLOCK_TOKENS


def test_least_recently_used_blocks_are_evicted_first() -> None:
    cache = PrefixCache(capacity_blocks=2)
    a, b, c = (tokenize(ch * BLOCK_TOKENS * 4) for ch in "abc")  # one block each
    cache.insert(a)
    cache.insert(b)
    assert cache.uncached_tokens(a) == 0  # touching a makes b the oldest
    cache.insert(c)  # over capacity: b goes
    assert len(cache) == 2
    assert cache.uncached_tokens(b) == BLOCK_TOKENS
    assert cache.uncached_tokens(a) == 0
    assert cache.uncached_tokens(c) == 0


def test_clear_forgets_everything() -> None:
    cache = PrefixCache()
    tokens = tokenize(OPENING)
    cache.insert(tokens)
    cache.clear()
    assert len(cache) == 0
    assert cache.uncached_tokens(tokens) == len(tokens)


def test_keys_hashed_once_give_the_same_answer() -> None:
    # The server hashes a prompt once, on arrival, and passes the keys in.
    cache, other = PrefixCache(), PrefixCache()
    tokens = tokenize(OPENING)
    keys = block_keys(tokens)
    cache.insert(tokens[: 20 * BLOCK_TOKENS])
    other.insert(tokens[: 20 * BLOCK_TOKENS], keys=block_keys(tokens[: 20 * BLOCK_TOKENS]))
    expected = len(tokens) - 20 * BLOCK_TOKENS
    assert cache.uncached_tokens(tokens, keys) == other.uncached_tokens(tokens) == expected
