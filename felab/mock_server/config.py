"""Everything the practice server can be told, with its default, in one place.

Each field is a flag of `python -m felab.mock_server` (and of `python -m felab replay`); the
flags take their defaults from `DEFAULTS`, so a default is written once, here. The timing
defaults reproduce lesson 06: a cold 3,045-token opening takes 15 + 3045 / 2.5 ≈ 1,233 ms;
the same opening cached, about 35 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from felab.mock_server.cache import BLOCK_TOKENS, CACHE_MODES
from felab.mock_server.faults import FAULT_TYPES
from felab.mock_server.fleet import ROUTES
from felab.mock_server.timing import TimingModel

DEFAULT_PORT = 8765
MODEL_ID = "felab-practice"
HEALTH_NAME = "felab practice server"
"""What `GET /health` calls this server, so a second one can tell it from another program."""


@dataclass(frozen=True)
class Settings:
    """The practice server's settings: the modelled hardware, the fleet, and the faults."""

    model: str = MODEL_ID
    overhead_ms: float = 15.0
    """Fixed cost of every request (parsing, scheduling), before its prefill may start."""
    prefill_tps: float = 2500.0
    """Prompt tokens prefilled per second, one prompt at a time."""
    prefill_attention_ns: float = 0.0
    """Attention's extra cost per (new token x token in context), in nanoseconds: prefill grows
    faster than linearly with the prompt (timing.py). 0: prefill is linear, as lesson 06's."""
    decode_tps: float = 400.0
    """Reply tokens per second, per stream, with one stream decoding."""
    decode_slowdown: float = 0.0
    """How much each further stream decoding on the replica slows a stream: the interval is
    1/decode_tps x (1 + decode_slowdown x (streams - 1)). 0: streams do not slow each other."""
    chars_per_token: float = 4.0
    """How the modelled engine counts text: characters per token (real tokenizers: about 4 in English)."""
    cache_mode: str = "blocks"
    """"blocks": hashed full blocks shared by every request (vLLM, SGLang); "seat-prefix": each
    seat keeps its last prompt and reuses the longest common prefix with it (llama.cpp)."""
    seats: int | None = None
    """Requests a replica runs at once (llama.cpp -np, vLLM --max-num-seqs); the rest wait for a
    seat, first come first served. With seats, each seat's context is context_tokens // seats.
    None: no limit."""
    cache_blocks: int = 4096
    """Prefix-cache capacity per replica, in blocks; the least recently used block is evicted."""
    block_tokens: int = BLOCK_TOKENS
    """Tokens per cache block (vLLM's default is 16; Mooncake's trace uses 512)."""
    context_tokens: int = 131_072
    """Largest prompt plus reply, in tokens (per replica; split evenly between its seats, if set)."""
    max_body_bytes: int = 8 * 1024 * 1024
    idle_timeout_s: int = 5
    """A connection with no request under way is closed after this many seconds (connections.py)."""
    request_timeout_s: float = 10.0
    """A request's head, and its body, must arrive within this many seconds (else closed, or 408)."""
    default_max_tokens: int = 16
    """Reply length when a request sets neither max_tokens nor max_completion_tokens."""
    replicas: int = 1
    route: str = "affinity"
    route_prefill_weight: float = 1.0
    """--route prefix: weight of the prefill a replica would do (its backlog and the prompt's
    uncached tokens) against the tokens it is serving (Dynamo's --kv-overlap-score-weight, 1)."""
    route_cache_threshold: float = 0.3
    """--route prefix: a prompt no replica holds more than this share of is cold, and goes to the
    cheapest replica as if none held any, the one caching least among equals (SGLang's
    --cache-threshold, 0.3)."""
    route_temperature: float = 0.0
    """--route prefix: 0 takes the cheapest replica (ties drawn with --seed); above 0, a softmax
    draw over the replicas' normalised costs (Dynamo's --router-temperature, 0)."""
    cache_ttl_s: float | None = None
    """Seconds a block may stay unused before it expires; None: never."""
    fail_rate: float = 0.0
    fail_types: tuple[str, ...] = FAULT_TYPES
    seed: int = 0
    """Seeds random routing and the failure draws, so a run can be repeated."""

    def __post_init__(self) -> None:
        if self.overhead_ms < 0 or self.prefill_tps <= 0 or self.decode_tps <= 0:
            raise ValueError("rates must be above 0 and the overhead 0 or more")
        if self.cache_blocks < 0 or self.block_tokens < 1 or self.replicas < 1:
            raise ValueError("cache size must be 0 or more, block size and replicas 1 or more")
        if self.idle_timeout_s <= 0 or self.request_timeout_s <= 0:
            raise ValueError("timeouts must be above 0")
        if self.prefill_attention_ns < 0 or self.decode_slowdown < 0 or self.chars_per_token <= 0:
            raise ValueError("the attention and slowdown terms must be 0 or more, chars per token above 0")
        if self.cache_mode not in CACHE_MODES:
            raise ValueError(f"cache mode must be one of {', '.join(CACHE_MODES)}, not {self.cache_mode!r}")
        if self.seats is not None and not 1 <= self.seats <= self.context_tokens:
            raise ValueError("seats must be 1 or more, and no more than the context's tokens")
        if self.cache_mode == "seat-prefix" and self.seats is None:
            raise ValueError("cache mode seat-prefix keeps a prompt per seat: give the number of seats")
        if self.route_prefill_weight < 0 or self.route_temperature < 0:
            raise ValueError("the router's prefill weight and temperature must be 0 or more")
        if not 0 <= self.route_cache_threshold <= 1:
            raise ValueError("the router's cache threshold is a share of the prompt, from 0 to 1")
        if self.route not in ROUTES:
            raise ValueError(f"route must be one of {', '.join(ROUTES)}, not {self.route!r}")

    @property
    def timing(self) -> TimingModel:
        return TimingModel(
            self.overhead_ms,
            self.prefill_tps,
            self.decode_tps,
            attention_ns=self.prefill_attention_ns,
            decode_slowdown=self.decode_slowdown,
        )


DEFAULTS = Settings()
