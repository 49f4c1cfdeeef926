"""The host-memory tier behind the seats (llama-server's --cache-ram), on the virtual clock.

Hand-worked from the lesson's defaults (15 ms overhead, prefill 2,500 tokens/s, 64-token
blocks): an opening A of 40 blocks (2,560 tokens), pushed out of its seat by other openings,
then A again with a question (one new block). Without the tier it is read again whole,
0.015 + 41 x 64 / 2,500 = 1.0646 s; with it, A comes back from host memory and only the new
block is read, 0.015 + 64 / 2,500 = 0.0406 s, plus the restore, --host-restore-us per token.
"""

from __future__ import annotations

import pytest

from felab.mock_server.booking import PracticeModel, Prompt
from felab.mock_server.config import Settings
from felab.mock_server.host_cache import HostCache

BLOCK = 64
A, B, C = list(range(40)), list(range(100, 120)), list(range(200, 230))
QUESTION = 999


def prompt(blocks: list[int]) -> Prompt:
    return Prompt(len(blocks) * BLOCK, blocks)


def twin(seats: int = 1, host_cache_tokens: int = 100_000, host_restore_us: float = 0.0) -> PracticeModel:
    return PracticeModel(
        Settings(
            seats=seats,
            cache_mode="seat-prefix",
            host_cache_tokens=host_cache_tokens,
            host_restore_us=host_restore_us,
        )
    )


def test_an_opening_pushed_out_of_the_only_seat_comes_back_from_host_memory() -> None:
    model = twin(seats=1)
    a = model.book(prompt(A), 1, arrival=0.0, now=0.0)
    assert a.ttft_s == pytest.approx(0.015 + 40 * 64 / 2500)
    model.book(prompt(B), 1, arrival=5.0, now=5.0)  # takes the seat: A is saved to host memory
    back = model.book(prompt([*A, QUESTION]), 1, arrival=10.0, now=10.0)
    assert back.cached_tokens == 40 * 64
    assert back.ttft_s == pytest.approx(0.015 + 64 / 2500)  # 40.6 ms, not 1,064.6 ms


def test_without_the_tier_the_same_sequence_reads_the_opening_again() -> None:
    model = twin(seats=1, host_cache_tokens=0)  # today's twin, and the default
    model.book(prompt(A), 1, arrival=0.0, now=0.0)
    model.book(prompt(B), 1, arrival=5.0, now=5.0)
    back = model.book(prompt([*A, QUESTION]), 1, arrival=10.0, now=10.0)
    assert back.cached_tokens == 0 and back.ttft_s == pytest.approx(0.015 + 41 * 64 / 2500)


def test_the_restore_costs_its_tokens_before_the_prefill_starts() -> None:
    model = twin(seats=1, host_restore_us=100.0)  # 100 µs a token: 2,560 tokens, 0.256 s
    model.book(prompt(A), 1, arrival=0.0, now=0.0)
    b = model.book(prompt(B), 1, arrival=5.0, now=5.0)
    assert b.ttft_s == pytest.approx(0.015 + 20 * 64 / 2500)  # nothing restored: nothing charged
    back = model.book(prompt([*A, QUESTION]), 1, arrival=10.0, now=10.0)
    assert back.prefill.start == pytest.approx(10.0 + 0.015 + 0.256)
    assert back.ttft_s == pytest.approx(0.015 + 0.256 + 64 / 2500)


def test_with_two_seats_the_opening_returns_to_the_other_seat() -> None:
    # A takes seat 0, B seat 1 (free longest), C seat 0 (A's: free longest by then): A is out of
    # both seats. A again takes seat 1 (free longest), whose B is saved, and A is copied into it.
    model = twin(seats=2)
    a = model.book(prompt(A), 1, arrival=0.0, now=0.0)
    b = model.book(prompt(B), 1, arrival=5.0, now=5.0)
    c = model.book(prompt(C), 1, arrival=10.0, now=10.0)
    assert c.seat is a.seat and c.cached_tokens == 0
    back = model.book(prompt([*A, QUESTION]), 1, arrival=15.0, now=15.0)
    assert back.seat is b.seat and back.cached_tokens == 40 * 64
    again_b = model.book(prompt([*B, QUESTION]), 1, arrival=20.0, now=20.0)  # B was saved in turn
    assert again_b.cached_tokens == 20 * 64


def test_the_oldest_saved_prompt_goes_first_past_the_limit() -> None:
    # A limit of 50 blocks (3,200 tokens): A (40) is saved when B takes the seat, B (20) when C
    # does; 60 > 50, so A, the oldest, goes. B comes back; A is read again.
    model = twin(seats=1, host_cache_tokens=50 * 64)
    for i, blocks in enumerate([A, B, C]):
        model.book(prompt(blocks), 1, arrival=5.0 * i, now=5.0 * i)
    assert model.book(prompt([*B, QUESTION]), 1, arrival=20.0, now=20.0).cached_tokens == 20 * 64
    assert model.book(prompt([*A, QUESTION]), 1, arrival=25.0, now=25.0).cached_tokens == 0


def test_a_seat_that_keeps_most_of_its_prompt_is_used_as_it_is() -> None:
    # A question after the opening in its own seat: nothing is saved or restored (llama.cpp looks
    # in host memory only when the seat would lose most of what it holds).
    model = twin(seats=1)
    model.book(prompt(A), 1, arrival=0.0, now=0.0)
    warm = model.book(prompt([*A, QUESTION]), 1, arrival=5.0, now=5.0)
    assert warm.cached_tokens == 40 * 64
    seats = model.fleet.replicas[0].seats
    assert seats is not None and seats.host is not None and list(seats.host.saved) == []


def test_a_prompt_hung_up_on_after_it_was_saved_keeps_only_what_it_computed() -> None:
    # A hangs up at 0.5 s, 18 whole blocks read ((0.5 - 0.015) x 2,500 = 1,212 tokens); B, booked
    # while A ran, took A's seat next and saved A to host memory whole. Only the 18 come back.
    model = twin(seats=1)
    a = model.book(prompt(A), 1, arrival=0.0, now=0.0)
    model.book(prompt(B), 1, arrival=0.2, now=0.2)
    model.cancel(a, now=0.5)
    back = model.book(prompt([*A, QUESTION]), 1, arrival=10.0, now=10.0)
    assert back.cached_tokens == 18 * 64


# ── The tier alone (llama.cpp's server_prompt_cache) ─────────────────────────


def test_save_skips_a_prompt_held_whole_and_drops_those_it_holds_whole() -> None:
    host = HostCache(limit_blocks=100)
    assert host.save(A) and not host.save(A[:10])  # A[:10] is held whole inside A
    assert host.save([*A, 7, 8])  # holds A whole: A goes
    assert list(host.saved) == [[*A, 7, 8]] and host.held_blocks == 42


def test_load_takes_the_best_prompt_kept_at_least_a_quarter_and_removes_it() -> None:
    host = HostCache(limit_blocks=100)
    host.save(A)
    assert host.load([*A[:8], 5000], seat_keys=B, seat_shared=0) == 0  # keeps 8/40 < 1/4: not taken
    assert host.load([*A[:12], 5000], seat_keys=B, seat_shared=0) == 12  # 12/40 >= 1/4: taken
    assert list(host.saved) == [] and host.held_blocks == 0  # it is in the seat now


def test_a_prompt_longer_than_the_limit_is_not_saved() -> None:
    host = HostCache(limit_blocks=30)
    assert not host.save(A) and list(host.saved) == []


def test_the_tier_needs_seats_and_a_restore_is_never_dearer_than_reading() -> None:
    with pytest.raises(ValueError, match="give --cache-mode seat-prefix"):
        Settings(host_cache_tokens=8192)
    with pytest.raises(ValueError, match="more than reading the token again costs"):
        Settings(seats=1, cache_mode="seat-prefix", host_cache_tokens=8192, host_restore_us=401.0)
    assert Settings().host_cache_tokens == 0  # off by default: lesson 06 and every default figure


def test_a_prompt_sharing_a_tenth_or_less_takes_the_seat_free_longest() -> None:
    # llama.cpp's --slot-prompt-similarity (0.1): a chat template's few shared tokens do not pull
    # a prompt onto a seat. P shares 2 of its 40 blocks with A's seat, so it takes the other seat
    # (free longest), and still reuses nothing there; Q shares 5 of 40 (> 1/10): A's seat.
    model = twin(seats=2, host_cache_tokens=0)
    a = model.book(prompt(A), 1, arrival=0.0, now=0.0)
    p = model.book(prompt([*A[:2], *range(300, 338)]), 1, arrival=5.0, now=5.0)
    assert p.seat is not a.seat and p.cached_tokens == 0
    q = model.book(prompt([*A[:5], *range(400, 435)]), 1, arrival=10.0, now=10.0)
    assert q.seat is a.seat and q.cached_tokens == 5 * 64


def test_of_seats_free_as_long_the_highest_is_taken_and_of_seats_as_similar_the_lowest() -> None:
    # llama-server's slot choice (server-context.cpp, get_available_slot): the least recently used
    # by `t_last_used <= t_last`, so of equals the last slot (a fresh -np 4 server puts its first
    # request in slot 3, seen in its log: "id 3 | selected slot by LRU, t_last = -1"); the most
    # similar by `f_sim_cur > f_sim_best`, so of equals the first, however long the others were
    # free. Seat numbers decide which pieces share a ubatch (terms/untiled.py) and the order in a step.
    model = twin(seats=4, host_cache_tokens=0)
    seats = model.fleet.replicas[0].seats
    assert seats is not None
    first = model.book(prompt(A), 1, arrival=0.0, now=0.0)
    assert seats.seats.index(first.seat) == 3
    second = model.book(prompt(B), 1, arrival=0.0, now=0.0)  # seat 3 busy: of 0, 1, 2 the last
    assert seats.seats.index(second.seat) == 2
    for s in seats.seats[:2]:  # two seats holding the same prompt, both free, seat 1 the longer
        s.keys = tuple(C)
    seats.seats[0].free_at, seats.seats[1].free_at = 0.5, 0.1
    later = max(s.free_at for s in seats.seats) + 1.0
    again = model.book(prompt([*C, QUESTION]), 1, arrival=later, now=later)
    assert seats.seats.index(again.seat) == 0


@pytest.mark.parametrize("batch", [None, 2048], ids=["lane", "batches"])
def test_a_request_moved_up_by_a_hang_up_still_pays_its_restore(batch: int | None) -> None:
    # One seat, 100 µs a restored token: A, then B pushes A out; C (5 blocks, read by 10.143 s)
    # takes the seat at 10 s and A + a question waits behind it, booked with A restored (0.256
    # s). C hangs up at 10.05 s (with batches, its batch under way is computed whole: to 10.143):
    # the seat is free then, and A's question starts after its copy, at 10.306 s, not 10.05.
    model = PracticeModel(
        Settings(
            seats=1,
            cache_mode="seat-prefix",
            host_cache_tokens=100_000,
            host_restore_us=100.0,
            batch_tokens=batch,
        )
    )
    model.book(prompt(A), 1, arrival=0.0, now=0.0)
    model.book(prompt(B), 1, arrival=5.0, now=5.0)
    c = model.book(prompt(list(range(500, 505))), 1, arrival=10.0, now=10.0)
    back = model.book(prompt([*A, QUESTION]), 1, arrival=10.0, now=10.0)
    assert back.cached_tokens == 40 * 64 and back.prefill.start > c.first_token_at
    model.cancel(c, now=10.05)
    assert back.first_token_at == pytest.approx(10.05 + 0.256 + 64 / 2500)
