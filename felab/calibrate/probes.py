"""The measurements: a few streamed requests each, every one counted against an announced bound.

Every request goes through the official client and `stream_once`, as a lesson's
do, so a probe times what a learner's script would see. A `Prober` holds the
connection, the request budget (`--max-requests`: it never sends more) and the
progress lines. The probes, in the order calibrate runs them:

    server_facts   GET /props (llama.cpp: seats and context per seat), /health, /v1/models
    first_call     one short call: a text reply and `usage.prompt_tokens`, or no calibration
    cold           prompts that share nothing, of several lengths: overhead, prefill, attention,
                   and how the engine counts tokens (characters per prompt token)
    openings       an opening sent again with new text after it: reuse, its kind (whole blocks
                   or the longest common prefix), and prefill after a long context
    rows           new parts of chosen lengths after one cached opening: is a last piece of few
                   rows read one at a time (llama.cpp on a CPU), and below what size, in pieces of what
    together       4 cold prompts at once: are they prefilled one after another, or together?
    decode         1, 2 and 4 streams at once: time per output token, and how streams share it
    pushed_out     (with seats) an opening, other prompts that push it out of every seat, the
                   opening again: does it come back cached (llama-server's host-memory cache)?
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import openai

from felab.calibrate import figures, prompts
from felab.connect import TargetClient
from felab.context_fit import read_overflow
from felab.errors import FelabError
from felab.explain import explain
from felab.guarded import get_json  # within the kit's limits: an endless /props stops with a message
from felab.mock_server.config import HEALTH_NAME
from felab.paths import from_here
from felab.streaming import CallResult, no_text, stream_once
from felab.targets import Target

PREFILL_MAX_TOKENS = 2
"""Reply length of a prefill probe: its first token is what is timed; one more shows the stream works."""
DECODE_MAX_TOKENS = 48
"""Reply length of a decode probe: enough gaps between tokens for a steady median."""
FOLLOW_UP_MAX_TOKENS = 16
"""Reply length of a short question after a cached opening: its gaps time decode after a long context."""
BIGGEST = 6400
"""The longest probe prompt, in tokens (less if the server's context, or its speed, asks for less)."""
SMALLEST_CONTEXT = 1200
"""Below this many tokens of context per seat, the probes cannot tell the terms apart."""
SLOWEST_PROBE_S = 8.0
"""A cold prompt is not made longer than what this server prefills in about this long."""
EMPTY_TRIES = 3
"""Tries of one request whose replies carry no text (each with new text) before calibrate stops."""
EMPTY_STOP_AT = 3
"""Calibrate stops when this many replies carried no text and none carried text."""
EMPTY_JUDGED_AFTER = 20
"""Replies with no text outnumbering those with text stop calibrate only once this many replies
came back (or at EMPTY_STOP_AT, if none had text): a tiny model that ends 1 reply in 7 at once had
4 of its first 7 so (short prompts), and was stopped though it answered most of the rest."""


@dataclass
class Sample:
    """One timed request: what was sent, what the server reported, what the clock said."""

    chars: int
    """Characters of the messages, as the practice server's chat template counts them."""
    prompt_tokens: int
    cached_tokens: int | None
    ttft_ms: float
    output_tokens: int
    itl_ms: list[float] = field(default_factory=list)
    total_ms: float = 0.0
    retried: int = 0
    """Replies with no text before this one (each sent again with new text: `Prober.call`)."""
    ended_empty: bool = False
    """Its reply carried no text and was timed by its end (a prefill probe: `Prober._stream`)."""

    @property
    def uncached(self) -> int:
        return self.prompt_tokens - (self.cached_tokens or 0)

    @property
    def tpot_ms(self) -> float | None:
        """Time per output token after the first: from the first chunk with text to the last, over
        the gaps between them (None for a reply with one chunk of text). Counted in chunks of text,
        not in the server's `completion_tokens`: a reply that ends early counts its end-of-text
        token there, which took no gap (one text chunk then the end read as a gap of 0 ms)."""
        if not self.itl_ms:
            return None
        return (self.total_ms - self.ttft_ms) / len(self.itl_ms)


@dataclass
class ServerFacts:
    """What the server says about itself, where it says it."""

    engine: str
    seats: int | None = None
    seat_context: int | None = None
    """Tokens per seat (llama.cpp's n_ctx), or the model's context (vLLM's max_model_len)."""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def server_facts(target: Target) -> ServerFacts:
    """The engine's name, and its seats and context where it reports them. These GETs are not
    counted as requests, and a paid target is not asked at all."""
    if target.is_paid:
        return ServerFacts(target.name)
    root = target.base_url.removesuffix("/v1")
    health = get_json(f"{root}/health")
    practice = isinstance(health, dict) and health.get("server") == HEALTH_NAME
    props = get_json(f"{root}/props")  # llama.cpp's (the practice server answers it too, with --seats)
    if isinstance(props, dict) and "total_slots" in props:
        settings = props.get("default_generation_settings")
        n_ctx = _int(settings.get("n_ctx")) if isinstance(settings, dict) else None
        build = props.get("build_info")
        engine = f"llama.cpp ({build})" if isinstance(build, str) and build else "llama.cpp"
        return ServerFacts(
            "felab practice server" if practice else engine, _int(props.get("total_slots")), n_ctx
        )
    if practice:
        return ServerFacts("felab practice server")
    models = get_json(f"{target.base_url}/models")
    if health is None and props is None and models is None:
        answers(target)  # nothing answered a GET: a server that answers no probe stops here
    data = models.get("data") if isinstance(models, dict) else None
    first = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    owner = first.get("owned_by")
    engine = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}.get(str(owner), target.name)
    return ServerFacts(engine, None, _int(first.get("max_model_len")))


def answers(target: Target, timeout_s: float = 10.0) -> None:
    """Stop, with the kit's message for it (explain.py: not running, and the command that starts
    it; or no answer in time), unless the server answers OpenAI's `GET /v1/models` within
    `timeout_s`, or with an HTTP error (then the first probe says what it means). Before this, a
    server that took connections but answered nothing held calibrate silent for two minutes
    (its probes' own timeout)."""
    try:
        TargetClient(target, max_retries=0, timeout=timeout_s).models.list()
    except openai.APIStatusError:
        return
    except openai.OpenAIError as exc:
        raise explain(exc, target) from None


class Prober:
    """One server, one request budget, one progress line per step."""

    def __init__(
        self, target: Target, api: openai.OpenAI, limit: int, say: Callable[[str], None], seed: int = 0
    ) -> None:
        """`limit`: the requests announced, those kept for replies with no text included."""
        self.target, self.api, self.limit, self.say, self.seed = target, api, limit, say, seed
        self.used = 0
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.chars_per_token = 4.0
        """The engine's characters per prompt token, as measured so far (used to size prompts)."""
        self.answered = 0
        self.empty = 0
        """Replies that carried text, and replies that carried none (each sent again: `call`)."""
        self.ended_at_once = 0
        """Probes of prompt reading whose reply ended at once with no text, timed by that end
        (`stream_once(time_empty=True)`)."""
        self.renew = random.Random()
        """New text for a request sent again: apart from `rng`, so that a real server and its twin,
        started from one seed, still get the same prompts after it."""

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def _take(self, n: int) -> None:
        with self.lock:
            if self.used + n > self.limit:  # never more than announced
                raise FelabError(
                    f"calibrate stopped before sending more than the {self.limit} requests it announced "
                    f"(--max-requests); nothing was written. Run it again with a larger --max-requests."
                )
            self.used += n

    def _stream(self, messages: list[dict], max_tokens: int) -> Sample:
        try:
            # A probe of prompt reading (not of decode) times the first token: a reply that ended at
            # once (its end-of-text first) is timed by that end. A decode probe needs reply tokens.
            # On llama-server a decode probe asks for its whole length (`ignore_eos`, a field of its
            # own API): a model that ends early would leave no gaps to time.
            timed = max_tokens < DECODE_MAX_TOKENS
            whole = {} if timed or self.target.name != "llamacpp" else {"extra_body": {"ignore_eos": True}}
            r = stream_once(
                self.api, self.target.model, messages, max_tokens=max_tokens, time_empty=timed, **whole
            )
        except FelabError as exc:
            small = self._too_small(exc)
            if small is None:
                raise  # as it was: its cause (the client's error) kept, for check.workload
            raise small from exc
        return self._sample(messages, r, max_tokens)

    def call(
        self, messages: list[dict], max_tokens: int = PREFILL_MAX_TOKENS, keep_opening: bool = False
    ) -> Sample:
        """One streamed request, timed; counted against the budget before it is sent.

        A reply with no text (a model that ends at once, or whose few tokens carry no visible
        text) has no first token to time: it is counted, and the request sent again with new
        text (`prompts.renewed`; `keep_opening`: after the opening, which stays cached), up to
        EMPTY_TRIES times. Only when such replies outnumber the others does calibrate stop."""
        self._take(1)
        return self._answered(messages, max_tokens, keep_opening)

    def _answered(self, messages: list[dict], max_tokens: int, keep_opening: bool) -> Sample:
        for tried in range(EMPTY_TRIES):
            try:
                got = self._stream(messages, max_tokens)
            except FelabError as exc:
                if exc.message != no_text(self.target, self.target.model).message:
                    raise
                self._count_empty(last_try=tried == EMPTY_TRIES - 1)
                with self.lock:
                    messages = prompts.renewed(messages, self.renew, keep_opening)
                continue
            with self.lock:
                if got.ended_empty:
                    self.ended_at_once += 1
                    self._stop_if_mostly_empty()
                else:
                    self.answered += 1
            return dataclasses.replace(got, retried=tried)
        raise AssertionError("unreachable: the last try stops")  # pragma: no cover

    def _count_empty(self, last_try: bool) -> None:
        """Count a reply with no text; stop if they are most replies, one request had only those,
        or the requests kept for them are spent. Else the request goes again."""
        with self.lock:
            self.empty += 1
            self._stop_if_mostly_empty()
            if last_try:
                raise self._mostly_empty(f"one request got {EMPTY_TRIES} in a row")
            if self.used >= self.limit:
                raise self._mostly_empty(
                    f"the requests kept to send them again are spent (allow more with --max-requests, "
                    f"e.g. {self.limit + self.limit // 5})"
                )
            self.used += 1

    def _stop_if_mostly_empty(self) -> None:
        """Replies with no text, sent again or timed by their end, outnumber those with text: stop."""
        without = self.empty + self.ended_at_once
        none_with = without >= EMPTY_STOP_AT and not self.answered
        if none_with or (without + self.answered >= EMPTY_JUDGED_AFTER and without > self.answered):
            raise self._mostly_empty("they outnumber the replies with text")

    def _mostly_empty(self, why: str) -> FelabError:
        return FelabError(
            f"the {self.target.name} server at {self.target.base_url} sent "
            f"{self.empty + self.ended_at_once} replies with no text, against {self.answered} with text "
            f"(model {self.target.model}). Calibrate times a reply's first token (a prompt probe's "
            f"reply with none by its end; others it sent again with new text), but {why}, so "
            f"it stopped; nothing was written. The model ends its replies at once (its end-of-text "
            f"token first), or its first tokens carry no visible text. Try a chat model (see what the "
            f"server serves with `{from_here('make check')}`, then --model), or, on llama-server, "
            f"restart it with --ignore-eos (replies then run to their full length)."
        )

    def together(self, batches: list[list[dict]], max_tokens: int = PREFILL_MAX_TOKENS) -> list[Sample]:
        """Send these requests at the same moment (one thread each, released together). A reply
        with no text is sent again as in `call`, no longer at the same moment (`Sample.retried`)."""
        self._take(len(batches))
        gate = threading.Barrier(len(batches))

        def one(messages: list[dict]) -> Sample:
            gate.wait()
            return self._answered(messages, max_tokens, False)

        with ThreadPoolExecutor(len(batches)) as pool:
            return list(pool.map(one, batches))

    def _sample(self, messages: list[dict], r: CallResult, max_tokens: int) -> Sample:
        """The reply as a sample, its figures checked first (figures.py: a lie stops calibrate)."""
        if r.prompt_tokens is None:
            raise FelabError(
                f"the {self.target.name} server at {self.target.base_url} does not report "
                f"usage.prompt_tokens in its streamed replies (stream_options.include_usage), so "
                f"calibrate cannot learn how it counts tokens. It works with servers that do: "
                f"llama.cpp, vLLM, SGLang, MLX, Fireworks and the practice server."
            )
        chars = prompts.chars_of(messages)
        figures.check(r, chars, max_tokens, self.target)
        return Sample(
            chars,
            r.prompt_tokens,
            r.cached_tokens,
            r.ttft_ms,
            r.output_tokens,
            r.itl_ms,
            r.total_ms,
            ended_empty=r.ended_empty,
        )

    def _too_small(self, exc: FelabError) -> FelabError | None:
        cause = exc.__cause__
        if isinstance(cause, openai.APIStatusError) and read_overflow(cause) is not None:
            return FelabError(
                f"the {self.target.name} server's context is too small for calibrate's probe prompts. "
                f"It said: {exc.message}"
            )
        return None

    def tokens_to_chars(self, tokens: int) -> int:
        return max(40, int(tokens * self.chars_per_token))

    def learn_chars_per_token(self, samples: list[Sample]) -> None:
        big = [s for s in samples if s.prompt_tokens > 50]
        if big:
            self.chars_per_token = sum(s.chars for s in big) / sum(s.prompt_tokens for s in big)


# ── The probes ───────────────────────────────────────────────────────────────


def first_call(p: Prober) -> Sample:
    """One short call: the server answers with text and reports its prompt tokens."""
    return p.call(prompts.fresh(400, p.rng))


def cold(
    p: Prober,
    lengths: list[int],
    repeats: int,
    then: Callable[[list[list[Sample]]], None] | None = None,
) -> list[list[Sample]]:
    """Prompts that share nothing, `repeats` of each length back to back, shortest first; a length
    this server would take more than SLOWEST_PROBE_S to read is left out (the longest so far says
    how long). Back to back, not in passes over the lengths: on llama.cpp a cold prompt sent
    right after a long one (on a seat that held it) came 20 to 60% slower at 300 to 2,000
    tokens here, which passes would put into every repeat but the first."""
    out: list[list[Sample]] = []
    for n, tokens in enumerate(lengths):
        if len(out) >= 3 and _slow([s for g in out for s in g], tokens):
            p.say(f"    from {tokens:,} tokens on left out: each would take over {SLOWEST_PROBE_S:g} s here")
            break
        got = [p.call(prompts.fresh(p.tokens_to_chars(tokens), p.rng)) for _ in range(repeats)]
        out.append(got)
        p.learn_chars_per_token([s for g in out for s in g])
        times = ", ".join(f"{s.ttft_ms:.0f}" for s in got)
        p.say(f"    {n + 1}/{len(lengths)}  {got[0].prompt_tokens:>6,} tokens  TTFT {times} ms")
        if then is not None:
            then(out)
    return out


def _slow(samples: list[Sample], tokens: int) -> bool:
    """Would a cold prompt of `tokens` take longer than SLOWEST_PROBE_S? (the rate of the longest so
    far, doubled for the growth of attention)"""
    longest = max(samples, key=lambda s: s.prompt_tokens)
    per_token_ms = longest.ttft_ms / max(longest.prompt_tokens, 1)
    return 2 * per_token_ms * tokens > SLOWEST_PROBE_S * 1000


@dataclass
class Opening:
    """One opening: its first (cold) call, and the calls after it with more text."""

    cold: Sample
    warm: list[Sample]


def openings(p: Prober, lengths: list[int], suffix_tokens: int, warm: int) -> list[Opening]:
    """Each opening once cold (with a long new part), then `warm` times with a short question
    after it (what a cached opening costs, and decode after a long context), then once more with that
    question and a long new part after it: what it shares with the call before grows, so the
    cached counts land on different lengths (whole blocks show as multiples of one size)."""
    out = []
    for n, tokens in enumerate(lengths):
        # Lengths off any round number, spread over more than a block of the sizes in use
        # (64 tokens at least), so that whole blocks of 32 do not all look like blocks of 64.
        text = prompts.opening(
            p.tokens_to_chars(tokens + p.rng.randrange(5, 5 + max(64, tokens // 8))), p.rng
        )
        piece = p.tokens_to_chars(suffix_tokens)
        first = p.call(prompts.with_question(text, prompts.opening(piece, p.rng)), keep_opening=True)
        asked = p.rng.sample(prompts.QUESTIONS, warm)  # short and all different, as a learner's are
        rest = [p.call(prompts.with_question(text, q), FOLLOW_UP_MAX_TOKENS, True) for q in asked]
        longer = f"{asked[-1]} {prompts.opening(piece + p.rng.randrange(20, 240), p.rng)}"
        rest.append(p.call(prompts.with_question(text, longer), keep_opening=True))
        out.append(Opening(first, rest))
        cached = ", ".join("?" if s.cached_tokens is None else f"{s.cached_tokens:,}" for s in rest)
        times = ", ".join(f"{s.ttft_ms:.0f}" for s in rest)
        p.say(
            f"    {n + 1}/{len(lengths)}  {first.prompt_tokens:,} tokens cold {first.ttft_ms:.0f} ms; "
            f"again with new text: cached {cached}, TTFT {times} ms"
        )
    return out


ROW_TARGETS = (8, 20, 28, 44, 56, 72, 100, 140, 200, 280)
"""New tokens after a cached opening, on both sides of each tile size an engine may use (16, 32,
64, 128 and 256 rows): where the time per new token jumps down is the tile size."""
PIECE_SIZES = (256, 512, 1024, 2048)
"""Piece (ubatch) sizes the rows probe tells apart: llama.cpp's -ub is 512 by default."""
PIECE_PAST = (12, 44)
"""Tokens past a multiple of each piece size: a last piece smaller than most tile sizes."""


def row_targets(room: int) -> list[int]:
    """The new parts the rows probe sends, in tokens: ROW_TARGETS, then a little past each piece
    size that fits in `room` tokens."""
    past = [size + k for size in PIECE_SIZES for k in PIECE_PAST if size + k + 40 <= room]
    return [*ROW_TARGETS, *past]


def rows(p: Prober, opening_tokens: int, targets: list[int]) -> list[Sample]:
    """One opening, cached, then new parts of about each of `targets` tokens after it.

    The new parts are cuts of one text, each after a tag of its own (so nothing of it is cached):
    two first calls, one long and one short, give how many tokens a cut of that text makes
    (the tag and the template's few, then the text's own characters per token), so each later
    cut lands within a few tokens of its target. Each call's new tokens are read from its usage
    (prompt_tokens - cached_tokens): the fit uses what was sent, not what was aimed at."""
    text = prompts.opening(p.tokens_to_chars(opening_tokens), p.rng)
    p.call(prompts.with_question(text, prompts.QUESTIONS[0]), keep_opening=True)  # cached from here on
    body = prompts.prose(p.tokens_to_chars(max(targets) + 200), p.rng)

    def ask(chars: int) -> Sample:
        return p.call(prompts.with_question(text, f"{prompts.tag(p.rng)} {body[:chars]}"), keep_opening=True)

    long_cut, short_cut = p.tokens_to_chars(max(targets)), p.tokens_to_chars(60)
    far, near = ask(long_cut), ask(short_cut)
    out = [far, near]
    if not near.cached_tokens:  # nothing reused: its new tokens cannot be told from the opening's
        p.say("    the opening was not found cached: no new parts sent (the term is not fitted)")
        return out
    per_token = (long_cut - short_cut) / max(far.uncached - near.uncached, 1)
    for t in targets:
        out.append(ask(max(0, short_cut + round((t - near.uncached) * per_token))))
    shown = ", ".join(f"{s.uncached}: {s.ttft_ms:.0f}" for s in sorted(out, key=lambda s: s.uncached)[:12])
    p.say(f"    after {near.cached_tokens or 0:,} cached tokens, new tokens: TTFT ms  {shown} ...")
    return out


def together(p: Prober, tokens: int, streams: int, rounds: int) -> list[list[Sample]]:
    """`streams` cold prompts of `tokens` each, sent at the same moment, `rounds` times."""
    out = []
    for _ in range(rounds):
        got = p.together([prompts.fresh(p.tokens_to_chars(tokens), p.rng) for _ in range(streams)])
        out.append(got)
        times = ", ".join(f"{t:.0f}" for t in sorted(s.ttft_ms for s in got))
        p.say(f"    {streams} prompts of {got[0].prompt_tokens:,} tokens at once: TTFTs {times} ms")
    return out


def decode(p: Prober, streams: tuple[int, ...]) -> dict[int, list[Sample]]:
    """Short prompts with long replies, k streams at once for each k: the time between tokens."""
    out: dict[int, list[Sample]] = {}
    for k in streams:
        batch = [prompts.fresh(200, p.rng) for _ in range(k)]
        got = p.together(batch, DECODE_MAX_TOKENS) if k > 1 else [p.call(batch[0], DECODE_MAX_TOKENS)]
        out[k] = got
        tpot = [t for s in got if (t := s.tpot_ms) is not None]
        shown = ", ".join(f"{t:.2f}" for t in tpot) or "n/a"
        p.say(f"    {k} stream{'s' if k > 1 else ''} at once: time per output token {shown} ms")
    return out


def delivery_ms(calls: int = 12) -> float:
    """The practice server's own delivery time on this machine: the TTFT a client measures from a
    practice server told to take no time at all (HTTP, the client, the machine's scheduling).

    A twin adds it to every TTFT it serves, and the real server's measured TTFTs hold it
    already, so calibrate takes it out of the fitted overhead. Asked of a throw-away practice
    server on this machine, never of the target."""
    from felab.connect import client
    from felab.mock_server.launch import practice_server

    with practice_server("--overhead-ms", "0", "--prefill-tps", "1000000000") as url:
        local = Target("mock", url, "felab-practice", "not-needed", False)
        api, rng = client(local, timeout=30.0), random.Random(0)
        times = [
            stream_once(api, local.model, prompts.fresh(200, rng), max_tokens=1).ttft_ms for _ in range(calls)
        ]
    return sorted(times)[len(times) // 2]


PUSH_TOKENS = 200
"""Length of each prompt that pushes the opening out of a seat: any prompt takes a seat, so a short one."""


@dataclass
class Return:
    """An opening pushed out of every seat by other prompts, and its return with a new question."""

    opening: Sample
    back: Sample
    seats: int


def pushed_out(p: Prober, seats: int, tokens: int) -> Return:
    """An opening of `tokens` with a question; then `seats` fresh prompts one after another: each
    takes the seat free longest (they share nothing with any seat), so the last takes the
    opening's, and no seat holds it any more; then the opening with another question. Cached
    tokens in that return mean the server kept the opening beyond its seats (llama-server's
    --cache-ram, on by default: it copies the saved prompt back into a seat); none, that it read
    it again."""
    text = prompts.opening(p.tokens_to_chars(tokens), p.rng)
    first_q, back_q = p.rng.sample(prompts.QUESTIONS, 2)
    opening = p.call(prompts.with_question(text, first_q), keep_opening=True)
    for _ in range(seats):
        p.call(prompts.fresh(p.tokens_to_chars(PUSH_TOKENS), p.rng))
    back = p.call(prompts.with_question(text, back_q), keep_opening=True)
    cached = "?" if back.cached_tokens is None else f"{back.cached_tokens:,}"
    p.say(
        f"    {opening.prompt_tokens:,} tokens cold {opening.ttft_ms:.0f} ms; pushed out of {seats} "
        f"seat{'s' if seats > 1 else ''} and sent again: cached {cached}, TTFT {back.ttft_ms:.0f} ms"
    )
    return Return(opening, back, seats)
