"""A hang-up storm on a llama.cpp twin (seats and batches) costs what it changes (issue 31, row 2).

Before, each hang-up admitted every queued request again and planned every batch again, once
per request and up to len(live) + 1 times over: 100 queued clients hanging up took 9.6 s of
server CPU. Now a request waiting for a seat is planned when a seat is free for it, so a
hang-up plans the few requests it lets start. Counted here on the virtual clock (the batches
the lane plans), never by the wall clock; the real-time figure is `make bench`'s
(python -m felab.bench.hangups), which runs here at a tiny size.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time

import pytest
from random_traffic import random_traffic

from felab.bench.hangups import TWIN, first_token, open_stream
from felab.mock_server.booking import Booking, PracticeModel, Prompt
from felab.mock_server.cache import chained
from felab.mock_server.config import Settings
from felab.mock_server.launch import practice_server
from felab.mock_server.loop import Loop
from felab.paths import KIT_ROOT


class CountingLane(Loop):
    """The real loop, counting the steps it plans (its work: each is a step formed on paper)."""

    planned = 0

    def _plan(self, now: float, since: float, newcomers: list) -> None:
        before = len(self.steps)
        super()._plan(now, since, newcomers)
        CountingLane.planned += max(0, len(self.steps) - before) + len(self.replanned)


def twin(**changes: object) -> PracticeModel:
    s = Settings(**{**TWIN, **changes})  # type: ignore[arg-type]
    model = PracticeModel(s)
    for r in model.fleet.replicas:
        r.lane = CountingLane(s.batch_tokens or 1, s.timing)
    return model


def client(i: int, tokens: int = 2000) -> Prompt:
    return Prompt(tokens, chained(f"{i}/{k}" for k in range(tokens // 16)))


def storm(clients: int) -> tuple[PracticeModel, list[Booking], float, int]:
    """`clients` queued ~2,000-token requests, four more after them; the first hang up 5 ms apart,
    first sent first. The model, the four that stay, the last hang-up's time, the batches planned
    during the storm."""
    model = twin()
    rng = random.Random(clients)
    leaving = [model.book(client(i, rng.randint(1900, 2100)), 200, 0.0, 0.0) for i in range(clients)]
    staying = [model.book(client(clients + k), 200, 0.0, 0.0) for k in range(4)]
    CountingLane.planned = 0
    now = 0.0
    for b in leaving:
        now += 0.005
        model.cancel(b, now)
    return model, staying, now, CountingLane.planned


def test_a_storm_of_a_thousand_hang_ups_plans_a_few_batches_each() -> None:
    _, _, _, planned = storm(1000)
    assert planned <= 20 * 1000  # was about 1,000 plans of up to 1,000 prompts for each hang-up


def test_the_work_grows_with_the_clients_not_their_square() -> None:
    # 100 clients took 9.6 s of server CPU (50: 0.7 s): the batches planned, per hang-up, stay flat.
    per = {n: storm(n)[3] / n for n in (50, 100, 200)}
    assert per[200] <= 2 * per[50] + 5, per


def test_the_requests_that_stay_are_served_as_on_an_idle_twin_after_the_storm() -> None:
    model, staying, last, _ = storm(300)
    lane = model.fleet.replicas[0].lane
    assert isinstance(lane, Loop)
    free = max([last, *(s.end for s in lane.steps if s.start < last)])  # a step under way is computed whole
    idle = twin()
    alone = [idle.book(client(300 + k), 200, free, free) for k in range(4)]
    # They were admitted as the last ones left (by `last`): no later than on a twin idle once the
    # step under way then is done (here one holding two that left, formed at 1.455 s, to 1.577 s).
    assert max(b.first_token_at for b in staying) <= max(b.first_token_at for b in alone) + 1e-9
    assert all(b.seat is not None and b.prefill.ready_at <= last for b in staying)
    assert not model.parked[0]


def test_a_parked_request_is_planned_when_a_reply_ends_and_frees_its_seat() -> None:
    # One seat: a hang-up parks those waiting behind the one it lets in; as each reply ends
    # (finish, at its end) the next one is admitted then, as a seat free at that time admits it.
    model = twin(seats=1)
    a, b, c, d = (model.book(client(i), 20, 0.0, 0.0) for i in range(4))
    model.cancel(a, 0.001)  # the seat is free: b takes it once its own overhead is over
    assert b.prefill.ready_at == pytest.approx(0.00156) and b.first_token_at < float("inf")
    assert c.first_token_at == d.first_token_at == float("inf")  # parked: no seat free before b ends
    model.finish(b)  # sent whole: at its reply's end
    assert c.prefill.ready_at == pytest.approx(b.reply_end) and c.first_token_at < float("inf")
    assert d.first_token_at == float("inf")
    e = model.book(client(9), 20, 0.002, 0.002)  # a newcomer waits behind d: d is planned first
    assert c.reply_end <= d.prefill.ready_at + 1e-9 and d.reply_end <= e.prefill.ready_at + 1e-9


@pytest.mark.parametrize("seed", range(1000))
def test_no_seat_holds_two_requests_at_once(seed: int) -> None:
    # Random bookings, hang-ups and replies sent whole, with seats and batches: every request
    # planned holds its seat from admission to its reply's end, and no two of them overlap.
    # (Before, 15 of 300 such runs had two on a seat at once: the re-admission went round until
    # none did, and gave up after len(live) + 1 rounds.)
    rng = random.Random(seed)
    model = twin(seats=rng.choice([1, 2, 4]), batch_tokens=rng.choice([256, 2048]), cache_mode="blocks")
    requests = random_traffic(
        model, rng, 30, 0.03, 0.3, lambda i: (client(i, rng.randint(10, 3000)), rng.randint(1, 50))
    )
    for i in requests:
        spans: dict[int, list[tuple[float, float]]] = {}
        for b in model.planned[0].values():
            assert b.seat is not None
            spans.setdefault(id(b.seat), []).append((b.prefill.ready_at, b.reply_end))
        for seat in spans.values():
            seat.sort()
            for (_, end), (start, _) in zip(seat, seat[1:], strict=False):
                assert start >= end - 1e-9, (seed, i, seat)


def test_a_live_server_serves_the_parked_requests_as_seats_free_up() -> None:
    # One seat: the first client, booked for a 100 s reply, hangs up at once; the second takes
    # the seat and the rest are parked (no planned time: they were booked for after the 100 s).
    # Each must be woken when the reply before it ends and served then, in well under the 100 s
    # (the model tells the server whose wait to wake: on_moved, at a reply's end too). At these
    # rates all three take under a second; 30 s is only a bound far below the stale 100 s.
    async def run(port: int) -> tuple[float, list[float]]:
        first = await open_stream(0, port, reply_tokens=40_000)  # 100 s at 400 tokens/s
        streams = [await open_stream(i, port, reply_tokens=20) for i in range(1, 4)]
        gone = time.monotonic()
        first[1].transport.abort()
        got = await asyncio.wait_for(asyncio.gather(*(first_token(r) for r, _ in streams)), 90)
        for _, writer in streams:
            writer.close()
        return gone, got

    flags = ("--seats", "1", "--batch-tokens", "2048", "--prefill-tps", "100000")
    with practice_server(*flags) as url:
        gone, got = asyncio.run(run(int(url.rsplit(":", 1)[1].split("/")[0])))
    assert got == sorted(got)  # one seat: first come, first served
    assert got[-1] - gone < 30, got[-1] - gone


def test_the_bench_phase_runs_at_a_tiny_size() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "felab.bench.hangups", "--clients", "20"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=KIT_ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for line in ("a hang-up storm: 20 queued", "server CPU, s", "/health worst", "targets (load average"):
        assert line in run.stdout, run.stdout
