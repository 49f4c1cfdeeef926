"""The engine loop against step sequences worked out by hand (loop.py; issue 28's tests).

Every time below comes from the cost terms (felab/mock_server/terms/), with no clock: prefill
at 10,000 tokens/s (0.1 ms a token), attention at 100 ns per new token per token it attends
to, no overhead, steps of up to 2,048 prompt tokens (-b 2048). A piece of u new tokens after c
in context costs

    u / 10,000 + 100e-9 · u · (c + u/2) s

so a cold 2,048-token piece takes 0.2048 + 0.2097152 = 0.4145152 s, and a step holding
several pieces takes the sum of theirs.
"""

from __future__ import annotations

import random

import pytest
from random_traffic import random_traffic

from felab.mock_server.booking import Booking, PracticeModel, Prompt
from felab.mock_server.config import Settings
from felab.mock_server.loop import BUDGET_S, MLX_SHOW_AFTER, EngineStep, Loop, Turn

RATES = {"prefill_tps": 10_000.0, "prefill_attention_ns": 100.0, "overhead_ms": 0.0, "batch_tokens": 2048}


def model(**more: object) -> PracticeModel:
    return PracticeModel(Settings(**{**RATES, **more}))  # type: ignore[arg-type]


def prompt(n: int, i: int) -> Prompt:
    return Prompt(n, [1000 * i + k for k in range(n // 16)])  # 16-token blocks, nothing shared


def loop_of(m: PracticeModel) -> Loop:
    lane = m.fleet.replicas[0].lane
    assert isinstance(lane, Loop)
    return lane


def parts(step: EngineStep, *bookings: Booking) -> list[tuple[str, int]]:
    """Whose tokens a step holds (a, b, c ... in the order of `bookings`) and how many."""
    names = {id(x.prefill): "abcdefgh"[i] for i, x in enumerate(bookings)}
    return [(names[id(t)], k) for t, k in step.parts]


def test_four_prompts_across_two_seats_step_by_step() -> None:
    # 4 prompts of 3,000 tokens sent at once to 2 seats, replies of 1 token (a seat is free at
    # its first token). a and b take seats 0 and 1; c waits for a's seat, d for the next.
    #  step 1 at 0:          a 2,048 (after 0)                          0.4145152 s -> 0.4145152
    #  step 2:               a 952 (after 2,048): 0.0952 + 100e-9·952·2,524   = 0.3355
    #                        b 1,096 (after 0):   0.1096 + 100e-9·1,096·548   = 0.1696608
    #                                                         -> 0.9196608: a's first token
    #  step 3: c takes a's seat (0) at 0.9196608 and, in the lower seat, goes before b:
    #                        c 2,048 (after 0)                          0.4145152 -> 1.334176
    #  step 4:               c 952 (after 2,048)  0.3354848
    #                        b 1,096 (after 1,096): 0.1096 + 100e-9·1,096·1,644 = 0.2897824
    #                                                         -> 1.9594432: c's first token
    #  step 5: d takes seat 0: d 2,048 (after 0)                        0.4145152 -> 2.3739584
    #  step 6:               d 952 (after 2,048)  0.3354848
    #                        b 808 (after 2,192): 0.0808 + 100e-9·808·2,596   = 0.2905568
    #                                                         -> 3.0: b's and d's first tokens
    m = model(seats=2, block_tokens=16)
    a, b, c, d = (m.book(prompt(3000, i), 1, 0.0, 0.0) for i in range(4))
    steps = list(loop_of(m).steps)
    assert [parts(s, a, b, c, d) for s in steps] == [
        [("a", 2048)],
        [("a", 952), ("b", 1096)],
        [("c", 2048)],
        [("c", 952), ("b", 1096)],
        [("d", 2048)],
        [("d", 952), ("b", 808)],
    ]
    ends = [0.4145152, 0.9196608, 1.334176, 1.9594432, 2.3739584, 3.0]
    assert [s.end for s in steps] == pytest.approx(ends, abs=1e-9)
    assert [x.first_token_at for x in (a, b, c, d)] == pytest.approx([0.9196608, 3.0, 1.9594432, 3.0])
    assert [x.prefill.ready_at for x in (c, d)] == pytest.approx([0.9196608, 1.9594432])
    assert a.seat is c.seat is d.seat and b.seat is not a.seat


def test_a_hang_up_mid_piece_keeps_what_it_computed_and_leaves_the_next_step() -> None:
    # a and b, 3,000 tokens each, sent at once with no seats. Planned: step 1 a's 2,048; step 2
    # a's 952 and b's 1,096 (-> 0.9196608); step 3 b's 1,904 after 1,096: 0.1904 +
    # 100e-9·1,904·2,048 = 0.5803392 (-> 1.5). a hangs up at 0.1, during step 1: that step is
    # computed whole (a's 2,048 tokens stay cached: 128 blocks of 16), and a leaves step 2:
    #  step 2: b 2,048 (after 0)       0.4145152 -> 0.8290304
    #  step 3: b 952 (after 2,048)     0.3354848 -> 1.1645152: b's first token, 0.3355 s earlier
    m = model(block_tokens=16)
    a, b = (m.book(prompt(3000, i), 1, 0.0, 0.0) for i in range(2))  # (replies of 1: no decode)
    assert b.first_token_at == pytest.approx(1.5)
    m.cancel(a, now=0.1)
    lane = loop_of(m)
    assert [parts(s, a, b) for s in lane.steps] == [[("a", 2048)], [("b", 2048)], [("b", 952)]]
    assert b.first_token_at == pytest.approx(1.1645152)
    assert isinstance(a.prefill, Turn) and lane.formed_tokens(a.prefill, 0.1) == 2048
    # The same prompt again at 1.2: its first 2,048 tokens are cached, it reads the other 952
    # in one step after them: 0.3354848 -> 1.5354848.
    again = m.book(prompt(3000, 0), 1, 1.2, 1.2)
    assert again.cached_tokens == 2048
    assert again.first_token_at == pytest.approx(1.2 + 0.3354848)


def test_decode_streams_share_a_step_with_a_prompt_piece_and_their_tokens_wait_for_it() -> None:
    # a (1,000 tokens) and c (500) sent at 0 share step 1: 0.15 + 100e-9·(1,000·500 + 500·250)
    # = 0.2125 s, both first tokens then. Each writes a reply of 100 tokens, at a mean context of
    # its prompt and half the reply before a token (step.reply_context: 1,049 and 549). Between
    # steps a token comes its gap after the one before: a was booked alone, a decode step of its
    # stream, 1/400 + 100e-9·1,049 (decode_context_ns 100) = 0.0026049 s on average; c beside a's
    # stream, 1/400·(1 + 0.5) + 100e-9·549 = 0.0038049. Each gap is the context term of one token
    # more than the one before (a: 1e-7 s, c with 2 streams: 2e-7), around that mean: a's token k
    # comes 0.0026049 + 1e-7·(k − 1 − 49) = 0.0025999 + 1e-7·k after k − 1; c's, 0.0037949 + 2e-7·k.
    # b (3,000 tokens) comes at 0.3. By then a wrote tokens 1 to 33 (33·0.0025999 + 1e-7·561 =
    # 0.0858528 after 0.2125) and c 1 to 23 (23·0.0037949 + 2e-7·276 = 0.0873379); each writes its
    # next in b's step, at its end, and they take 2 of the 2,048 tokens (llama-server adds them to
    # its batch before prompts):
    #   b 2,046 (after 0): 0.2046 + 100e-9·2,046·1,023 = 0.4139058
    #   2 streams: 1/400 + 0.5/400·(2 − 1) + 100e-9·(1,049 + 549) = 0.0039098
    #                                     -> 0.7178156: a's token 34, c's 24
    # b's second step, at once, holds their next tokens too:
    #   b 954 (after 2,046): 0.0954 + 100e-9·954·2,523 = 0.3360942, + 0.0039098
    #                                     -> 1.0578196: b's first token, a's token 35, c's 25
    # then a's tokens 36 to 99 at their gaps: 64·0.0025999 + 1e-7·(36 + ... + 99 = 4,320) =
    # 0.1668256, so its reply ends at 1.2246452, not at its booked 0.2125 + 99·0.0026049 = 0.4703851.
    def run(hang_up: bool) -> tuple[Booking, Booking, list[EngineStep]]:
        m = model(decode_context_ns=100.0, decode_slowdown=0.5)
        a = m.book(prompt(1000, 0), 100, 0.0, 0.0)
        c = m.book(prompt(500, 1), 100, 0.0, 0.0)
        assert a.first_token_at == c.first_token_at == pytest.approx(0.2125)
        assert a.reply_end == pytest.approx(0.4703851)
        if hang_up:
            m.cancel(c, now=0.25)
        b = m.book(prompt(3000, 2), 1, 0.3, 0.3)
        return a, b, list(loop_of(m).steps)

    a, b, steps = run(hang_up=False)
    assert [t for s in steps[-2:] for t in (s.start, s.end)] == pytest.approx(
        [0.3, 0.7178156, 0.7178156, 1.0578196]
    )
    assert b.first_token_at == pytest.approx(1.0578196) and [k for _, k in steps[-2].parts] == [2046]
    times = [0.2983528, 0.7178156, 1.0578196, 1.0604231]  # a gap, b's 2 steps (the stall), a gap
    assert [a.token_at(i) for i in (33, 34, 35, 36)] == pytest.approx(times, abs=1e-9)
    assert a.reply_end == pytest.approx(1.2246452, abs=1e-9)
    assert [a.tokens_due(t) for t in (0.7, 0.7178156, 1.06, 1.061)] == [34, 35, 36, 37]
    # c hangs up at 0.25, during its reply, with 10 tokens sent (its first 9 gaps take 9·0.0037949 +
    # 2e-7·45 = 0.0341631 s of the 0.0375; 10 take 0.03796):
    # its stream leaves the steps to come, and b's first step writes a's token only:
    #   b 2,047: 0.2047 + 100e-9·2,047·1,023.5 = 0.41421045, + 0.0026049 -> 0.71681535
    #   b 953: 0.0953 + 100e-9·953·2,523.5 = 0.33578955, + 0.0026049    -> 1.05520980
    a, b, steps = run(hang_up=True)
    assert steps[-2].end == pytest.approx(0.71681535) and b.first_token_at == pytest.approx(1.0552098)
    assert [k for _, k in steps[-2].parts] == [2047]
    assert [a.token_at(i) for i in (34, 35)] == pytest.approx([0.71681535, 1.0552098])


def test_a_stream_whose_reply_ends_during_a_prompts_steps_leaves_the_steps_after_it() -> None:
    # a (1,000 tokens, a reply of 3) has its first token at 0.1 + 100e-9·1,000·500 = 0.15, and
    # its other two each a gap (1/400 s) later: 0.1525 and 0.155. b (5,000 tokens) comes at
    # 0.151, so a writes token 1 in b's first step and token 2, its last, in the second; the
    # third holds b alone, with room for all 2,048 tokens (the steps after the first are formed
    # back to back, b the only prompt: Loop._run_on):
    #   b 2,047 (after 0):     0.2047 + 100e-9·2,047·1,023.5 = 0.41421045, + 1/400 -> 0.56771045
    #   b 2,047 (after 2,047): 0.2047 + 100e-9·2,047·3,070.5 = 0.83323135, + 1/400 -> 1.40344180
    #   b 906 (after 4,094):   0.0906 + 100e-9·906·4,547     = 0.50255820           -> 1.90600000
    m = model()
    a = m.book(prompt(1000, 0), 3, 0.0, 0.0)
    assert a.first_token_at == pytest.approx(0.15) and a.reply_end == pytest.approx(0.155)
    b = m.book(prompt(5000, 1), 1, 0.151, 0.151)
    steps = list(loop_of(m).steps)[-3:]
    assert [parts(s, a, b) for s in steps] == [[("b", 2047)], [("b", 2047)], [("b", 906)]]
    assert [len(s.decoders) for s in steps] == [1, 1, 0]
    assert [s.end for s in steps] == pytest.approx([0.56771045, 1.4034418, 1.906])
    assert b.first_token_at == pytest.approx(1.906) and a.reply_end == pytest.approx(1.4034418)


def test_a_replys_gaps_grow_with_its_context_and_average_the_booked_gap() -> None:
    # A 1,000-token prompt alone replies 100 tokens; decode_context_ns 100. The booked gap is a
    # decode step at the reply's mean context, 1/400 + 100e-9·1,049 = 0.0026049 s; each token
    # attends to one token more than the one before, 1e-7 s more: token k comes 0.0025999 + 1e-7·k
    # after token k − 1 (k = 1 .. 99), from 0.0026 to 0.0026098, and the 99 gaps add up to
    # 99·0.0026049 = 0.2578851 s, as one booked gap would (the mean a fit reads stays).
    m = model(decode_context_ns=100.0)
    a = m.book(prompt(1000, 0), 100, 0.0, 0.0)
    first = a.first_token_at
    gaps = [a.token_at(i) - a.token_at(i - 1) for i in range(1, 100)]
    assert gaps[0] == pytest.approx(0.0026, abs=1e-12) and gaps[-1] == pytest.approx(0.0026098, abs=1e-12)
    assert a.reply_end - first == pytest.approx(99 * 0.0026049, abs=1e-12)
    for i in (1, 2, 50, 99):  # what a client has got by a time, token by token
        assert a.tokens_due(a.token_at(i)) == i + 1 and a.tokens_due(a.token_at(i) - 1e-7) == i


@pytest.mark.parametrize("seats", [None, 2])
def test_a_hang_up_that_takes_a_step_out_of_a_replys_way_brings_its_tokens_sooner_and_says_so(
    seats: int | None,
) -> None:
    # a (100 tokens, 0.01 + 100e-9·100·50 = 0.0105 s) replies 200 tokens, 1/400 s apart alone:
    # it would end at 0.0105 + 199·0.0025 = 0.508. b (3,000 tokens) comes at 0.1, when a has
    # written tokens 0 to 35 (floor(0.0895 / 0.0025) = 35); its steps hold a's tokens 36 and 37:
    #   b 2,047: 0.2047 + 100e-9·2,047·1,023.5 = 0.41421045, + 0.0025  -> 0.51671045
    #   b 953:   0.0953 + 100e-9·953·2,523.5 = 0.33578955, + 0.0025    -> 0.855
    # and a's other 162 tokens a gap apart: it ends at 0.855 + 0.405 = 1.26. b hangs up at 0.2,
    # in its first step: that step is computed whole, and a's token 37 comes a gap after its 36:
    # a ends at 0.51671045 + 163·0.0025 = 0.92421045. The server must be told (on_moved), or
    # a writer waiting for a token at b's second step's end would write it 0.34 s late.
    m = model(seats=seats)
    told: list[Booking] = []
    m.on_moved = told.extend
    a = m.book(prompt(100, 0), 200, 0.0, 0.0)
    assert a.reply_end == pytest.approx(0.508)
    b = m.book(prompt(3000, 1), 1, 0.1, 0.1)
    assert [a.token_at(i) for i in (35, 36, 37)] == pytest.approx([0.098, 0.51671045, 0.855])
    assert a.reply_end == pytest.approx(1.26) and b.first_token_at == pytest.approx(0.855)
    m.cancel(b, now=0.2)
    assert a.token_at(37) == pytest.approx(0.51921045) and a.reply_end == pytest.approx(0.92421045)
    assert a in told


def test_the_vllm_policy_takes_prompts_by_arrival() -> None:
    # --step-policy vllm (vLLM's and SGLang's chunked prefill). The first test's 4 prompts on 2
    # seats: steps 1 and 2 as there; at a's first token c takes seat 0, but b came first:
    #  step 3: b 1,904 (after 1,096): 0.1904 + 100e-9·1,904·2,048 = 0.5803392
    #          c 144 (after 0):       0.0144 + 100e-9·144·72     = 0.0154368 -> 1.5154368: b's first
    #  step 4: c 2,048 (after 144):   0.2048 + 100e-9·2,048·1,168 = 0.4440064 -> 1.9594432
    #  step 5: c 808 (after 2,192):   0.2905568
    #          d 1,240 (after 0):     0.124 + 100e-9·1,240·620    = 0.20088   -> 2.45088: c's first
    #  step 6: d 1,760 (after 1,240): 0.176 + 100e-9·1,760·2,120  = 0.54912   -> 3.0: d's first
    m = model(seats=2, block_tokens=16, step_policy="vllm")
    a, b, c, d = (m.book(prompt(3000, i), 1, 0.0, 0.0) for i in range(4))
    steps = list(loop_of(m).steps)
    assert [parts(s, a, b, c, d) for s in steps[2:]] == [
        [("b", 1904), ("c", 144)],
        [("c", 2048)],
        [("c", 808), ("d", 1240)],
        [("d", 1760)],
    ]
    assert [x.first_token_at for x in (a, b, c, d)] == pytest.approx([0.9196608, 1.5154368, 2.45088, 3.0])


def test_with_prefill_first_a_first_token_waits_for_the_steps_of_the_prompts_taken_with_it() -> None:
    # mlx_lm.server (--step-policy mlx) reads the prompts it took together in the same steps, and a
    # first token comes MLX_SHOW_AFTER steps after its last piece (or at a gap). With a 5 ms overhead, a
    # (1,000 tokens) comes at 0 and b (3,000) 2 ms later, within a's parsing: both taken at 0.005.
    #  step 1 at 0.005:  a 1,000 padded to b's 2,048, and b 2,048: 2 x 0.4145152    -> 0.8340304
    #  step 2:           b 952 after 2,048: 0.0952 + 100e-9·952·2,524 = 0.3354848  -> 1.1695152
    # a's first token waits for step 2 (no step 3 follows): 1.1695152, with b's. By seat (llamacpp), b
    # is ready at 0.007, after a's step began: a's first token is its own step's end, 0.155.
    firsts = {}
    for policy in ("mlx", "llamacpp"):
        m = model(step_policy=policy, block_tokens=16, overhead_ms=5.0)
        a = m.book(prompt(1000, 0), 1, 0.0, 0.0)
        b = m.book(prompt(3000, 1), 1, 0.002, 0.002)
        firsts[policy] = a.first_token_at
        if policy == "mlx":
            assert a.first_token_at == b.first_token_at == pytest.approx(1.1695152)
    assert firsts == pytest.approx({"mlx": 1.1695152, "llamacpp": 0.155})


def test_with_prefill_first_a_first_token_comes_two_steps_after_its_last_piece_not_after_all() -> None:
    # mlx_lm.server returns a first token MLX_SHOW_AFTER (2) steps after the step holding its last
    # piece (one moves it to the decoding batch, the next writes its token), whatever is read in them.
    # a: 9,000 tokens and b: 100, sent at once; each puts up to 2,048 of its own in a step, every
    # piece of a step computed as long as its longest (mlx_lm right-pads them):
    #  step 1 at 0:  a 2,048 and b 100 padded to 2,048: 2 x 0.4145152               -> 0.8290304
    #  step 2:       a 2,048 after 2,048: 0.2048 + 100e-9·2,048·3,072 = 0.8339456    -> 1.662976
    #  step 3:       a 2,048 after 4,096: 0.2048 + 100e-9·2,048·5,120 = 1.253376     -> 2.916352
    #  step 4:       a 2,048 after 6,144: 0.2048 + 100e-9·2,048·7,168 = 1.6728064    -> 4.5891584
    #  step 5:       a 808 after 8,192: 0.0808 + 100e-9·808·8,596 = 0.7753568        -> 5.3645152
    # b's first token at step 3's end, not with a's at step 5's (measured on mlx_lm.server with a
    # prompt of about 9,000 tokens: the short one 6.8 to 7.0 s, the long one 15.4 to 16.7 s).
    m = model(step_policy="mlx", block_tokens=16)
    a = m.book(prompt(9000, 0), 1, 0.0, 0.0)
    b = m.book(prompt(100, 1), 1, 0.0, 0.0)
    steps = list(loop_of(m).steps)
    assert [parts(s, a, b) for s in steps] == [[("a", 2048), ("b", 100)], *[[("a", 2048)]] * 3, [("a", 808)]]
    assert b.first_token_at == pytest.approx(2.916352)
    assert a.first_token_at == pytest.approx(5.3645152)


def test_with_prefill_first_a_hang_up_in_the_chain_brings_the_first_tokens_before_it_back() -> None:
    # The same a and b; b hangs up at 0.1, during step 1 (computed whole): it leaves step 2, and
    # a's first token is step 1's end again (0.8340304); the booking core is told it moved.
    m = model(step_policy="mlx", block_tokens=16, overhead_ms=5.0)
    moved: list[Booking] = []
    m.on_moved = moved.extend
    a = m.book(prompt(1000, 0), 1, 0.0, 0.0)
    b = m.book(prompt(3000, 1), 1, 0.002, 0.002)
    assert a.first_token_at == pytest.approx(1.1695152)
    assert m.cancel(b, now=0.1) and a in moved
    assert a.first_token_at == pytest.approx(0.8340304)


def test_mlx_reads_each_prompt_waiting_in_pieces_of_its_own() -> None:
    # mlx_lm.server: each prompt waiting puts up to --batch-tokens (its --prefill-step-size) of its
    # own in a step, whatever the others put in (llama.cpp shares one budget of 2,048 among them).
    # a and b, 3,000 tokens each, sent at once:
    #  step 1 at 0:  a 2,048 and b 2,048 (after 0): 2 x 0.4145152                   -> 0.8290304
    #  step 2:       a 952 and b 952 (after 2,048): 2 x (0.0952 + 100e-9·952·2,524) -> 1.5
    # Both first tokens at 1.5 (by llama.cpp's one budget: 0.4145 + 0.3355 + ... later for b).
    m = model(step_policy="mlx", block_tokens=16)
    a = m.book(prompt(3000, 0), 1, 0.0, 0.0)
    b = m.book(prompt(3000, 1), 1, 0.0, 0.0)
    steps = list(loop_of(m).steps)
    assert [parts(s, a, b) for s in steps] == [[("a", 2048), ("b", 2048)], [("a", 952), ("b", 952)]]
    assert steps[0].end == pytest.approx(2 * 0.4145152)
    assert a.first_token_at == b.first_token_at == pytest.approx(1.5)


def test_mlx_takes_a_prompt_sent_during_a_reply_only_when_its_run_of_steps_has_lasted_half_a_second() -> None:
    # mlx_lm.server takes new requests between runs of steps; a run goes on while there is work,
    # until it has lasted more than 0.5 s (BUDGET_S, its TimeBudget). a: 1,000 tokens at 0, a
    # 400-token reply (decode at 400 tokens/s: a token every 2.5 ms, its last at 0.15 + 399 x
    # 0.0025 = 1.1475). b: 500 tokens, sent while a's reply streams (or before, or after it):
    #  a's step 0 to 0.15, its run from 0; b taken at the next take at or after it comes:
    #  0.5 (the run's budget), then 1.0; after 1.1475 nothing runs: at once.
    #  b's step: 0.05 + 100e-9 x 500 x 250 = 0.0625, with a's decode token (0.0025) in it: 0.065.
    for sent, taken in ((0.05, 0.5), (0.3, 0.5), (0.7, 1.0), (1.2, 1.2)):
        m = model(step_policy="mlx", block_tokens=16)
        a = m.book(prompt(1000, 0), 400, 0.0, 0.0)
        b = m.book(prompt(500, 1), 1, sent, sent)
        decoding = 0.0025 if taken < a.reply_end else 0.0
        assert a.first_token_at == pytest.approx(0.15)  # b never joins a's prefill
        assert b.first_token_at == pytest.approx(taken + 0.0625 + decoding), sent
    # By seat (llama.cpp, no budget), b sent at 0.3 is read at once: 0.3 + 0.065.
    m = model(step_policy="llamacpp", block_tokens=16)
    m.book(prompt(1000, 0), 400, 0.0, 0.0)
    assert m.book(prompt(500, 1), 1, 0.3, 0.3).first_token_at == pytest.approx(0.365)


def test_mlx_takes_a_prompt_at_the_end_of_the_step_that_spends_the_budget() -> None:
    # a: 5,000 tokens at 0, read in pieces of 2,048; b: 500 tokens at 0.1.
    #  step 1, 0 to 0.4145152: a 2,048. The run has lasted 0.41 s: it goes on, without b.
    #  step 2, to 1.2484608: a 2,048 after 2,048 (0.2048 + 100e-9 x 2,048 x 3,072). Over 0.5 s:
    #  b is taken, and step 3 holds a's last 904 and b's 500 (a new run, from 1.2484608).
    m = model(step_policy="mlx", block_tokens=16)
    a = m.book(prompt(5000, 0), 1, 0.0, 0.0)
    b = m.book(prompt(500, 1), 1, 0.1, 0.1)
    steps = list(loop_of(m).steps)
    assert [parts(s, a, b) for s in steps] == [[("a", 2048)], [("a", 2048)], [("a", 904), ("b", 500)]]
    assert steps[1].end == pytest.approx(1.2484608)
    assert steps[2].run == steps[2].start == steps[1].end


@pytest.mark.parametrize("seed", range(200))
def test_mlx_steps_hold_only_prompts_taken_when_their_run_began(seed: int) -> None:
    # Random prompts, replies and hang-ups on the mlx policy: the plan ends (no step is waited for
    # forever), steps follow one another, and each holds only prompts that had come by the start
    # of its run; a run that has lasted over BUDGET_S takes no step more without a new take.
    rng = random.Random(seed)
    m = model(step_policy="mlx", block_tokens=16, batch_tokens=rng.choice([256, 2048]))
    for i in random_traffic(
        m, rng, 25, 0.2, 0.2, lambda i: (prompt(rng.randint(16, 3000), i), rng.randint(1, 300))
    ):
        steps = list(loop_of(m).steps)
        for before, step in zip(steps, steps[1:], strict=False):
            assert step.start >= before.end - 1e-12
            if step.start == before.end and step.run == before.run:
                assert step.start - step.run <= BUDGET_S + 1e-9, (seed, i)
        for step in steps:
            assert all(t.ready_at <= step.run + 1e-12 for t, _ in step.parts), (seed, i)
            assert step.run <= step.start
        at = {id(s): k for k, s in enumerate(steps)}
        for k, step in enumerate(steps):  # a first token: MLX_SHOW_AFTER steps on, or at a gap before
            for t in (t for t, _ in step.parts if t.last is step):
                shown = at[id(t.shown or step)]  # (a step of the plan, none planned away)
                gap = shown + 1 == len(steps) or steps[shown + 1].start > steps[shown].end
                idle = t.reply <= 1  # (it leaves the engine idle at its step's end: a take at once)
                early = shown - k < MLX_SHOW_AFTER and (gap or idle)
                assert shown - k == MLX_SHOW_AFTER or early, (seed, i)


def test_mlx_takes_the_requests_that_come_while_it_takes_one() -> None:
    # With an overhead of 5 ms (a request's parsing: its prefill may start 5 ms after it came),
    # mlx_lm.server takes with a request every one that comes within that time: they share the
    # first step. a comes at 0 (ready at 0.005); b at 0.004 (ready 0.009, within 0.005 + 0.005):
    # one step of a's and b's 1,000 tokens, 2 x 0.15: both first tokens at 0.305. c at 0.011
    # (ready 0.016): taken once a's and b's run is over (nothing else to do then: at 0.305).
    m = model(step_policy="mlx", block_tokens=16, overhead_ms=5.0)
    a = m.book(prompt(1000, 0), 1, 0.0, 0.0)
    b = m.book(prompt(1000, 1), 1, 0.004, 0.004)
    steps = list(loop_of(m).steps)
    assert [parts(s, a, b) for s in steps] == [[("a", 1000), ("b", 1000)]]
    assert a.first_token_at == b.first_token_at == pytest.approx(0.305)
    m = model(step_policy="mlx", block_tokens=16, overhead_ms=5.0)
    a = m.book(prompt(1000, 0), 1, 0.0, 0.0)
    c = m.book(prompt(1000, 1), 1, 0.011, 0.011)
    assert a.first_token_at == pytest.approx(0.155) and c.first_token_at == pytest.approx(0.305)


# ── The lesson's engine: one whole prompt a step ────────────────────────────


class Walking(Loop):
    """The lesson's loop that never takes the short cut (`_goes_last`): every newcomer is planned
    by `_plan`'s walk, as a prompt that joins the steps is."""

    def _goes_last(self, turn: Turn, since: float) -> bool:
        return False


@pytest.mark.parametrize("seed", range(20))
def test_the_lessons_short_cut_books_what_the_walk_would(seed: int) -> None:
    # Prompts booked as time goes on, some ready later than others booked after them (a seat,
    # a slow body), some hung up half way: the short cut and the walk give every turn the same
    # start and first token.
    rng = random.Random(seed)
    rates = Settings(prefill_tps=10_000.0, prefill_attention_ns=100.0).timing
    short, walk = Loop(None, rates, by_arrival=True), Walking(None, rates, by_arrival=True)
    turns: list[tuple[Turn, Turn]] = []
    now = 0.0
    for _ in range(40):
        now += rng.expovariate(20.0)
        ready = now + rng.choice([0.0, 0.0, 0.01, 0.3])
        new, cached = rng.randint(1, 3000), rng.randint(0, 500)
        pair = (short.book(ready, now, new, cached, None, 1), walk.book(ready, now, new, cached, None, 1))
        turns.append(pair)
        if rng.random() < 0.15:
            victim = rng.choice(turns)
            for lane, turn in zip((short, walk), victim, strict=True):
                if lane.shorten(turn, now):
                    lane.reflow(now)
    assert [(a.start, a.end) for a, _ in turns] == [(b.start, b.end) for _, b in turns]
    assert short.free_at == walk.free_at


def test_a_lesson_step_under_way_stops_where_the_hang_up_finds_it() -> None:
    # 2,000 tokens at 10,000 tokens/s, no attention: 0.2 s. A hang-up at 0.05 s keeps the 500 it
    # read, and the next prompt starts then, not at 0.2.
    rates = Settings(prefill_tps=10_000.0).timing
    lane = Loop(None, rates, by_arrival=True)
    a, b = (lane.book(0.0, 0.0, 2000, 0, None, 1) for _ in range(2))
    assert (a.end, b.start) == pytest.approx((0.2, 0.2))
    assert lane.shorten(a, 0.05) and lane.reflow(0.05) == [b]
    assert (a.tokens, a.end, b.start, b.end) == pytest.approx((500, 0.05, 0.05, 0.25))
