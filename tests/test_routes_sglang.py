"""`--route sglang-cache-aware`: SGLang's cache-aware rule (routes_sglang.py), case by case as
sgl-model-gateway's cache_aware.rs states it, and through the booking core; and the pieces of
`felab fleet check` that need no router (which worker took which request, the matching).
The check itself against the real router is in tests/test_fleet_routers.py (marked routers)."""

from __future__ import annotations

from felab.fleet.check import attribute, best_matching, lesson_workload, run_model
from felab.mock_server.booking import PracticeModel, Prompt
from felab.mock_server.cache import prompt_keys
from felab.mock_server.config import Settings
from felab.mock_server.routes_sglang import CacheAware

BLOCK = 64


def keys(*blocks: int) -> list[int]:
    return list(blocks)


def test_cold_prompts_go_to_the_first_least_loaded_worker() -> None:
    route = CacheAware()
    # nothing held: each goes to the least loaded, the first of those tied
    assert route.choose(keys(1, 2, 3), 3 * BLOCK, BLOCK, [0, 0, 0]) == 0
    assert route.choose(keys(7, 8, 9), 3 * BLOCK, BLOCK, [0, 0, 0]) == 0  # not the smallest tree
    assert route.choose(keys(4, 5, 6), 3 * BLOCK, BLOCK, [1, 0, 0]) == 1
    assert route.choose(keys(10, 11), 2 * BLOCK, BLOCK, [1, 1, 0]) == 2


def test_a_match_above_the_threshold_follows_its_worker() -> None:
    route = CacheAware()
    route.choose(keys(1, 2, 3), 3 * BLOCK, BLOCK, [0, 0, 0])  # replica 0
    route.choose(keys(7, 8, 9), 3 * BLOCK, BLOCK, [1, 0, 0])  # replica 1 (0 was busy)
    # 2 of 5 blocks match replica 1's prompt: 40% > 30%, even though replica 1 is busier
    assert route.choose(keys(7, 8, 20, 21, 22), 5 * BLOCK, BLOCK, [0, 3, 0]) == 1
    # 1 of 4 blocks: 25% is not above 30%: cold, to the least loaded
    assert route.choose(keys(1, 30, 31, 32), 4 * BLOCK, BLOCK, [2, 0, 1]) == 1


def test_the_threshold_is_strict() -> None:
    route = CacheAware()
    route.choose(keys(1, 2, 3), 3 * BLOCK, BLOCK, [0, 0])
    # 3 of 10 blocks: exactly 30%, not more: cold (the least loaded is replica 1)
    assert route.choose(keys(1, 2, 3, *range(40, 47)), 10 * BLOCK, BLOCK, [1, 0]) == 1


def test_among_workers_holding_the_match_the_latest_wins() -> None:
    route = CacheAware()
    route.choose(keys(1, 2), 2 * BLOCK, BLOCK, [0, 0])  # replica 0
    route.choose(keys(1, 2), 2 * BLOCK, BLOCK, [70, 0])  # imbalanced: replica 1, and inserted there
    assert route.choose(keys(1, 2, 3), 3 * BLOCK, BLOCK, [0, 0]) == 1  # both hold it; 1 was later


def test_imbalance_needs_both_thresholds() -> None:
    route = CacheAware()
    route.choose(keys(1, 2), 2 * BLOCK, BLOCK, [0, 0])  # replica 0 holds it
    assert route.choose(keys(1, 2), 2 * BLOCK, BLOCK, [64, 0]) == 0  # 64 is not more than 64
    assert route.choose(keys(1, 2), 2 * BLOCK, BLOCK, [200, 140]) == 0  # 200 is not > 1.5 x 140
    assert route.choose(keys(1, 2), 2 * BLOCK, BLOCK, [65, 0]) == 1  # both: the least loaded


def test_through_the_booking_core_two_sessions_sent_apart_share_one_replica() -> None:
    """What the issue saw sglang-router do: sessions with openings of their own, one after
    another, all on one worker (each cold, each time the first of the idle ones)."""
    s = Settings(replicas=3, route="sglang-cache-aware")
    model = PracticeModel(s)
    now, chosen = 0.0, []
    for session in range(3):
        tokens, ks = prompt_keys(f"opening {session} " + "words of its own " * 500)
        b = model.book(Prompt(tokens, ks), 1, now, now)
        chosen.append(b.replica.index)
        now = b.reply_end + 1
        model.finish(b)
    assert chosen == [0, 0, 0]


def test_through_the_booking_core_sessions_sent_together_spread_then_stay() -> None:
    routed = run_model(lesson_workload(), 3)
    first_turn = routed.chosen[:3]
    assert sorted(first_turn) == [0, 1, 2]  # in flight together: each to an idle replica
    later_turns = [routed.chosen[i : i + 3] for i in (5, 10, 15)]
    assert all(turn == first_turn for turn in later_turns)  # each session stays where its opening is
    assert sum(routed.hits) > 0


def test_attribute_finds_the_one_assignment_the_counters_allow() -> None:
    assert attribute([100, 250, 400], [250, 500, 0]) == [1, 0, 1]  # 250 alone; 100 + 400
    assert attribute([100, 100], [100, 100]) is None  # either way round: no telling


def test_best_matching_relabels_workers() -> None:
    model = [0, 0, 1, 2, 1]
    real = [2, 2, 0, 1, 0]
    assert best_matching(model, real, 3) == [2, 0, 1]
