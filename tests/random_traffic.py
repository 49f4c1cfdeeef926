"""Random traffic on a practice model, for tests that check an invariant after every event."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from felab.mock_server.booking import Booking, PracticeModel, Prompt


def random_traffic(
    model: PracticeModel,
    rng: random.Random,
    events: int,
    gap_s: float,
    hang_up: float,
    request: Callable[[int], tuple[Prompt, int]],
) -> Iterator[int]:
    """`events` events, each up to `gap_s` after the last: first the replies over by then are sent
    whole (`finish`), then a live request hangs up (with chance `hang_up`) or request i
    (`request(i)`: its prompt and reply tokens) is booked. Yields i after each event."""
    live: list[Booking] = []
    now = 0.0
    for i in range(events):
        now += rng.random() * gap_s
        for b in [b for b in live if b.reply_end <= now]:
            model.finish(b)
            live.remove(b)
        if live and rng.random() < hang_up:
            model.cancel(live.pop(rng.randrange(len(live))), now)
        else:
            prompt, reply = request(i)
            live.append(model.book(prompt, reply, now, now))
        yield i
