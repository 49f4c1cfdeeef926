"""Hung-up clients give back their prefill time, as a real engine aborts a request.

First the core, with no server and no clock: every time below is told, and every
expected time is worked out by hand from the lesson's defaults (15 ms overhead,
prefill 2,500 tokens/s, 64-token blocks: one block is 25.6 ms of prefill).
Then end to end: a real practice server, real `openai` clients that close their
connection after 0.3 s (the SDK's own timeout), streamed and not, with replicas.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import openai
import pytest

from felab.mock_server import metrics
from felab.mock_server.booking import PracticeModel, Prompt
from felab.mock_server.config import Settings
from felab.mock_server.launch import practice_server
from felab.mock_server.loop import Loop, Turn
from felab.mock_server.timing import TimingModel

BLOCK_S = 64 / 2500  # 0.0256 s of prefill a block


# ── The lesson's lane (the engine loop, one whole prompt a step), told the time ──

ONE_PER_MS = TimingModel(overhead_ms=0.0, prefill_tokens_per_s=1000.0, decode_tokens_per_s=1000.0)


def lane_of(*seconds: float, ready_at: float = 0.0) -> tuple[Loop, list[Turn]]:
    """The lesson's engine at 1,000 tokens/s, with prompts of these seconds booked at 0."""
    lane = Loop(None, ONE_PER_MS, by_arrival=True)
    return lane, [book(lane, ready_at, s) for s in seconds]


def book(lane: Loop, ready_at: float, seconds: float, now: float = 0.0) -> Turn:
    return lane.book(ready_at, now, round(seconds * 1000), 0, None, 1)


def cancel(lane: Loop, turn: Turn, now: float, keep_s: float = 0.0) -> list[Turn]:
    """A hang-up at `now`: the turn keeps what it used and what later prompts need, the rest of
    the lane is planned again. The turns that moved."""
    return lane.reflow(now) if lane.shorten(turn, now, keep_s) else []


def test_a_waiting_prefill_that_is_cancelled_leaves_the_lane_and_those_behind_move_up() -> None:
    lane, (a, b, c) = lane_of(1.0, 1.0, 1.0)
    assert [t.start for t in (a, b, c)] == [0.0, 1.0, 2.0]
    assert cancel(lane, b, now=0.5) == [c]
    assert (c.start, c.end, lane.free_at) == pytest.approx((1.0, 2.0, 2.0))
    assert list(lane.queue) == [a, c] and b.seconds == 0.0
    assert cancel(lane, b, now=0.6) == []  # twice: nothing more to give back


def test_a_prefill_cancelled_half_way_keeps_what_it_used() -> None:
    lane, (a, b, c) = lane_of(1.0, 1.0, 1.0)
    assert cancel(lane, a, now=0.25) == [b, c]
    assert (a.end, b.start, c.start, lane.free_at) == pytest.approx((0.25, 0.25, 1.25, 2.25))


def test_a_prefill_already_done_gives_nothing_back() -> None:
    lane, (a, b) = lane_of(1.0, 1.0)
    assert cancel(lane, a, now=1.0) == []
    assert (b.start, lane.free_at) == pytest.approx((1.0, 2.0))


def test_the_work_later_prompts_need_is_kept() -> None:
    lane, (a, b, c) = lane_of(1.0, 1.0, 1.0)
    assert cancel(lane, b, now=0.5, keep_s=0.4) == [b, c]  # still waiting, 0.4 s of it still needed
    assert (b.start, b.end, c.start, lane.free_at) == pytest.approx((1.0, 1.4, 1.4, 2.4))
    assert cancel(lane, a, now=0.1, keep_s=5.0) == []  # all of it needed: nothing moves
    assert (a.end, b.start) == pytest.approx((1.0, 1.0))


def test_a_prefill_not_ready_yet_keeps_its_own_start() -> None:
    lane = Loop(None, ONE_PER_MS, by_arrival=True)
    a = book(lane, 0.0, 1.0)
    b = book(lane, 1.5, 1.0)  # ready only at 1.5: a gap in the lane before it
    assert cancel(lane, a, now=0.2) == []  # b could not start sooner anyway
    assert (a.end, b.start, lane.free_at) == pytest.approx((0.2, 1.5, 2.5))


def test_cancelling_the_last_prefill_frees_the_lane_from_now() -> None:
    lane, (a,) = lane_of(1.0)
    cancel(lane, a, now=0.3)
    assert lane.free_at == pytest.approx(0.3)
    assert book(lane, 0.4, 0.1, now=0.4).start == 0.4


# ── PracticeModel.cancel: the lane, the cache and the gauges agree ───────────


def prompt(blocks: list[int], extra_tokens: int = 0) -> Prompt:
    return Prompt(len(blocks) * 64 + extra_tokens, blocks)


def opening(tag: int, blocks: int = 40) -> list[int]:
    return [tag * 1000 + k for k in range(blocks)]


def gauges(model: PracticeModel, now: float) -> tuple[float, float]:
    """Running and waiting as /metrics would say at `now` (the page rendered and read back)."""
    snapshot = metrics.Snapshot(model.fleet.replicas, {}, now, model.in_flight())
    page = metrics.read_page(metrics.render(metrics.registry("m", lambda: snapshot)).decode())
    return page["vllm:num_requests_running"], page["vllm:num_requests_waiting"]


def test_five_cold_prompts_hung_up_give_the_next_request_the_lane_at_once() -> None:
    # The lesson-sized case: 5 distinct 3,000-token prompts queued, every client gone at 0.3 s.
    model = PracticeModel(Settings())
    cold = [model.book(prompt(opening(i, 47), 7), 1, 0.0, 0.0) for i in range(5)]
    each = (47 * 64 + 7) / 2500  # 1.206 s a prompt
    assert cold[4].first_token_at == pytest.approx(0.015 + 5 * each)  # ~6 s for the last
    assert gauges(model, 0.2) == (1, 4)
    for b in cold:
        model.cancel(b, now=0.3)
    assert gauges(model, 0.3) == (0, 0)
    tiny = model.book(prompt([], 10), 1, arrival=0.31, now=0.31)
    assert tiny.ttft_s == pytest.approx(0.015 + 10 / 2500)  # 19 ms, not ~6 s
    assert gauges(model, 0.31) == (0, 1) and gauges(model, 0.33) == (1, 0)


def test_the_gauges_follow_the_cancels() -> None:
    model = PracticeModel(Settings())
    a, b, c = (model.book(prompt(opening(i)), 1, 0.0, 0.0) for i in range(3))
    assert gauges(model, 0.1) == (1, 2)
    model.cancel(c, now=0.1)  # waiting: leaves at once
    assert gauges(model, 0.1) == (1, 1)
    model.cancel(a, now=0.2)  # prefilling: b starts now
    assert b.prefill.start == pytest.approx(0.2) and gauges(model, 0.2) == (1, 0)


def test_a_later_prompt_that_found_the_cancelled_ones_blocks_still_waits_for_them() -> None:
    # b found a's 40 blocks in the cache when it was booked: they are computed by a's prefill.
    # When a's client hangs up, that work is still needed before b's turn, so it stays.
    model = PracticeModel(Settings())
    a = model.book(prompt(opening(1)), 1, 0.0, 0.0)
    b = model.book(prompt([*opening(1), 99]), 1, 0.0, 0.0)
    assert b.cached_tokens == 40 * 64
    before = b.first_token_at
    assert model.cancel(a, now=0.3) is False  # nothing moved
    assert b.first_token_at == pytest.approx(before) == pytest.approx(0.015 + 41 * BLOCK_S)


def test_only_the_blocks_later_prompts_found_are_kept_and_the_rest_leave_the_cache() -> None:
    model = PracticeModel(Settings())
    first = model.book(prompt(opening(9)), 1, 0.0, 0.0)  # prefills 0.015 .. 1.039
    a = model.book(prompt(opening(1)), 1, 0.0, 0.0)  # waits behind it
    b = model.book(prompt([*opening(1)[:10], 99]), 1, 0.0, 0.0)  # found a's first 10 blocks
    assert b.cached_tokens == 10 * 64
    assert model.cancel(a, now=0.3)  # a keeps 10 blocks of work for b; 30 go back
    assert a.prefill.end == pytest.approx(first.first_token_at + 10 * BLOCK_S)
    assert b.prefill.start == pytest.approx(a.prefill.end)
    # The 30 blocks nobody computed are gone: a new prompt with a's opening pays for them.
    again = model.book(prompt(opening(1)), 1, 5.0, 5.0)
    assert again.cached_tokens == 10 * 64


def test_a_prompt_cancelled_half_way_leaves_the_blocks_it_computed_in_the_cache() -> None:
    model = PracticeModel(Settings())
    a = model.book(prompt(opening(1)), 1, 0.0, 0.0)  # starts at 0.015
    model.cancel(a, now=0.015 + 12.5 * BLOCK_S)  # 12 whole blocks computed, half of the 13th
    assert model.book(prompt(opening(1)), 1, 5.0, 5.0).cached_tokens == 12 * 64


def test_a_cancel_on_one_replica_moves_only_that_replicas_queue() -> None:
    model = PracticeModel(Settings(replicas=2, route="round-robin"))
    books = [model.book(prompt(opening(i)), 1, 0.0, 0.0) for i in range(4)]  # 0, 2 on r0; 1, 3 on r1
    assert [b.replica.index for b in books] == [0, 1, 0, 1]
    model.cancel(books[0], now=0.1)
    assert books[2].prefill.start == pytest.approx(0.1)
    assert books[3].prefill.start == pytest.approx(books[1].first_token_at)  # untouched


# ── End to end: a real server, real clients that hang up ─────────────────────

CLOSE_AFTER_S = 0.3
QUEUED = 5


def long_prompt(i: int) -> str:
    """About 3,000 tokens (12,000 characters), different for each i from its first block on."""
    return (f"request {i}: " + "the refund policy says " * 600)[:12_000]


def hang_up(url: str, i: int, stream: bool, after_s: float = CLOSE_AFTER_S) -> None:
    """Send a long prompt and close the connection after `after_s` (the SDK's own timeout)."""
    api = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=after_s)
    messages = [{"role": "user", "content": long_prompt(i)}]
    try:
        if stream:
            for _ in api.chat.completions.create(model="felab-practice", messages=messages, stream=True):
                pass
        else:
            api.chat.completions.create(model="felab-practice", messages=messages)
    except openai.APITimeoutError:
        return
    raise AssertionError("the reply came before the client hung up: the test shows nothing")


def tiny_wait(url: str, stream: bool) -> float:
    """Seconds until a tiny request's first token (streamed) or whole reply (not)."""
    api = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
    messages = [{"role": "user", "content": "hi"}]
    t0 = time.perf_counter()
    if stream:
        for chunk in api.chat.completions.create(
            model="felab-practice", messages=messages, max_tokens=1, stream=True
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                break
    else:
        api.chat.completions.create(model="felab-practice", messages=messages, max_tokens=1)
    return time.perf_counter() - t0


class Together:
    """Jobs started in threads, a hundredth of a second apart (in this order); join() re-raises
    the first thing that went wrong in any of them."""

    def __init__(self, *jobs: Callable[[], object]) -> None:
        self.errors: list[BaseException] = []
        self.threads = []
        for job in jobs:
            self.threads.append(threading.Thread(target=self._run, args=(job,), daemon=True))
            self.threads[-1].start()
            time.sleep(0.01)

    def _run(self, job: Callable[[], object]) -> None:
        try:
            job()
        except BaseException as exc:  # handed to the test by join()
            self.errors.append(exc)

    def join(self, timeout_s: float = 30) -> None:
        for t in self.threads:
            t.join(timeout=timeout_s)
        assert not any(t.is_alive() for t in self.threads), "a client did not finish"
        if self.errors:
            raise self.errors[0]


def booked_tokens(url: str) -> float:
    return metrics.scrape(url)["vllm:prompt_tokens_total"]


@pytest.mark.parametrize("replicas", [1, 2])
@pytest.mark.parametrize("stream", [True, False])
def test_hung_up_clients_give_the_lane_back(replicas: int, stream: bool) -> None:
    # 5 queued 3,000-token prompts take ~6 s of prefill (1.2 s each). Every client closes at
    # 0.3 s, before its first token. Margins: the next tiny request waits ~0.02 s when the
    # time is given back and ~6 s (one replica; ~3.6 s with two) when it is not; the test
    # allows 1.5 s. The gauges must read 0 and 0 once the clients are gone (polled for 2 s).
    flags = ("--replicas", str(replicas), "--route", "round-robin")
    with practice_server(*flags) as url:
        Together(*(lambda i=i: hang_up(url, i, stream) for i in range(QUEUED))).join()
        assert booked_tokens(url) > QUEUED * 2900  # every long prompt was booked
        assert tiny_wait(url, stream) < 1.5
        deadline = time.monotonic() + 2.0
        while (m := metrics.scrape(url))["vllm:num_requests_running"] or m["vllm:num_requests_waiting"]:
            assert time.monotonic() < deadline, m
            time.sleep(0.05)


@pytest.mark.parametrize("stream", [True, False])
def test_a_hang_up_after_a_body_larger_than_the_read_buffer_is_seen(stream: bool) -> None:
    # uvicorn stops reading a connection while more than 64 KiB of body wait to be read; a
    # reply waiting for its first token reads nothing, so the server must read on by itself to
    # see the client close. A ~32,000-token prompt (128 KB, in writes larger than 64 KiB) takes
    # ~12.8 s of prefill; its client closes at 0.3 s. The next tiny request waits ~0.02 s when
    # the hang-up is seen and ~12.5 s when it is not; allowed: 3 s.
    with practice_server() as url:
        api = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=CLOSE_AFTER_S)
        messages = [{"role": "user", "content": "the refund policy says " * 5_600}]
        with pytest.raises(openai.APITimeoutError):
            reply = api.chat.completions.create(model="felab-practice", messages=messages, stream=stream)
            for _ in reply if stream else ():
                pass
        assert booked_tokens(url) > 31_000  # it was booked before its client left
        assert tiny_wait(url, stream) < 3.0


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_queued_behind_hung_up_ones_moves_up(stream: bool) -> None:
    # 4 long prompts are queued (~4.8 s of prefill) and their clients close at 1 s. A request
    # that arrives while they are queued, and waits for its reply, must be served soon after
    # 1 s, streamed or in one piece. Margins: it waits ~1 s when the time is given back, ~4.8 s
    # when it is not; the test allows 3 s. The gauges say 1 running and 3 waiting meanwhile.
    with practice_server() as url:
        clients = Together(*(lambda i=i: hang_up(url, i, True, after_s=1.0) for i in range(4)))
        # Polled until the first has begun its prefill (for the 15 ms of their overhead all four
        # are waiting: a scrape then once read 0 running and 4 waiting, under 4 test workers).
        deadline = time.monotonic() + 0.8
        gauges = ("vllm:num_requests_running", "vllm:num_requests_waiting")
        while tuple((m := metrics.scrape(url))[g] for g in gauges) != (1, 3):
            assert time.monotonic() < deadline, m
            time.sleep(0.02)
        assert tiny_wait(url, stream) < 3.0
        clients.join()
