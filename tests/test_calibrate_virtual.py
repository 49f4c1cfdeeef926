"""Calibrate end to end on a virtual clock: its own probes and fit, against the practice server's model.

The probes (probes.py), the plan (plan.py), the fit (fit.py) and the profile (profile.py) run
as they do against a real server; only the server is the practice server's own booking model
(felab/mock_server/booking.py, what every practice server runs) answered on a virtual clock:
each request is booked at the clock's time, its reply's times read from the booking, and the
clock moved to its end. So the measurements are exact, the machine's speed plays no part, and
calibrate must give back the settings the model was made with: no band wide enough for a
busy machine, which is where the real-HTTP version of this test failed (issue 29: overhead
0.0 against 10 +- 8 ms under load). The real-HTTP test (test_calibrate.py) now checks only
that calibrate completes and writes a profile the practice server reads.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re

import pytest
from test_calibrate import KNOWN  # the settings its real-HTTP test calibrates, here on a virtual clock

from felab.calibrate import command, counting
from felab.calibrate import profile as prof
from felab.calibrate.plan import Measurements, Plan, make_plan, measure, speed_of
from felab.calibrate.probes import Prober, Sample, ServerFacts
from felab.errors import FelabError
from felab.mock_server.booking import Booking, PracticeModel, Prompt
from felab.mock_server.cache import prompt_keys
from felab.mock_server.config import DEFAULTS, Settings
from felab.targets import Target

GAP_S = 0.001
"""The virtual clock's pause between one reply's end and the next request (a client's turn)."""


class VirtualProber(Prober):
    """A Prober whose server is a PracticeModel on a virtual clock (no HTTP, no threads' timing)."""

    def __init__(self, settings: Settings, limit: int) -> None:
        target = Target("mock", "http://virtual/v1", settings.model, "not-needed", False)
        super().__init__(target, None, limit, lambda line: None, seed=7)  # type: ignore[arg-type]
        self.model, self.settings, self.now = PracticeModel(settings), settings, 0.0

    def _book(self, messages: list[dict], max_tokens: int) -> Booking:
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages) + "<|assistant|>\n"
        tokens, keys = prompt_keys(text, self.settings.chars_per_token, self.settings.block_tokens)
        return self.model.book(Prompt(tokens, keys), max_tokens, self.now, self.now)

    def _sample(self, messages: list[dict], b: Booking) -> Sample:  # type: ignore[override]
        first = 1000 * b.ttft_s
        gaps = [1000 * (b.token_at(i) - b.token_at(i - 1)) for i in range(1, b.reply_tokens)]
        chars = sum(len(m["role"]) + 6 + len(m["content"]) for m in messages) + len("<|assistant|>\n")
        total = 1000 * (b.reply_end - b.arrival)
        return Sample(chars, b.prompt_tokens, b.cached_tokens, first, b.reply_tokens, gaps, total)

    def _stream(self, messages: list[dict], max_tokens: int) -> Sample:
        b = self._book(messages, max_tokens)
        self.model.finish(b)
        self.now = b.reply_end + GAP_S
        return self._sample(messages, b)

    def together(self, batches: list[list[dict]], max_tokens: int = 2) -> list[Sample]:
        self._take(len(batches))
        booked = [self._book(m, max_tokens) for m in batches]  # all arrive at this moment
        for b in booked:
            self.model.finish(b)
        self.now = max(b.reply_end for b in booked) + GAP_S
        return [self._sample(m, b) for m, b in zip(batches, booked, strict=True)]


LLAMA_LIKE = {
    "batch_tokens": 2048,
    "seats": 4,
    "context_tokens": 32_768,
    "ubatch_tokens": 512,
    "tile_tokens": 64,
    "untiled_ns": 600.0,
}
"""The kit's llama-server (-c 32768 -np 4): its batches, its seats, its slow last piece of few rows.
(Its context: with the default 131,072, the registry's decode step puts a context term of 2,000 ns
over the practice server's bound on the longest request, once the twin reads the registry.)"""
ONE_STREAM = Plan(6400, decode_streams=(1,))
"""The plan with decode measured one stream at a time. The booking model fixes a stream's count
when it is booked (the first of 4 sent at once is booked alone, the last with 3 decoding), so
streams sent at once do not share each step as the registry's decode step has them (k streams,
each the others' context too): with a context term, no fit of the registry's terms gives those
gaps back exactly. The exact sets measure decode alone; the streams at once are checked where
the context term is 0 (`test_streams_at_once_give_no_slowdown_where_the_model_has_none`)."""


def calibrated(settings: dict, plan: Plan = ONE_STREAM) -> prof.Profile:
    """Calibrate's whole pipeline against a practice-server model with these settings."""
    s = dataclasses.replace(DEFAULTS, **settings)
    seats = s.seats
    facts = ServerFacts("felab practice server", seats, s.context_tokens // seats if seats else None)
    prober = VirtualProber(s, plan.announced())
    m = measure(prober, plan, facts)
    target = Target("mock", "http://virtual/v1", s.model, "not-needed", False)
    return prof.build(m, target, plan, prober.now, prober.used, delivery_ms=0.0)


EXACT = [
    "overhead_ms",
    "prefill_tps",
    "prefill_attention_ns",
    "cached_token_us",
    "decode_tps",
    "decode_context_ns",
]
"""The timed settings every set gives back: equal to the model's after the profile's rounding to 3
significant digits (so within 0.05% before it), no band."""
ATTENTION = {"prefill_attention_ns": 36.0}
"""llama.cpp's attention on a CPU (the kit's tiny model): with a cached-token cost, only a twin
that adds the two (the registry) is given back exactly."""


@pytest.mark.parametrize(
    "more",
    [
        {},
        LLAMA_LIKE,
        LLAMA_LIKE | ATTENTION,
    ],
    ids=["none", "llama-like", "llama-like-attention"],
)
def test_calibrate_gives_back_the_settings_of_the_model_it_measured(more: dict) -> None:
    truth = dataclasses.replace(DEFAULTS, **KNOWN | more)
    got = calibrated(KNOWN | more)
    st = got.settings
    # Every timed term, cached_token_us and decode_context_ns non-zero among them.
    assert {k: st[k] for k in EXACT} == {
        "overhead_ms": 10.0,
        "prefill_tps": 10_000.0,
        "prefill_attention_ns": truth.prefill_attention_ns,
        "cached_token_us": 20.0,
        "decode_tps": 200.0,
        "decode_context_ns": 2000.0,
    }
    assert st["chars_per_token"] == 4.0
    assert got.fit["ttft_residual_max_pct"] < 1e-6 and got.fit["held_out_error_pct"] < 1e-6
    assert "warnings" not in got.fit  # nothing doubtful in exact measurements
    assert st["decode_slowdown"] == 0.0  # (not measured: one stream at a time)
    assert st["batch_tokens"] == more.get("batch_tokens", "none")
    if more:
        assert st["seats"] == 4
        assert (st["ubatch_tokens"], st["tile_tokens"], st["untiled_ns"]) == (512, 64, 600.0)
        assert st["batch_slowdown"] == 0.0
    else:
        assert "tile_tokens" not in st and "batch_slowdown" not in st
    # What was left out, and said: the one term measured that the model does not have (attention,
    # where it is 0; it came out within rounding of 0, and held out it predicts nothing more).
    # And masked attention, which a causal engine does not have: the openings tell it apart, and
    # it comes out at 0 (or a rounding below), and is said.
    named = {line.split()[0] for line in got.measured["terms_left_out"]}
    assert named == {"masked_attention_ns"} | (
        set() if truth.prefill_attention_ns else {"prefill_attention_ns"}
    )
    assert (st["cache_mode"], st["block_tokens"]) == ("blocks", 32)  # the practice server's own cache
    # The reference probe: one cold length near 3/10 of the longest, its repeats' times.
    ref = got.measured
    assert abs(ref["reference_tokens"] - 0.3 * 6400) < 200 and len(ref["reference_ttft_ms"]) == 5


def test_streams_at_once_give_no_slowdown_where_the_model_has_none() -> None:
    # The whole plan, 1, 2 and 4 streams at once: with no context term, every gap is the same.
    got = calibrated(KNOWN | {"decode_context_ns": 0.0}, Plan(6400)).settings
    assert (got["decode_tps"], got["decode_slowdown"], got["decode_context_ns"]) == (200.0, 0.0, 0.0)
    assert (got["overhead_ms"], got["prefill_tps"], got["cached_token_us"]) == (10.0, 10_000.0, 20.0)


def test_the_virtual_prober_is_the_practice_servers_model() -> None:
    # The clock is the model's: a cold 2,000-token prompt alone takes the overhead and its prefill.
    s = dataclasses.replace(DEFAULTS, **KNOWN)
    p = VirtualProber(s, 10)
    text = random.Random(0).choice("abc") * 8000
    got = p.call([{"role": "user", "content": text}])
    assert got.ttft_ms == pytest.approx(10.0 + 1000 * got.prompt_tokens / 10_000)
    assert p.now > got.total_ms / 1000


@pytest.mark.parametrize("host", [0, 32_768], ids=["no-host-cache", "host-cache"])
def test_calibrate_finds_a_cache_beyond_the_seats_and_records_it(host: int) -> None:
    # The pushed-out probe: an opening, one short prompt per seat (each takes the seat free
    # longest, the last the opening's), the opening again. A twin of llama-server with its
    # host-memory cache gives it back cached; one without reads it again. Calibrate records the
    # tier (at the server's whole context, llama.cpp's floor) only in the first case.
    llama = {"cache_mode": "seat-prefix", "block_tokens": 2, "context_tokens": 32_768}
    s = dataclasses.replace(DEFAULTS, **KNOWN | LLAMA_LIKE | llama, host_cache_tokens=host)
    facts = ServerFacts("felab practice server", 4, 8192)
    plan = Plan(6400, push_seats=4)
    prober = VirtualProber(s, plan.announced())
    m = measure(prober, plan, facts)
    assert m.pushed is not None and m.pushed.seats == 4
    back, opening = m.pushed.back, m.pushed.opening
    target = Target("mock", "http://virtual/v1", s.model, "not-needed", False)
    got = prof.build(m, target, plan, prober.now, prober.used, delivery_ms=0.0)
    if host:
        assert back.cached_tokens is not None and back.cached_tokens > 0.9 * opening.prompt_tokens
        assert got.settings["host_cache_tokens"] == 32_768
        assert got.measured["host_cache"] == "yes"
    else:
        assert back.cached_tokens is not None and back.cached_tokens < 0.01 * opening.prompt_tokens
        assert "host_cache_tokens" not in got.settings
        assert got.measured["host_cache"] == "no"
    assert prober.used <= plan.requests()


def test_the_requests_it_asks_for_with_seats_are_enough() -> None:
    # Too small a --max-requests names the least that works: with seats, that counts the
    # pushed-out probe (2 + seats requests), so following the advice literally runs.
    facts = ServerFacts("llama.cpp", 4, 8192)
    with pytest.raises(FelabError, match="calibrate needs at least") as refused:
        make_plan(facts, 5)
    least = int(re.search(r"at least (\d+) requests", refused.value.message).group(1))  # type: ignore[union-attr]
    assert make_plan(facts, least).push_seats == 4


@pytest.mark.parametrize("allowed", [49, 60, 100, 140])
def test_max_requests_caps_everything_calibrate_sends(allowed: int) -> None:
    # The plan's requests and the count of tokens after it (counting.REQUESTS) together stay
    # within --max-requests: the cap a learner sets on a paid target is on all it sends. Before:
    # --max-requests 32 announced 42 (the plan checked alone).
    facts = ServerFacts("llama.cpp", 4, 8192)
    total = make_plan(facts, allowed, besides=counting.REQUESTS).announced() + counting.REQUESTS
    assert total <= allowed
    with pytest.raises(FelabError, match=r"at least (\d+) requests") as refused:
        make_plan(facts, 48, besides=counting.REQUESTS)
    assert "Allow 49 or more" in refused.value.message


# ── the time bound: a server too slow to calibrate in time is stopped early ──

SLOW = KNOWN | {"prefill_tps": 100.0}
"""A server that reads a cold 3,000-token prompt in 30 s (10 ms, then 100 tokens a second)."""


def again(minutes: int) -> str:
    return command.rerun_command("mock", "http://virtual/v1", max_minutes=minutes)


def bounded(settings: dict, max_minutes: float) -> tuple[VirtualProber, Plan, Measurements]:
    """The whole plan with calibrate's time bound, on a virtual clock (no seats: a plain server)."""
    s = dataclasses.replace(DEFAULTS, **settings)
    facts, plan = ServerFacts("felab practice server"), Plan(6400)
    prober = VirtualProber(s, plan.announced())
    m = measure(prober, plan, facts, command.bound(plan, facts, max_minutes, again, prober))
    return prober, plan, m


def test_a_server_too_slow_for_the_bound_stops_after_its_first_prompts_with_one_message() -> None:
    # Before: no bound, the plan ran on (about 13 minutes of this server's time, here virtual).
    with pytest.raises(FelabError) as stopped:
        bounded(SLOW, 10)
    said = " ".join(stopped.value.message.split())
    # After the first call and two cold lengths (5 each): 11 of the plan's 98 requests.
    assert "It stopped after 11 requests; nothing was written." in said
    assert Plan(6400).requests() > 8 * 11
    found = re.search(r"A cold prompt of ([\d,]+) tokens took ([\d.]+) s", said)
    assert found, said
    tokens, seconds = int(found[1].replace(",", "")), float(found[2])
    assert 300 < tokens < 500 and seconds == round(0.010 + tokens / 100, 2)  # 10 ms, then 100 tokens/s
    minutes = float(re.search(r"would take about ([\d.]+) minutes", said)[1])  # type: ignore[index]
    assert minutes > 10
    assert "too slow to calibrate within --max-minutes 10." in said
    advised = "python -m felab calibrate --target mock --base-url http://virtual/v1 --max-minutes "
    assert f"`{advised}{math.ceil(minutes * command.SPARE)}`" in said
    assert "Or calibrate a faster deployment of it" in said  # it reports no context to shrink


def test_the_bound_it_advises_lets_the_same_server_through_and_its_projection_held() -> None:
    with pytest.raises(FelabError) as stopped:
        bounded(SLOW, 10)
    raised = int(re.search(r"--max-minutes (\d+)`", stopped.value.message)[1])  # type: ignore[index]
    prober, plan, m = bounded(SLOW, raised)
    # The whole plan, but the cold lengths it leaves out on a server this slow (over 8 s each).
    assert len(m.decode) == 3 and len(m.together) == 4 and len(m.cold) == 3
    assert prober.used == plan.requests() - plan.repeats * (len(plan.cold_lengths) - 3)
    # The projection was honest: the plan took what it said (the virtual clock), within what the
    # line leaves out (cached tokens' cost, replies' context: a few seconds of some 12 minutes).
    projected = plan.projected_s(speed_of(m.cold[: plan.speed_at + 1]))
    assert prober.now == pytest.approx(projected, rel=0.05)


def test_a_fast_server_is_not_stopped_and_its_duration_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    prober, plan, _ = bounded(KNOWN, 10)
    assert prober.used == plan.requests()
    said = capsys.readouterr().out
    assert re.search(
        r"this server read [\d,]+ tokens in 0\.0\d s: calibrating it takes about 0\.\d minutes", said
    )


def test_calibrating_takes_at_most_2_minutes_where_3000_tokens_take_1_s() -> None:
    # The target, on the virtual clock: a cold 3,000-token prompt in 1 s (no overhead).
    prober, _, _ = bounded(KNOWN | {"overhead_ms": 0.0, "prefill_tps": 3000.0}, 2)
    assert prober.now < 120


MLX_LIKE = {
    "batch_tokens": 2048,
    "step_policy": "mlx",
    "prefill_attention_ns": 36.0,
    "masked_attention_ns": 40.0,
}
"""mlx_lm.server on a CPU: every prompt waiting read at once, each 2,048 tokens a step, prefill
first, and each piece's attention a whole rectangle (the masked term)."""


def test_calibrate_gives_back_mlxs_batches_and_its_masked_attention() -> None:
    # The prompts sent at once show MLX's batches; the terms are then fitted again with every prompt
    # in pieces of 2,048 (the longest cold prompt, 6,400 tokens, is 4 of them), and the questions
    # after an opening tell masked attention from attention: both come back exactly.
    st = calibrated(KNOWN | MLX_LIKE).settings
    assert (st["batch_tokens"], st["step_policy"], st["batch_slowdown"]) == (2048, "mlx", 0.0)
    assert (st["prefill_attention_ns"], st["masked_attention_ns"]) == (36.0, 40.0)
    assert {k: st[k] for k in EXACT if k != "prefill_attention_ns"} == {
        "overhead_ms": 10.0,
        "prefill_tps": 10_000.0,
        "cached_token_us": 20.0,
        "decode_tps": 200.0,
        "decode_context_ns": 2000.0,
    }
