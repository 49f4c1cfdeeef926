"""Hung-up prompts leave nothing behind once nobody needs their work (issue 31, row 1).

When a client hangs up during its prefill, the lane keeps only the part of its work that live
prompts booked after it found in the cache (booking.py, `PracticeModel.cancel`). A prompt that
merely *found* blocks (another prompt computes them) has nothing of its own to keep for anyone,
and a kept part is weighed again each time a prompt it was kept for leaves. So, whatever came
and went, once every request is gone the next one is served as on an idle server.

On the virtual clock (no server, no sleeping): random openings shared by random prompts, chains
of prompts each extending an earlier one, random block sizes, seats, seat-prefix caching (and
the host-memory tier behind it), batches and replicas, with random hang-ups and finished
replies in between.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from felab.mock_server.booking import Booking, PracticeModel, Prompt
from felab.mock_server.cache import chained
from felab.mock_server.config import Settings
from felab.mock_server.loop import Loop


def prompt(blocks: list[str], block: int, extra: int) -> Prompt:
    """A prompt of these blocks (chained keys, as the server hashes text) and `extra` tokens more."""
    return Prompt(len(blocks) * block + extra, chained(blocks))


def random_settings(rng: random.Random) -> Settings:
    seats = rng.choice([None, 1, 2, 4])
    s = Settings(
        block_tokens=rng.choice([16, 64, 512]),
        seats=seats,
        cache_mode="seat-prefix" if seats and rng.random() < 0.4 else "blocks",
        batch_tokens=rng.choice([None, None, 256, 2048]),
        batch_slowdown=rng.choice([0.0, 0.05]),
        replicas=rng.choice([1, 1, 2, 3]),
        route=rng.choice(["random", "round-robin", "prefix"]),
        prefill_attention_ns=rng.choice([0.0, 35.0]),
        seed=rng.randrange(1000),
    )
    if s.cache_mode == "seat-prefix" and s.seed % 2:  # half of those with the host-memory tier behind
        return dataclasses.replace(s, host_cache_tokens=4096, host_restore_us=0.3)  # (no draw more)
    return s


def lane_free_at(model: PracticeModel, now: float) -> float:
    """When every replica's lane is free after `now`, on an idle server: a step formed before
    `now` is computed whole (llama.cpp cannot take a prompt out of a step under way)."""
    ends = [now]
    for r in model.fleet.replicas:
        if isinstance(r.lane, Loop):
            ends += [step.end for step in r.lane.steps if step.start < now]
    return max(ends)


def storm(seed: int) -> tuple[Settings, PracticeModel, float]:
    """Random bookings, hang-ups and finished replies, then everyone left hangs up: the model,
    and the time the last one left."""
    rng = random.Random(seed)
    s = random_settings(rng)
    block = s.block_tokens
    model = PracticeModel(s)
    openings = [[f"o{seed}/{i}/{k}" for k in range(rng.randint(1, 12))] for i in range(rng.randint(1, 3))]
    seen: list[list[str]] = [*openings]
    live: list[Booking] = []
    now = 0.0
    for n in range(rng.randint(5, 40)):
        now += rng.choice([0.0, rng.random() * 0.05])
        for b in [b for b in live if b.reply_end <= now]:  # replies over by now: sent whole
            model.finish(b)
            live.remove(b)
        if live and rng.random() < 0.3:
            b = live.pop(rng.randrange(len(live)))
            model.cancel(b, now)
            continue
        base = rng.choice(seen)  # an opening, or an earlier prompt: a chain
        blocks = base[: rng.randint(0, len(base))] + [f"p{seed}/{n}/{k}" for k in range(rng.randint(0, 6))]
        seen.append(blocks)
        extra = rng.randrange(block)
        if not blocks and not extra:
            extra = 1
        live.append(model.book(prompt(blocks, block, extra), rng.randint(1, 40), now, now))
    rng.shuffle(live)
    for b in live:  # everyone still here hangs up, some at once, some a little later
        now += rng.choice([0.0, rng.random() * 0.01])
        model.cancel(b, now)
    return s, model, now


@pytest.mark.parametrize("seed", range(300))
def test_after_any_storm_of_hang_ups_the_next_request_is_served_as_on_an_idle_server(seed: int) -> None:
    s, model, now = storm(seed)
    assert not model.live
    at = lane_free_at(model, now)
    tiny = Prompt(s.block_tokens + 7, chained([f"tiny/{seed}"]))  # shares nothing with the storm
    got = model.book(tiny, 1, at, at)
    idle = PracticeModel(s).book(tiny, 1, at, at)
    assert got.cached_tokens == idle.cached_tokens == 0
    assert got.ttft_s == pytest.approx(idle.ttft_s, rel=1e-9, abs=1e-9), s


@pytest.mark.parametrize(
    ("clients", "block", "random_lengths"), [(100, 64, False), (30, 512, False), (300, 64, True)]
)
def test_clients_sharing_an_opening_that_all_hang_up_leave_the_lane_idle(
    clients: int, block: int, random_lengths: bool
) -> None:
    # The shape: clients sharing a 6,400-token opening each ask a question, then all hang
    # up in random order; the next tiny request waited 519 ms (2,375 ms with 512-token blocks)
    # where an idle server takes 17.4 ms, for prompts that merely found the opening held the lane.
    rng = random.Random(clients)
    s = Settings(block_tokens=block)
    model = PracticeModel(s)
    opening = [f"opening/{k}" for k in range(6400 // block)]
    now, booked = 0.0, []
    for i in range(clients):
        shared = opening[: rng.randint(1, len(opening))] if random_lengths else opening
        asked = prompt([*shared, f"question/{i}"], block, 20)
        booked.append(model.book(asked, 50, now, now))
        now += 0.001
    rng.shuffle(booked)
    for b in booked:
        now += 0.001
        model.cancel(b, now)
    tiny = Prompt(10, [])
    assert model.book(tiny, 1, now, now).ttft_s == pytest.approx(0.015 + 10 / 2500)
