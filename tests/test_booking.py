"""The booking core, with no server and no clock: the test says what time it is.

Every expected time below is worked out by hand from the lesson's defaults
(15 ms overhead, prefill 2,500 tokens/s, decode 400 tokens/s, 64-token blocks).
"""

from __future__ import annotations

import random

import pytest

from felab.mock_server.booking import PracticeModel, Prompt
from felab.mock_server.config import Settings

BLOCK = 64


def prompt(blocks: list[int], extra_tokens: int = 0, session: str | None = None) -> Prompt:
    """A prompt of these block ids (as keys) plus a tail shorter than a block."""
    return Prompt(len(blocks) * BLOCK + extra_tokens, blocks, session)


def test_a_cold_prompt_pays_overhead_and_all_of_its_prefill() -> None:
    model = PracticeModel(Settings())
    b = model.book(prompt(list(range(47)), extra_tokens=37), reply_tokens=5, arrival=10.0, now=10.0)
    assert b.prompt_tokens == 47 * 64 + 37 == 3045 and b.cached_tokens == 0
    assert b.ttft_s == pytest.approx(0.015 + 3045 / 2500)  # the lesson's ~1,233 ms
    assert b.token_at(4) == pytest.approx(b.first_token_at + 4 / 400)
    assert b.usage()["prompt_tokens_details"] == {"cached_tokens": 0}


def test_the_same_opening_again_reads_only_its_new_tail() -> None:
    model = PracticeModel(Settings())
    model.book(prompt(list(range(47)), 37), 5, arrival=0.0, now=0.0)
    again = model.book(prompt(list(range(47)), 50), 5, arrival=5.0, now=5.0)
    assert again.cached_tokens == 47 * 64
    assert again.ttft_s == pytest.approx(0.015 + 50 / 2500)  # ~35 ms: the lesson's calls 2-12


def test_a_prompt_finds_the_blocks_of_one_booked_just_before_it_and_waits_its_turn() -> None:
    model = PracticeModel(Settings())
    first = model.book(prompt(list(range(40))), 1, arrival=0.0, now=0.0)
    second = model.book(prompt(list(range(40)) + [99]), 1, arrival=0.0, now=0.0)
    assert second.cached_tokens == 40 * 64  # booked behind it in the FIFO lane: read by then
    assert second.prefill.start == pytest.approx(first.first_token_at)
    assert second.queue_s == pytest.approx(first.first_token_at - 0.015)
    assert second.first_token_at == pytest.approx(first.first_token_at + 64 / 2500)


def test_blocks_expire_in_the_callers_time_not_the_wall_clock() -> None:
    model = PracticeModel(Settings(cache_ttl_s=60))
    model.book(prompt([1, 2, 3]), 1, arrival=0.0, now=0.0)
    assert model.book(prompt([1, 2, 3]), 1, arrival=50.0, now=50.0).cached_tokens == 3 * 64
    # used at ~50 s; 61 s of trace time later it is gone, though no real time passed
    assert model.book(prompt([1, 2, 3]), 1, arrival=111.1, now=111.1).cached_tokens == 0


def test_capacity_evicts_the_least_recently_used_block() -> None:
    model = PracticeModel(Settings(cache_blocks=4))
    model.book(prompt([1, 2]), 1, arrival=0.0, now=0.0)
    model.book(prompt([3, 4]), 1, arrival=1.0, now=1.0)
    model.book(prompt([1, 2]), 1, arrival=2.0, now=2.0)  # 1, 2 used again: 3, 4 are the oldest
    model.book(prompt([5]), 1, arrival=3.0, now=3.0)  # one over: block 4 (a tail) goes first
    assert model.book(prompt([3, 4]), 1, arrival=4.0, now=4.0).cached_tokens == 64


def test_affinity_keeps_a_session_on_one_replica_and_its_cache() -> None:
    model = PracticeModel(Settings(replicas=18, route="affinity"))
    turns = [model.book(prompt(list(range(10 + t)), session="s1"), 1, float(t), float(t)) for t in range(5)]
    assert len({b.replica.index for b in turns}) == 1
    assert [b.cached_tokens for b in turns[1:]] == [(10 + t) * 64 for t in range(4)]


def test_a_cancelled_request_gives_its_lane_time_to_the_ones_behind_it() -> None:
    model = PracticeModel(Settings())
    big = [model.book(prompt([1000 * i + k for k in range(40)]), 1, 0.0, 0.0) for i in range(3)]
    tiny = model.book(prompt([], extra_tokens=10), 1, 0.0, 0.0)
    each = 40 * 64 / 2500  # 1.024 s a prompt
    assert tiny.prefill.start == pytest.approx(0.015 + 3 * each)
    # At 0.3 s the clients of the second and third prompts hang up: neither started its prefill.
    assert model.cancel(big[1], now=0.3)  # the third and the tiny one move up
    assert big[2].prefill.start == pytest.approx(0.015 + each)
    assert model.cancel(big[2], now=0.3)  # the tiny one moves up again
    assert tiny.prefill.start == pytest.approx(0.015 + each)  # only the first, which was prefilling, is kept
    # The first hangs up half way: it keeps what it used, the tiny prompt starts at once.
    assert model.cancel(big[0], now=0.5)
    assert tiny.prefill.start == pytest.approx(0.5)
    assert not model.live.keys() - {tiny.rid}


@pytest.mark.parametrize(
    "cache",
    [
        {},
        {"seats": 2, "cache_mode": "seat-prefix"},
        {"seats": 2, "cache_mode": "seat-prefix", "host_cache_tokens": 4096},
    ],
    ids=["blocks", "seat-prefix", "seat-prefix with a host tier"],
)
def test_reset_forgets_every_block_of_every_replica(cache: dict) -> None:
    # With seat-prefix the seats' last prompts are the cache (a lesson-mac twin): a reset that
    # emptied only the block cache answered "cleared_blocks": 0, and call 1 stayed warm.
    model = PracticeModel(Settings(replicas=2, route="round-robin", **cache))
    for t in range(4):
        model.book(prompt([t, t + 10]), 1, 0.0, 0.0)
    again = [prompt([2, 12]), prompt([3, 13])]  # the last on each replica: in its seat, or its cache
    assert all(model.book(p, 1, 1.0, 1.0).cached_tokens >= 64 for p in again)  # warm (the test can fail)
    assert model.reset_caches() >= 4
    assert [model.book(p, 1, 2.0, 2.0).cached_tokens for p in again] == [0, 0]


def test_a_hang_up_counts_only_what_was_served() -> None:
    model = PracticeModel(Settings())
    early = model.book(prompt(list(range(40))), 500, arrival=0.0, now=0.0)
    model.cancel(early, now=0.001)  # gone before its first token
    stats = early.replica.stats
    assert (stats.requests, stats.ttft_count, stats.generation_tokens) == (1, 0, 0)
    later = model.book(prompt([7]), 100, arrival=1.0, now=1.0)
    model.cancel(later, now=later.first_token_at + 9.5 / 400)  # tokens 0..9 were due
    assert (stats.ttft_count, stats.generation_tokens) == (1, 10)
    assert stats.ttft_sum_s == pytest.approx(later.ttft_s)


def test_the_prefix_router_quotes_from_arrival_as_the_lane_books() -> None:
    # Replica 0 is busy until 30.4 ms (76 tokens at 2,500/s); replica 1 is idle. A request that
    # arrived at 0 but is booked at 20 ms (its body was slow) starts at 15 ms on an idle lane:
    # replica 1 is sooner.
    model = PracticeModel(Settings(replicas=2, route="prefix"))
    busy = model.fleet.replicas[0]
    busy.lane.book(0.0, now=0.0, new=76, cached=0, rank=None, reply=1)
    b = model.book(prompt([], extra_tokens=100), 1, arrival=0.0, now=0.020)
    assert b.replica.index == 1 and b.prefill.start == pytest.approx(0.015)


def test_a_cancelled_prefill_stops_its_blocks_clock_where_it_stopped() -> None:
    def half_prefilled(ttl: float) -> PracticeModel:
        model = PracticeModel(Settings(cache_ttl_s=ttl))
        ahead = model.book(prompt(list(range(100, 140))), 1, arrival=0.0, now=0.0)  # until ~1.04 s
        queued = model.book(prompt([1, 2, 3, 4]), 1, arrival=0.0, now=0.0)
        model.cancel(queued, now=0.5)  # never prefilled: its blocks leave the cache
        model.cancel(ahead, now=0.52)  # ~half prefilled: that half stays, last used at 0.52 s
        return model

    model = half_prefilled(ttl=1.0)
    assert model.book(prompt([1, 2]), 1, arrival=0.6, now=0.6).cached_tokens == 0
    kept = model.book(prompt(list(range(100, 140))), 1, arrival=1.4, now=1.4).cached_tokens
    assert kept == (0.505 * 2500) // 64 * 64  # the blocks its 0.505 s of prefill computed
    # Booked to be used until 1.04 s, but last used at 0.52 s: at 1.6 s they have expired.
    model = half_prefilled(ttl=1.0)
    assert model.book(prompt(list(range(100, 140))), 1, arrival=1.6, now=1.6).cached_tokens == 0


@pytest.mark.parametrize("seats", [None, 4])
@pytest.mark.parametrize("order", ["booked", "reversed"])
def test_a_chain_of_hung_up_prompts_gives_back_all_the_time_no_live_prompt_needs(
    order: str, seats: int | None
) -> None:
    # 60 prompts, each the last one plus 4 blocks (issue 22): each found the blocks of the one
    # before it, booked but not yet computed. All hang up at 0.1 s, before their prefill ends.
    # With 4 seats, 56 of them were waiting for a seat too: the seats come back with the lane.
    model = PracticeModel(Settings(seats=seats))
    chain = [model.book(prompt(list(range(4 * (k + 1)))), 50, arrival=0.0, now=0.0) for k in range(60)]
    assert chain[-1].prefill.end >= 0.015 + 60 * 4 * 64 / 2500  # 6.16 s of lane booked (more with seats)
    for b in chain if order == "booked" else reversed(chain):
        model.cancel(b, now=0.1)
    # Only the 85 ms the first one really prefilled (0.015 to 0.1 s) was spent: a tiny prompt now
    # waits as on an idle server, its overhead and its own 10 tokens.
    tiny = model.book(prompt([], extra_tokens=10), 1, arrival=0.1, now=0.1)
    assert tiny.ttft_s == pytest.approx(0.015 + 10 / 2500)
    assert model.in_flight() == [(0, tiny.prefill)]  # the gauges: one request, the tiny one


def test_a_live_prompt_keeps_what_it_relies_on_and_only_that() -> None:
    # Three prompts, each extending the last by 4 blocks. The first two hang up; the third is
    # live and found all 8 of their blocks: that work stays in the lane for it. Then it hangs up
    # too, and their claim goes with it.
    model = PracticeModel(Settings())
    a, b, c = (model.book(prompt(list(range(4 * k))), 1, arrival=0.0, now=0.0) for k in (1, 2, 3))
    each = 4 * 64 / 2500  # 0.1024 s
    model.cancel(a, now=0.02)
    model.cancel(b, now=0.02)
    assert c.prefill.start == pytest.approx(0.015 + 2 * each)  # a's and b's blocks are computed for c
    model.cancel(c, now=0.02)
    tiny = model.book(prompt([], extra_tokens=10), 1, arrival=0.02, now=0.02)
    assert tiny.prefill.start == pytest.approx(0.035)  # a had prefilled 5 ms: spent; the rest given back


def test_a_hung_up_prompt_keeps_its_last_piece_when_a_live_prompt_needs_part_of_it() -> None:
    # With --tile-tokens 64 and no pieces, a 48-token prompt is one piece of few rows: none of it
    # is computed before its prefill ends. b found a's first 32 tokens (2 of its 3 blocks of 16)
    # cached; a hangs up at once: its whole prefill stays in the lane, and its blocks in the cache.
    s = Settings(block_tokens=16, prefill_tps=50_000.0, tile_tokens=64, untiled_ns=600.0)
    model = PracticeModel(s)
    a = model.book(Prompt(48, [1, 2, 3]), 1, arrival=0.0, now=0.0)
    b = model.book(Prompt(48, [1, 2, 9]), 1, arrival=0.0, now=0.0)
    assert b.cached_tokens == 32
    whole = a.prefill.seconds
    model.cancel(a, now=0.016)
    assert a.prefill.seconds == whole  # its piece is read whole, or not at all
    assert a.replica.cache.cached_blocks([1, 2], 0.02) == 2  # b was booked finding them


# ── The twin's terms (issue 18): seats, attention, decode slowdown ──────────────


def test_past_its_seats_a_request_waits_for_one_and_the_wait_is_in_its_ttft() -> None:
    # 2 seats. A and B: one block each (64 tokens, 25.6 ms of prefill) and 400 reply tokens
    # (399 x 2.5 ms = 997.5 ms after the first). A: first token at 15 + 25.6 = 40.6 ms, reply
    # over at 1,038.1 ms. B: after A in the lane, 66.2 ms, over at 1,063.7 ms. C finds both
    # seats taken: it is admitted when A's reply ends, and its first token comes 25.6 ms later.
    model = PracticeModel(Settings(seats=2))
    a, b, c = (model.book(prompt([k]), 400, arrival=0.0, now=0.0) for k in (1, 2, 3))
    assert a.reply_end == pytest.approx(0.0406 + 0.9975) and b.first_token_at == pytest.approx(0.0662)
    assert c.prefill.ready_at == pytest.approx(1.0381)
    assert c.ttft_s == pytest.approx(1.0381 + 0.0256)
    running, waiting = gauges_at(model, 0.5)
    assert (running, waiting) == (2, 1)  # vllm:num_requests_waiting counts C


def test_a_hang_up_frees_its_seat_and_the_waiting_request_moves_up() -> None:
    model = PracticeModel(Settings(seats=2))
    a, _, c = (model.book(prompt([k]), 400, arrival=0.0, now=0.0) for k in (1, 2, 3))
    assert model.cancel(a, now=0.5)  # A's client leaves mid-reply: C takes its seat at 0.5 s
    assert c.prefill.ready_at == pytest.approx(0.5) and c.first_token_at == pytest.approx(0.5256)
    d = model.book(prompt([4]), 1, arrival=0.6, now=0.6)  # both seats held until ~1.06 and ~1.52 s
    assert d.prefill.ready_at == pytest.approx(0.0662 + 0.9975)


def gauges_at(model: PracticeModel, now: float) -> tuple[int, int]:
    turns = [turn for _, turn in model.in_flight()]
    return sum(t.start <= now for t in turns), sum(t.start > now for t in turns)


def test_seat_prefix_reuses_what_the_seat_last_read_and_picks_the_seat_that_shares_most() -> None:
    # llama.cpp's cache: each seat keeps its last prompt. A (an opening of 40 blocks) and B (20
    # other blocks) each take a seat; later, a question after A's opening takes A's seat and reads
    # only its new block; a prompt sharing nothing with either reuses nothing.
    model = PracticeModel(Settings(seats=2, cache_mode="seat-prefix"))
    a = model.book(prompt(list(range(40))), 1, arrival=0.0, now=0.0)
    b = model.book(prompt(list(range(100, 120))), 1, arrival=0.0, now=0.0)
    again = model.book(prompt([*range(40), 999]), 1, arrival=5.0, now=5.0)
    assert again.seat is a.seat and again.cached_tokens == 40 * 64
    assert again.ttft_s == pytest.approx(0.015 + 64 / 2500)
    # The very same prompt again: llama.cpp still reads its last token (it reports n - 1 cached).
    same = model.book(prompt([*range(40), 999]), 1, arrival=5.5, now=5.5)
    assert same.cached_tokens == 41 * 64 - 1 and same.ttft_s == pytest.approx(0.015 + 1 / 2500)
    other = model.book(prompt(list(range(200, 210))), 1, arrival=6.0, now=6.0)
    assert other.seat is b.seat and other.cached_tokens == 0  # the seat free longest (a's was used at 5 s)
    # The seat now holds `other`'s prompt: B's opening is gone from it, as in llama.cpp.
    assert model.book(prompt(list(range(100, 120))), 1, 7.0, 7.0).cached_tokens == 0


def test_attention_makes_prefill_grow_with_the_context_already_read() -> None:
    # prefill = uncached / 2,500 + 100 ns x uncached x (context before + uncached / 2)
    model = PracticeModel(Settings(prefill_attention_ns=100))
    cold = model.book(prompt(list(range(47)), 37), 5, arrival=0.0, now=0.0)
    assert cold.ttft_s == pytest.approx(0.015 + 3045 / 2500 + 100e-9 * 3045 * 3045 / 2)  # 1,697 ms
    again = model.book(prompt(list(range(47)), 50), 5, arrival=5.0, now=5.0)  # 3,008 cached, 50 new
    assert again.ttft_s == pytest.approx(0.015 + 50 / 2500 + 100e-9 * 50 * (3008 + 25))  # 50.2 ms


def test_each_further_stream_decoding_on_the_replica_slows_a_new_stream() -> None:
    # interval = 1 / 400 x (1 + 0.5 x (streams - 1)): alone 2.5 ms; with one stream decoding, 3.75 ms
    model = PracticeModel(Settings(decode_slowdown=0.5))
    first = model.book(prompt([1]), 400, arrival=0.0, now=0.0)
    second = model.book(prompt([2]), 10, arrival=0.1, now=0.1)
    assert first.interval_s == pytest.approx(0.0025) and second.interval_s == pytest.approx(0.00375)
    later = model.book(prompt([3]), 10, arrival=2.0, now=2.0)  # the first is over by then
    assert later.interval_s == pytest.approx(0.0025)


def test_the_wait_for_a_seat_counts_as_queue_time() -> None:
    # One seat: the second request is admitted when the first reply ends (15 + 25.6 + 997.5 ms)
    # and its prefill starts then: all of it after its overhead is queue (replay's queue column).
    model = PracticeModel(Settings(seats=1))
    model.book(prompt([1]), 400, arrival=0.0, now=0.0)
    second = model.book(prompt([2]), 1, arrival=0.0, now=0.0)
    assert second.queue_s == pytest.approx(1.0381 - 0.015)


def test_a_seat_keeps_only_what_a_hung_up_prompt_had_read() -> None:
    # seat-prefix: a 40-block prompt hangs up at 0.5 s, ~half read ((0.5 - 0.015) x 2,500 =
    # 1,212 tokens: 18 whole blocks). The same prompt again reuses those 18 blocks from its seat.
    model = PracticeModel(Settings(seats=1, cache_mode="seat-prefix"))
    first = model.book(prompt(list(range(40))), 1, arrival=0.0, now=0.0)
    model.cancel(first, now=0.5)
    again = model.book(prompt(list(range(40))), 1, arrival=1.0, now=1.0)
    assert again.cached_tokens == 18 * 64


def test_a_cached_opening_costs_a_floor_per_cached_token_and_decode_slows_with_the_prompt() -> None:
    # 20 µs per cached token, attention 10 ns, 500 ns per prompt token on every reply token.
    s = Settings(cached_token_us=20.0, prefill_attention_ns=10.0, decode_context_ns=500.0)
    model = PracticeModel(s)
    model.book(prompt(list(range(47)), 37), 5, arrival=0.0, now=0.0)
    short = model.book(prompt(list(range(47)), 50), 5, arrival=5.0, now=5.0)  # a question after it
    cached = 47 * 64  # 3,008 tokens: each costs 20 µs (60 ms), added to attention on 50 new (1.5 ms)
    attention = 10e-9 * 50 * (cached + 25)
    assert short.ttft_s == pytest.approx(0.015 + 50 / 2500 + attention + 20e-6 * cached)
    # each reply token: after the prompt and half its 5-token reply (step.reply_context)
    assert short.interval_s == pytest.approx(1 / 400 + 500e-9 * (cached + 50 + 2))
    long_tail = model.book(prompt([*range(47), *range(900, 930)]), 1, arrival=9.0, now=9.0)
    attention = 10e-9 * 1920 * (cached + 960)  # 1,920 new tokens: 76 ms of attention, and the 60 ms
    assert long_tail.ttft_s == pytest.approx(0.015 + 1920 / 2500 + attention + 20e-6 * cached)
    # prefilled_tokens inverts read_s, the cached tokens' cost included (hang-ups keep what was
    # computed): before the cached tokens are paid for, no new token is read
    t = s.timing
    for u, c in [(50, 3008), (700, 3008), (3000, 0)]:
        assert t.prefilled_tokens(t.prefill_s(u, c), c) == u
        assert t.prefilled_tokens(t.read_s(u // 2, c), c) == u // 2
    assert t.prefilled_tokens(20e-6 * 3008 * 0.99, 3008) == 0


def test_the_context_terms_at_zero_are_todays_model_exactly() -> None:
    t, zero = Settings().timing, Settings(cached_token_us=0.0, decode_context_ns=0.0).timing
    assert t == zero and t.prefill_s(50, 3008) == 50 / 2500 and t.token_interval_s(3, 5000) == 1 / 400


@pytest.mark.parametrize("batch_tokens", [None, 2048])
def test_with_seats_the_streams_counted_are_those_on_a_seat(batch_tokens: int | None) -> None:
    # The streams decoding when a request's first token comes set its gap (decode_slowdown). With
    # seats they are counted from each seat's last holder (admission is first come first served),
    # not from every live request (a replay's overloaded replica holds thousands): the same count.
    import random

    from felab.mock_server.booking import Booking

    s = Settings(seats=4, decode_slowdown=0.5, batch_tokens=batch_tokens)
    model = PracticeModel(s)
    rng = random.Random(5)
    now, checked = 0.0, 0
    for i in range(300):
        now += rng.expovariate(40)
        replica = model.fleet.replicas[0]
        if model.live:
            assert replica.seats is not None  # a first token comes after its own admission, the latest
            at = max(now, replica.seats.last_admission) + rng.uniform(0, 2)
            scan = 1 + sum(
                b.first_token_at <= at < b.reply_end for b in model.live.values() if isinstance(b, Booking)
            )
            checked += scan > 1
            assert model.streams(replica, at) == scan, i
        b = model.book(prompt([i * 7 + k for k in range(rng.randint(1, 40))]), rng.randint(1, 300), now, now)
        for done in [x for x in model.live.values() if x.reply_end <= now]:
            model.finish(done)
        if rng.random() < 0.1:
            model.cancel(b, now + 0.01)
    assert checked > 100  # the counts compared were of several streams, not only of one


def test_streams_decoding_counted_from_the_latest_agree_with_counting_every_live_request() -> None:
    # On the lesson's engine streams() looks at the latest bookings only (a replay's overloaded
    # replica holds thousands: 74 s for the Mooncake hour); it must count what a look at all finds,
    # with queues, long and short replies, and hang-ups.
    rng = random.Random(5)
    model = PracticeModel(Settings(decode_slowdown=0.5, decode_tps=50.0))  # replies of up to 8 s
    replica, now = model.fleet.replicas[0], 0.0
    for i in range(300):
        now += rng.expovariate(4.0)
        b = model.book(
            prompt([i * 1000 + k for k in range(rng.randint(1, 30))]), rng.randint(1, 400), now, now
        )
        if rng.random() < 0.1:
            model.cancel(b, now + rng.uniform(0.0, 2.0))
        for at in (
            now,
            b.first_token_at,
            b.first_token_at - rng.uniform(0, 40),
            b.first_token_at + rng.uniform(0, 40),
        ):
            every = 1 + sum(x.first_token_at <= at < x.reply_end for x in model.live.values())
            assert model.streams(replica, at) == every, (i, at)
    assert max(model.streams(replica, t / 10) for t in range(int(now * 10))) > 3  # (streams overlap)
