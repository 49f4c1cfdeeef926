"""Replicas, routing and cache expiry: the rules (fleet.py, prefix_cache.py), then the server."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest
from click.testing import CliRunner

from felab.mock_server.cache import BLOCK_TOKENS, PrefixCache, block_keys, tokenize
from felab.mock_server.config import DEFAULTS
from felab.mock_server.fleet import Fleet, Weights, rendezvous
from felab.mock_server.launch import practice_server
from felab.mock_server.serve import main as server_main

MODEL = "felab-practice"
OPENING = tokenize("".join(f"rule {i}: be kind. " for i in range(200)))  # ~850 tokens


def fleet(route: str, n: int = 4, seed: int = 0) -> Fleet:
    return Fleet(n, route, (4096, BLOCK_TOKENS, None), DEFAULTS.timing, seed)


def pick(f: Fleet, tokens: list[str], session: str | None, now: float):
    return f.pick(len(tokens), block_keys(tokens), session, now)


# ── Routing rules ─────────────────────────────────────────────────────────────


def test_rendezvous_is_stable_and_spreads_sessions() -> None:
    assert rendezvous("session-7", 18) == rendezvous("session-7", 18)
    spread = Counter(rendezvous(f"s{i}", 18) for i in range(1800))
    assert len(spread) == 18 and max(spread.values()) < 2 * 1800 / 18


def test_rendezvous_moves_few_sessions_when_a_replica_is_added() -> None:
    moved = sum(rendezvous(f"s{i}", 18) != rendezvous(f"s{i}", 19) for i in range(1900))
    assert moved < 1900 * 2 / 19  # about 1/19 move; a modulo hash would move about 18/19


def test_round_robin_takes_each_replica_in_turn() -> None:
    f = fleet("round-robin")
    assert [pick(f, OPENING, None, 0.0).index for _ in range(6)] == [0, 1, 2, 3, 0, 1]


def test_affinity_pins_a_session_and_falls_back_to_seeded_random() -> None:
    f = fleet("affinity", n=8)
    assert len({pick(f, OPENING, "alice", 0.0).index for _ in range(20)}) == 1
    no_session = [pick(f, OPENING, None, 0.0).index for _ in range(40)]
    assert len(set(no_session)) > 3
    again = fleet("affinity", n=8)
    assert [pick(again, OPENING, None, 0.0).index for _ in range(40)] == no_session  # same seed, same draws


def test_prefix_route_follows_the_cache_unless_that_replica_is_far_busier() -> None:
    f = fleet("prefix")
    f.replicas[2].cache.insert(block_keys(OPENING), used_at=0.0)
    assert pick(f, OPENING + tokenize("question"), None, 0.0).index == 2
    f.replicas[2].lane.free_at = 100.0  # replica 2 is busy for 100 s: cold elsewhere is sooner
    assert pick(f, OPENING, None, 0.0).index != 2


def test_prefix_cost_is_dynamos_prefill_blocks_plus_the_blocks_being_served() -> None:
    # OPENING is 923 tokens: 14 full blocks of 64 (896 tokens) cached on replica 1, which also
    # serves requests of 1,000 tokens in all; replica 3 is idle and holds nothing.
    f = fleet("prefix")
    f.replicas[1].cache.insert(block_keys(OPENING), used_at=0.0)
    for r in (0, 2):
        f.replicas[r].active_tokens = 10_000  # far busier than either
    prompt = OPENING + tokenize("question " * 10)  # 923 + 23 = 946 tokens
    f.replicas[1].active_tokens = 1_000
    # replica 1: (946 - 896 + 1,000) / 64 = 16.4 blocks; replica 3: 946 / 64 = 14.8: the idle one wins
    assert f.costs([f.replicas[1]], [946 - 896], 0.015)[0] == pytest.approx((946 - 896 + 1000) / 64)
    assert pick(f, prompt, None, 0.0).index == 3
    f.replicas[1].active_tokens = 700  # (50 + 700) / 64 = 11.7 < 14.8: the cache is worth the load
    assert pick(f, prompt, None, 0.0).index == 1


def test_prefix_route_draws_ties_with_the_seed_instead_of_taking_replica_0() -> None:
    cold = [tokenize(f"prompt {i} nobody has seen " * 20) for i in range(400)]
    f = fleet("prefix", n=8)
    picked = [pick(f, tokens, None, 0.0).index for tokens in cold]  # each cached where it went
    spread = Counter(picked)
    assert len(spread) == 8 and max(spread.values()) < 2 * 400 / 8  # spread, not piled on 0
    again = fleet("prefix", n=8)
    assert [pick(again, tokens, None, 0.0).index for tokens in cold] == picked  # same seed, same draws
    other = fleet("prefix", n=8, seed=1)
    assert [pick(other, tokens, None, 0.0).index for tokens in cold] != picked


def test_a_temperature_samples_the_replicas_by_cost_with_the_seed() -> None:
    # Dynamo's softmax over costs normalised by the highest: replica 0 serves 4,000 tokens, the
    # others nothing. Costs in blocks: 70.3 and 7.8 (a 500-token prompt); normalised 1 and 0.11.
    # At temperature 0.5 each idle replica weighs e^(0.89/0.5) = 5.9 times replica 0.
    def draws(seed: int) -> list[int]:
        f = Fleet(4, "prefix", (4096, BLOCK_TOKENS, None), DEFAULTS.timing, seed, Weights(temperature=0.5))
        f.replicas[0].active_tokens = 4000
        return [pick(f, tokenize("x" * 2000), None, 0.0).index for _ in range(600)]

    got = Counter(draws(0))
    assert 600 / (1 + 3 * 5.9) * 0.5 < got[0] < 600 / (1 + 3 * 5.9) * 1.6  # about 32 of 600
    assert all(got[i] > 120 for i in (1, 2, 3)) and draws(0) == draws(0) != draws(1)


def test_a_cold_prompt_goes_to_the_replica_caching_least() -> None:
    # Below the cache threshold (0.3 of the prompt) a match does not count: SGLang's smallest tree.
    f = fleet("prefix")
    prompt = OPENING + tokenize("a long new question " * 200)  # 896 of 1,923 tokens cached: 0.47
    f.replicas[0].cache.insert(block_keys(OPENING), used_at=0.0)
    assert pick(f, prompt, None, 0.0).index == 0
    longer = OPENING + tokenize("a much longer new question " * 400)  # 896 of 3,623: 0.25, cold
    for r in (1, 2):
        f.replicas[r].cache.insert(block_keys(tokenize(f"other {r} " * 100)), used_at=0.0)
    assert pick(f, longer, None, 0.0).index == 3  # the only replica holding nothing


def test_a_single_replica_ignores_the_route() -> None:
    assert {pick(fleet(route, n=1), OPENING, "x", 0.0).index for route in ("random", "prefix")} == {0}


# ── Cache expiry and eviction order ──────────────────────────────────────────


def test_blocks_unused_for_the_ttl_expire_and_use_renews_them() -> None:
    cache, keys = PrefixCache(4096, ttl_s=10), block_keys(OPENING)
    cache.insert(keys, used_at=0.0)
    assert cache.uncached_tokens(len(OPENING), keys, now=8) < BLOCK_TOKENS  # a hit at t=8 renews every block
    assert cache.uncached_tokens(len(OPENING), keys, now=17) < BLOCK_TOKENS
    assert cache.uncached_tokens(len(OPENING), keys, now=27.5) == len(OPENING)  # idle for 10.5 s
    assert len(cache) == 0


def test_without_a_ttl_nothing_expires() -> None:
    cache, keys = PrefixCache(4096), block_keys(OPENING)
    cache.insert(keys, used_at=0.0)
    assert cache.uncached_tokens(len(OPENING), keys, now=1e9) < BLOCK_TOKENS


def test_under_pressure_a_prompts_tail_is_evicted_before_its_start() -> None:
    blocks = len(OPENING) // BLOCK_TOKENS
    cache = PrefixCache(capacity_blocks=blocks)
    cache.insert(block_keys(OPENING), used_at=0.0)
    cache.insert(block_keys(tokenize("z" * BLOCK_TOKENS * 4)), used_at=0.0)  # one block more than fits
    assert (
        cache.uncached_tokens(len(OPENING), block_keys(OPENING), 0.0)
        == len(OPENING) - (blocks - 1) * BLOCK_TOKENS
    )


# ── The server ───────────────────────────────────────────────────────────────


def chat(url: str, text: str, **extra) -> httpx.Response:
    headers = extra.pop("headers", {})
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 2, **extra}
    r = httpx.post(f"{url}/chat/completions", json=body, headers=headers, timeout=30)
    r.raise_for_status()
    return r


def test_each_reply_names_its_replica_and_a_session_keeps_its_cache() -> None:
    text = "an agent's long opening. " * 120
    with practice_server("--replicas", "4", "--route", "affinity", "--prefill-tps", "50000") as url:
        first = chat(url, text, user="alice")
        second = chat(url, text + " and more", user="alice")
        by_header = chat(url, text + " and more", headers={"x-session-affinity": "alice"})
        assert first.headers["x-felab-replica"] == second.headers["x-felab-replica"]
        assert by_header.headers["x-felab-replica"] == first.headers["x-felab-replica"]
        assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 600
        replicas = {chat(url, f"{i} {text}").headers["x-felab-replica"] for i in range(30)}
        assert replicas <= {"0", "1", "2", "3"} and len(replicas) > 1


def test_round_robin_on_the_server_cycles_through_replicas() -> None:
    with practice_server("--replicas", "3", "--route", "round-robin") as url:
        assert [chat(url, "hi").headers["x-felab-replica"] for _ in range(4)] == ["0", "1", "2", "0"]


def test_the_cache_expires_after_an_idle_spell() -> None:
    # Wide margins (noisy machine): TTL 1 s; "at once" is well under it, the idle spell 2 s.
    text = "a short opening to cache. " * 40
    with practice_server("--cache-ttl", "1", "--prefill-tps", "50000") as url:
        chat(url, text)
        warm = chat(url, text).json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        time.sleep(2.0)
        cold = chat(url, text).json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert warm > 0 and cold == 0


@pytest.mark.parametrize(
    "flags",
    [["--replicas", "0"], ["--route", "nearest"], ["--cache-ttl", "0"], ["--fail-rate", "2"]],
)
def test_bad_fleet_flags_are_refused_before_starting(flags: list[str]) -> None:
    result = CliRunner().invoke(server_main, flags)
    assert result.exit_code == 2 and f"Error: {flags[0]} must be" in result.output
