"""Everything the practice server can be told, with its default, in one place.

Each field of `Settings` is declared once, with `setting(default, help, ...)`: its
default, one help text, and the bounds a value must keep. From these declarations
flags.py writes the flags of `python -m felab.mock_server`, those of
`python -m felab replay` (where a comma-separated list sweeps a setting) and the
flags real-time replay starts a practice server with; `Settings.__post_init__`
checks every value against them. A new setting is one field here.

The timing defaults reproduce lesson 06: a cold 3,045-token opening takes
15 + 3045 / 2.5 ≈ 1,233 ms; the same opening cached, about 35 ms.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import typing
from dataclasses import dataclass
from typing import Any

from felab.mock_server.cache import BLOCK_TOKENS, CACHE_MODES
from felab.mock_server.faults import FAULT_TYPES
from felab.mock_server.fleet import ROUTES
from felab.mock_server.loop import POLICIES
from felab.mock_server.timing import TimingModel

DEFAULT_PORT = 8765
MODEL_ID = "felab-practice"
HEALTH_NAME = "felab practice server"
"""What `GET /health` calls this server, so a second one can tell it from another program."""
FLEET_ROLE_ENV = "FELAB_FLEET_ROLE"
"""Set by `make fleet` for each process it starts ("worker 2"): a worker's GET /health says so,
so that a second server on its port is told it is part of a fleet, not a lone one to kill."""
MAX_REPLICAS = 256
"""The most replicas one practice server (or one replayed fleet) models."""
UNLIMITED = sys.maxsize
"""`--cache-blocks unlimited`: no trace has that many blocks, so nothing is ever evicted."""

# ── What a real engine could have: every setting's bounds come from these ──────
MAX_SEATS = 1024
"""The most seats a replica has: llama.cpp's -np and vLLM's --max-num-seqs run to a few hundred
(vLLM's default is 256); each seat is a list the server keeps, so 1e8 of them is memory, not a model."""
MAX_TOKENS = 16 * 1024 * 1024
"""The largest count of tokens any setting names (context, batch, piece, block, reply): above the
largest context an engine serves today (10M tokens)."""
DAY_S = 86_400.0
"""The longest a request's modelled time may be. The terms of the timing model (timing.py) each
grow with the request; each is capped so that, on the longest request the settings allow (a prompt
and reply filling --context-tokens), it takes at most a TERM_SHARE_S of the day: the sum, with the
overhead's minute, is under a day. A profile (or flags) beyond it would book first tokens years
away, which no engine does and which timers cannot hold."""
MAX_OVERHEAD_MS = 60_000.0
"""A minute: no engine's fixed cost per request (parsing, scheduling, the first decode step) is near it."""
TERMS = 6
"""The terms that grow with a request: prefill's linear term, attention, the cached tokens' cost,
the last piece of few rows, decode's linear term, decode's context term."""
TERM_SHARE_S = (DAY_S - MAX_OVERHEAD_MS / 1000) / TERMS
"""Each term's part of the day on the longest request: 14,390 s (4.0 hours)."""

MODEL, SERVER = "model", "server"
"""A setting's scope: MODEL settings shape the modelled engine and fleet (replay has them too,
and can sweep them); SERVER settings are the HTTP server's own (the server's flags only)."""


def setting(
    default: Any,
    help: str,
    *,
    scope: str = MODEL,
    flag: str | None = None,
    low: float | None = None,
    low_open: bool = False,
    high: float | None = None,
    choices: tuple[str, ...] | None = None,
    words: dict[str, Any] | None = None,
    column: str | None = None,
    unit: str | None = None,
    twin: bool = False,
) -> Any:
    """Declare one setting: its default and help, and the facts its flags are written from.

    `low`/`high` bound a number (`low_open`: the bound itself is refused); `choices` the words a
    text may be (for a tuple: each item); `words` are spellings a learner may type for a value
    (`{"never": None}`); `flag` the flag's name when it is not the field's (`cache_ttl_s` is
    `--cache-ttl`); `column` its heading in replay's tables; `unit` what a value counts, when the
    field's name does not end in it (`unit_of()`).

    `twin=True` marks a setting of a calibrated twin: `felab calibrate` measures it and writes it
    in a profile, and a learner never types it. The practice server's `--help` leaves it out and
    `--help-twin` lists it; its flag and its profile line work all the same. (Every twin setting
    at its default is the lesson's model.)
    """
    facts: dict[str, Any] = {"help": help, "scope": scope, "flag": flag, "low": low, "low_open": low_open}
    facts |= {"high": high, "choices": choices, "words": words or {}, "column": column, "unit": unit}
    facts["twin"] = twin
    return dataclasses.field(default=default, metadata=facts)


@dataclass(frozen=True)
class Settings:
    """The practice server's settings: the modelled hardware, the fleet, and the faults."""

    model: str = setting(MODEL_ID, "the model id it serves", scope=SERVER)
    overhead_ms: float = setting(
        15.0, "fixed cost of every request (parsing, scheduling) before its prefill may start, ms",
        low=0, high=MAX_OVERHEAD_MS, column="overhead ms",
    )  # fmt: skip
    # bound (term_bounds): at least context / TERM_SHARE_S, a full context's prompt read in 4.0 hours
    prefill_tps: float = setting(
        2500.0, "prefill rate, prompt tokens per second, one prompt at a time per replica",
        low=0, low_open=True, column="prefill tok/s",
    )  # fmt: skip
    # bound (term_bounds): at most 2 x TERM_SHARE_S / context²: u·(c + u/2) <= context²/2 pairs
    prefill_attention_ns: float = setting(
        0.0, "attention's cost per new prompt token per token before it, ns: prefill grows faster than "
        "linearly with the prompt (0: linear, as lesson 06's)",
        low=0, column="attention ns", twin=True,
    )  # fmt: skip
    # bound (term_bounds): at most 2 x TERM_SHARE_S / context²: u²/2 <= context²/2
    masked_attention_ns: float = setting(
        0.0, "what each pair of a piece's new tokens costs again when the engine computes them as a "
        "whole square and masks half (mlx_lm on a CPU), ns (0: a causal kernel, as llama.cpp's)",
        low=0, column="masked ns", twin=True,
    )  # fmt: skip
    # bound (term_bounds): at least context x (1 + slowdown x (seats - 1)) / TERM_SHARE_S
    decode_tps: float = setting(
        400.0, "decode rate per stream, reply tokens per second, with one stream decoding",
        low=0, low_open=True, column="decode tok/s",
    )  # fmt: skip
    decode_slowdown: float = setting(
        0.0, "how much each further stream decoding on a replica slows a stream: interval = "
        "1/decode-tps x (1 + slowdown x (streams - 1)) (0: streams do not slow each other)",
        low=0, high=10, column="decode slowdown", twin=True,
    )  # fmt: skip
    # bound (term_bounds): at most TERM_SHARE_S / context, what a full context cached costs
    cached_token_us: float = setting(
        0.0, "cost of each prompt token found in the cache, paid once in the prefill of the request "
        "that reuses it, µs: prefill after c cached tokens takes c x this more (an engine copying a "
        "cached prompt back into a seat, or offloaded blocks; 0: none)",
        low=0, column="cached µs", twin=True,
    )  # fmt: skip
    # bound (term_bounds): at most 4 x TERM_SHARE_S / (seats x context²): R·c <= context²/4 per stream
    decode_context_ns: float = setting(
        0.0, "what each prompt token adds to the time of every reply token, ns: decode attends to "
        "the whole context (0: decode does not slow with the prompt)",
        low=0, column="decode ctx ns", twin=True,
    )  # fmt: skip
    ubatch_tokens: int | None = setting(
        None, "prompt tokens computed in one piece (llama.cpp -ub, 512): the last piece holds the rest; "
        "`none`: a prompt is one piece (matters only with --tile-tokens)",
        low=1, high=MAX_TOKENS, words={"none": None}, column="ubatch tokens", twin=True,
    )  # fmt: skip
    tile_tokens: int = setting(
        0, "a last piece with fewer tokens than this is read one token at a time, each a pass over the "
        "whole context (llama.cpp's CPU attention tiles: 64); 0: never",
        low=0, high=MAX_TOKENS, column="tile tokens", twin=True,
    )  # fmt: skip
    # bound (term_bounds): at most TERM_SHARE_S / ((tile - 1) x context): rows < tile, each a pass
    untiled_ns: float = setting(
        0.0, "with --tile-tokens: what each token of such a piece costs per token of context, ns "
        "(0: nothing)",
        low=0, column="untiled ns", twin=True,
    )  # fmt: skip
    # bound: tokenizers give 1 to 8 characters a token (1e-6 made a few words millions of tokens)
    chars_per_token: float = setting(
        4.0, "how the modelled engine counts text: characters per token (about 4 in English)",
        scope=SERVER, low=0.5, high=20, twin=True,
    )  # fmt: skip
    tokenizer: str | None = setting(
        None, "count a prompt's tokens with the engine's tokenizer: the model file the server loaded "
        "(.gguf) or its tokenizer.json (tokens.py); `none`: from characters (--chars-per-token)",
        scope=SERVER, words={"none": None}, twin=True,
    )  # fmt: skip
    template_tokens: int = setting(
        0, "with --tokenizer: tokens the engine's chat template adds to a prompt beyond the practice "
        "server's plain one (calibrate fits it; may be negative)",
        scope=SERVER, low=-10_000, high=10_000, twin=True,
    )  # fmt: skip
    template_message_tokens: int = setting(
        0, "with --tokenizer: tokens each message after the first adds to the engine's count beyond the "
        "practice server's plain template (its role markers are other tokens; calibrate fits it)",
        scope=SERVER, low=-1_000, high=1_000, twin=True,
    )  # fmt: skip
    template_reply_tokens: int = setting(
        0, "with --tokenizer: tokens the engine's reply opener (the template's last tokens) has beyond "
        "a message's, taken from the first message: the count is the same, but a question after a "
        "cached opening finds as many cached as the engine does (calibrate fits it from a cached count)",
        scope=SERVER, low=-1_000, high=1_000, twin=True,
    )  # fmt: skip
    cache_mode: str = setting(
        "blocks", "how a replica reuses earlier prompts: blocks (hashed blocks any request may reuse: "
        "vLLM, SGLang) or seat-prefix (each seat keeps its last prompt: llama.cpp; needs --seats)",
        choices=CACHE_MODES, column="cache mode",
    )  # fmt: skip
    seats: int | None = setting(
        None, "requests a replica runs at once (llama.cpp -np, vLLM --max-num-seqs); the rest wait "
        "for a seat, and each seat has --context-tokens / seats of context; `none`: no limit",
        low=1, high=MAX_SEATS, words={"none": None}, column="seats",
    )  # fmt: skip
    batch_tokens: int | None = setting(
        None, "prompt tokens prefilled in one batch (llama.cpp -b): a prompt's first token comes when "
        "the batch holding its last token is done, and that batch is filled with the prompts waiting "
        "behind it; `none`: each prompt's first token comes when its own prefill ends",
        low=1, high=MAX_TOKENS, words={"none": None}, column="batch tokens",
    )  # fmt: skip
    step_policy: str = setting(
        "llamacpp", "with --batch-tokens: whose prompt tokens fill a step, after a token of each stream "
        "decoding: llamacpp (by seat: llama.cpp walks its slots in order), vllm (by arrival: vLLM's and "
        "SGLang's chunked prefill) or mlx (by arrival, prefill first: a first token comes two steps "
        "after its prompt's last piece, so it waits for the pieces read in them, as mlx_lm.server's "
        "batches; each prompt puts up to --batch-tokens of its own in a step, mlx_lm's "
        "--prefill-step-size, every piece computed as long as the step's longest; and a request "
        "waits for the run of steps under way to pass 0.5 s, mlx_lm's time budget, before it is "
        "taken)",
        choices=POLICIES, column="step policy",
    )  # fmt: skip
    batch_slowdown: float = setting(
        0.0, "with --batch-tokens: how much more each prompt token costs in a batch holding parts of "
        "several prompts, as a share of its time at the prefill rate (0.15: 15% more; 0: the same); "
        "calibrate measures it from prompts sent at once",
        low=-0.5, high=2.0, column="batch slowdown", twin=True,
    )  # fmt: skip
    host_cache_tokens: int = setting(
        0, "with --cache-mode seat-prefix: tokens of prompts that left their seats kept in host memory "
        "(llama-server's --cache-ram; its -c at least), restored into a seat when a prompt shares a "
        "prefix with one, instead of read again; 0: off",
        low=0, high=MAX_TOKENS, column="host cache tokens", twin=True,
    )  # fmt: skip
    host_restore_us: float = setting(
        0.0, "with --host-cache-tokens: what copying a saved prompt back into a seat costs per token, "
        "µs, before its prefill may start (llama-server: 1.3 ms for 3,912 tokens of 512 bytes, about "
        "0.3; grows with the model's KV bytes a token; 0: free)",
        low=0, column="host restore µs", twin=True,
    )  # fmt: skip
    cache_blocks: int = setting(
        4096, "prefix-cache capacity per replica, in blocks (least recently used evicted); `unlimited`",
        low=0, words={"unlimited": UNLIMITED}, column="cache blocks",
    )  # fmt: skip
    block_tokens: int = setting(
        BLOCK_TOKENS, "tokens per cache block (only full blocks are cached; Mooncake's traces use 512)",
        low=1, high=MAX_TOKENS, column="block tokens",
    )  # fmt: skip
    context_tokens: int = setting(
        131_072, "largest prompt + reply, tokens (with --seats: split evenly between the seats); a "
        "longer request is refused",
        low=1, high=MAX_TOKENS, column="context tokens",
    )  # fmt: skip
    max_body_bytes: int = setting(
        8 * 1024 * 1024, "largest request body, bytes (a larger one gets 413)",
        scope=SERVER, low=1, high=2**30,
    )  # fmt: skip
    idle_timeout_s: int = setting(
        5, "seconds before a connection with no request under way is closed",
        scope=SERVER, flag="--idle-timeout", low=1, high=3600,
    )  # fmt: skip
    request_timeout_s: float = setting(
        10.0, "seconds a request's headers, then its body, may take to arrive (a late body gets 408)",
        scope=SERVER, flag="--request-timeout", low=0, low_open=True, high=3600,
    )  # fmt: skip
    default_max_tokens: int = setting(
        16, "reply length when a request sets neither max_tokens nor max_completion_tokens",
        scope=SERVER, low=1, high=MAX_TOKENS,
    )  # fmt: skip
    replicas: int = setting(
        1, "copies behind one address, each with its own cache and prefill lane",
        low=1, high=MAX_REPLICAS, column="replicas",
    )  # fmt: skip
    route: str = setting(
        "affinity",
        "how a request picks a replica: random, round-robin, affinity (by x-session-affinity, user "
        "or a trace's session_id; else random), prefix (cache-aware), sglang-cache-aware (SGLang's "
        "router's rule)",
        choices=ROUTES, column="route",
    )  # fmt: skip
    route_prefill_weight: float = setting(
        1.0, "--route prefix: weight of the prefill a replica would do (its backlog and the prompt's "
        "uncached tokens) against the tokens it serves (Dynamo's --kv-overlap-score-weight)",
        low=0, column="prefill weight",
    )  # fmt: skip
    route_cache_threshold: float = setting(
        0.3, "--route prefix: a prompt no replica holds more than this share of is cold and goes to "
        "the cheapest replica caching least (SGLang's --cache-threshold)",
        low=0, high=1, column="cache threshold",
    )  # fmt: skip
    route_temperature: float = setting(
        0.0, "--route prefix: 0 takes the cheapest replica (ties drawn with --seed); above 0, a "
        "softmax draw over the replicas' normalised costs (Dynamo's --router-temperature)",
        low=0, column="temperature",
    )  # fmt: skip
    cache_ttl_s: float | None = setting(
        None, "seconds a cached block may stay unused before it expires; `never`",
        flag="--cache-ttl", low=0, low_open=True, words={"never": None, "none": None}, column="TTL s",
    )  # fmt: skip
    fail_rate: float = setting(
        0.0, "share of valid chat requests that fail on purpose (0.05 = 5%)", scope=SERVER, low=0, high=1
    )
    fail_types: tuple[str, ...] = setting(
        FAULT_TYPES,
        "which failures --fail-rate injects, comma-separated: 429, 503, 500, cut (a stream cut mid-way)",
        scope=SERVER, choices=FAULT_TYPES,
    )  # fmt: skip
    seed: int = setting(0, "seed for random routing and failure draws, so a run can be repeated")

    def __post_init__(self) -> None:
        """Every value within its declared bounds; a bad one is a ValueError naming its flag.
        (Every check of a setting lives here: a check between two settings goes below the loop.)"""
        for f in dataclasses.fields(self):
            message = problem(f, getattr(self, f.name))
            if message:
                raise ValueError(message)
        if self.seats is not None and self.seats > self.context_tokens:
            raise ValueError(f"--seats {self.seats} leaves no context to a seat: at most --context-tokens")
        if self.ubatch_tokens is not None and self.tile_tokens > self.ubatch_tokens:
            raise ValueError(
                f"--tile-tokens {self.tile_tokens} is more than --ubatch-tokens {self.ubatch_tokens}: "
                f"every piece would be read a row at a time; give a tile size up to the piece size"
            )
        if self.cache_mode == "seat-prefix" and self.seats is None:
            raise ValueError("--cache-mode seat-prefix keeps a prompt per seat: give it --seats N, a number")
        if self.host_restore_us > 1e6 / self.prefill_tps:  # (so a request stays within its day too)
            raise ValueError(
                f"--host-restore-us {self.host_restore_us:g} is more than reading the token again costs "
                f"(1e6 / --prefill-tps = {1e6 / self.prefill_tps:.3g} µs): a server would read it, not "
                f"restore it. Give at most that."
            )
        if self.host_cache_tokens and self.cache_mode != "seat-prefix":
            raise ValueError(
                "--host-cache-tokens keeps prompts that left their seats: give --cache-mode seat-prefix "
                "and --seats too (with --cache-mode blocks, blocks stay cached whichever request runs: "
                "no prompt leaves a seat)"
            )
        message = too_slow(self)
        if message:
            raise ValueError(message)

    @property
    def timing(self) -> TimingModel:
        return TimingModel(
            self.overhead_ms,
            self.prefill_tps,
            self.decode_tps,
            attention_ns=self.prefill_attention_ns,
            masked_attention_ns=self.masked_attention_ns,
            decode_slowdown=self.decode_slowdown,
            cached_token_us=self.cached_token_us,
            decode_context_ns=self.decode_context_ns,
            ubatch_tokens=self.ubatch_tokens,
            tile_tokens=self.tile_tokens,
            untiled_ns=self.untiled_ns,
            batch_slowdown=self.batch_slowdown,
        )


NAME_UNITS = {
    "_ms": "ms", "_us": "µs", "_ns": "ns", "_s": "s", "_tps": "tokens/s",
    "_tokens": "tokens", "_bytes": "bytes", "_blocks": "blocks",
}  # fmt: skip
"""A setting's unit, read from the ending of its name (the kit's rule: `overhead_ms`, `prefill_tps`)."""


def unit_of(f: dataclasses.Field) -> str:
    """What a value of this setting counts: its declared unit, else its name's ending (`NAME_UNITS`),
    else nothing (a share, a count, a word)."""
    if f.metadata["unit"] is not None:
        return f.metadata["unit"]
    return next((u for end, u in NAME_UNITS.items() if f.name.endswith(end)), "")


def flag(f: dataclasses.Field) -> str:
    """The field's flag: its declared one, else its name with dashes (`prefill_tps`: --prefill-tps)."""
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")


@functools.cache
def kind(name: str) -> type:
    """What a value of this field is: int, float, str or tuple (an optional float is a float)."""
    hint = typing.get_type_hints(Settings)[name]
    if typing.get_origin(hint) is tuple:
        return tuple
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def noun(of: type) -> str:
    """A value of this kind, in words (for messages)."""
    return {int: "a whole number", float: "a number", tuple: "a comma-separated list"}.get(of, "a word")


def spell(f: dataclasses.Field, value: Any) -> str:
    """The value as a learner would type it: a word where one stands for it, `2500` not `2500.0`
    (the flags' defaults are written so, and messages name a value so)."""
    for word, meant in f.metadata["words"].items():
        if value == meant and type(value) is type(meant):
            return word
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def number(bound: float) -> str:
    """A bound as typed: a whole one in full (16777216, not 1.67772e+07), else as %g."""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def problem(f: dataclasses.Field, value: Any) -> str | None:
    """What is wrong with `value` for this field, in a sentence naming its flag; None if nothing."""
    m, name = f.metadata, flag(f)
    shown = repr(value) if isinstance(value, str) else spell(f, value)
    if any(value is meant or value == meant for meant in m["words"].values()):
        return None
    of = kind(f.name)
    numeric = of in (int, float)
    if numeric and (isinstance(value, bool) or not isinstance(value, int if of is int else (int, float))):
        return f"{name} must be {noun(of)}, not {shown}"
    if numeric and not math.isfinite(value):
        return f"{name} must be a finite number, not {shown}"
    if m["low"] is not None and (value <= m["low"] if m["low_open"] else value < m["low"]):
        return f"{name} must be {'above' if m['low_open'] else 'at least'} {number(m['low'])}, not {shown}"
    if m["high"] is not None and value > m["high"]:
        return f"{name} must be at most {number(m['high'])}, not {shown}"
    chosen = value if of is tuple else (value,)
    if m["choices"] and (not chosen or set(chosen) - set(m["choices"])):
        among = ", ".join(m["choices"])
        return f"{name} must be {'some' if of is tuple else 'one'} of {among}, not {shown}"
    return None


def term_bounds(s: Settings) -> list[tuple[str, float, float, str]]:
    """Each term's setting, its value, its bound and the bound's side ("at most", "at least"): the
    value at which the term takes TERM_SHARE_S on the longest request these settings allow (prompt
    plus reply filling --context-tokens, or with k seats one seat's share of it, C: a request longer
    than its seat is refused, room.py). From the cost terms (terms/), term by term:

        prefill      C / prefill_tps                      prefill_tps >= C / share
        attention    attention · u·(c + u/2) <= attention · C²/2        <= 2 share / C²
        masked       masked · u²/2 <= masked · C²/2                     <= 2 share / C²
        cached       cached_token_us · c <= cached_token_us · C         <= share / C
        last piece   untiled · rows·(c + u), rows < tile: <= untiled · (tile - 1) · C
        decode       R · (1 + slowdown·(k - 1)) / decode_tps, R <= C  (no seats: one stream)
        decode ctx   decode_context · R · k·c (a step of k streams), R + c <= C:  <= decode_context · k·C²/4
    """
    k, share = s.seats or 1, TERM_SHARE_S
    c, streams = s.context_tokens / k, 1 + s.decode_slowdown * (k - 1)
    bounds = [
        ("prefill_tps", s.prefill_tps, c / share, "at least"),
        ("prefill_attention_ns", s.prefill_attention_ns, 2 * share / c**2 * 1e9, "at most"),
        ("masked_attention_ns", s.masked_attention_ns, 2 * share / c**2 * 1e9, "at most"),
        ("cached_token_us", s.cached_token_us, share / c * 1e6, "at most"),
        ("decode_tps", s.decode_tps, c * streams / share, "at least"),
        ("decode_context_ns", s.decode_context_ns, 4 * share / (k * c**2) * 1e9, "at most"),
    ]
    if s.tile_tokens > 1:
        bounds.append(("untiled_ns", s.untiled_ns, share / ((s.tile_tokens - 1) * c) * 1e9, "at most"))
    return bounds


def too_slow(s: Settings) -> str | None:
    """The first term that would make the longest request take more than its part of a day, in a
    sentence naming the setting, its value and its bound here; None if every term keeps within."""
    seat = f" / --seats {s.seats}" if s.seats else ""
    for name, value, bound, side in term_bounds(s):
        if (value < bound) if side == "at least" else (value > bound):
            f = next(f for f in dataclasses.fields(Settings) if f.name == name)
            return (
                f"{flag(f)} {spell(f, value)} would make the longest request (a prompt and reply filling "
                f"--context-tokens {s.context_tokens}{seat}) take more than a day: with that context it must "
                f"be {side} {bound:.3g}. Give a value a real engine has, or a smaller --context-tokens."
            )
    return None


DEFAULTS = Settings()
