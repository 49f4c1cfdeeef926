"""One streamed chat completion, timed the way the field times it.

Time to first token (TTFT) is the wait a user feels before the reply starts:

    t0 = perf_counter()            # just before the request is sent
    ... stream ...
    first chunk whose delta carries text  ->  ttft = now - t0

Reasoning text (`reasoning_content`) counts as text: it is generated too.
Role-only chunks and empty deltas do not count (SGLang, AIPerf and
inference-perf use the same rule; vLLM's `bench serve` stops at the first
chunk of any kind, which can be a little earlier). Latency ends at the last
token, not at the usage frame or `[DONE]`.

The client reads within the kit's limits (felab/guarded.py: a deadline for the whole reply,
an idle gap between events, a size cap): a server that trickles or never ends its stream
stops the call with one message naming it. Watching costs microseconds (about 16 us before a
request's first byte and 2 us a chunk, measured with timeit), nothing a TTFT in milliseconds shows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import openai

from felab.connect import TargetClient
from felab.errors import FelabError
from felab.explain import explain
from felab.guarded import stopped_by
from felab.paths import from_here
from felab.targets import Target


@dataclass
class Usage:
    """Token counts as the server reported them; `None` where it reported nothing."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass
class CallResult:
    """What one streamed call measured."""

    ttft_ms: float
    """Time to the first chunk with content, from just before the request."""
    total_ms: float
    """Time to the last chunk with content (the whole reply)."""
    output_tokens: int
    """Tokens generated: the server's count, else the number of content chunks."""
    usage: Usage = field(default_factory=Usage)
    itl_ms: list[float] = field(default_factory=list)
    """Gaps between consecutive content chunks (inter-token latency)."""
    ended_empty: bool = False
    """The reply carried no text, and was timed by its end (`stream_once(time_empty=True)`)."""

    @property
    def prompt_tokens(self) -> int | None:
        return self.usage.prompt_tokens

    @property
    def cached_tokens(self) -> int | None:
        return self.usage.cached_tokens


def read_usage(usage: Any, timings: Any = None) -> Usage:
    """Read token counts from an OpenAI `usage` object, or llama.cpp's `timings`.

    `cached_tokens` comes from `usage.prompt_tokens_details.cached_tokens`
    (OpenAI, vLLM, SGLang, Fireworks, MLX, recent llama.cpp). Older llama.cpp
    builds report it only as `timings.cache_n`.
    """
    out = Usage()
    if usage is not None:
        out.prompt_tokens = getattr(usage, "prompt_tokens", None)
        out.completion_tokens = getattr(usage, "completion_tokens", None)
        details = getattr(usage, "prompt_tokens_details", None)
        out.cached_tokens = getattr(details, "cached_tokens", None)
    if isinstance(timings, dict):
        if out.cached_tokens is None and isinstance(timings.get("cache_n"), int):
            out.cached_tokens = timings["cache_n"]
        if out.prompt_tokens is None and isinstance(timings.get("prompt_n"), int):
            out.prompt_tokens = timings["prompt_n"] + (out.cached_tokens or 0)
    return out


def has_text(delta: Any) -> bool:
    """Does this delta carry generated text? Reasoning models (gpt-oss, DeepSeek R1, Qwen3)
    stream their thinking first, as `reasoning_content` (or `reasoning`): those are
    generated tokens too, so they end the wait for the first token."""
    if delta is None:
        return False
    reasoning = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
    return bool(delta.content or reasoning)


def _target(api: openai.OpenAI) -> Target:
    if isinstance(api, TargetClient):
        return api.target
    return Target("server", str(api.base_url), "", "", False)


def cut_off(exc: openai.OpenAIError, target: Target, tokens: int) -> FelabError:
    """A reply that started and then broke off (connection closed or stalled before its end)."""
    how = "stalled" if isinstance(exc, openai.APITimeoutError) else "was cut off (the connection closed)"
    return FelabError(
        f"The reply from the {target.name} server at {target.base_url} {how} after {tokens} tokens, before "
        f"its end. The server may have restarted, dropped the connection or hit an error mid-reply: run "
        f"again; if it keeps happening, check the server (`{from_here('make check')}`) and restart it."
    )


def no_text(target: Target, model: str) -> FelabError:
    """A reply that ended without one chunk of text: nothing to time, so nothing to record."""
    return FelabError(
        f"The {target.name} server at {target.base_url} ended its reply without any text (model "
        f"{model}): no chunk carried content, so there is no first token to time, and nothing was "
        f"recorded. A model that is not a chat model, a server that is still loading, or a proxy "
        f"that dropped the stream's content can do this. See what the server serves with "
        f"`{from_here('make check')}`, then pass a chat model with --model."
    )


def stream_once(
    api: openai.OpenAI,
    model: str,
    messages: list[dict],
    max_tokens: int = 48,
    time_empty: bool = False,
    **extra: Any,
) -> CallResult:
    """Stream one chat completion and measure it.

    `extra` goes to the request as is (for example `user="session-1"`).
    Raises a FelabError with a learner-facing message if the call fails.

    A reply with no text at all has no first token to time, and is an error (`no_text`), unless
    `time_empty`: then it is timed by the first chunk that ends it (`finish_reason`). A model that
    ends its reply at once generated one token, its end-of-text, as soon as it had read the prompt,
    so that chunk comes when a first token would have (`ended_empty` says so). Calibrate's prefill
    probes use this: they time the reading of the prompt, which such a reply measures as well.
    """
    extra.setdefault("stream_options", {"include_usage": True})
    usage, timings = None, None
    ttft = last = ended = None
    gaps: list[float] = []
    chunks = 0
    # The SDK loads this lazily: keep that out of the clock. (Typed Any: its create() overloads
    # cannot be told apart with **extra.)
    completions: Any = api.chat.completions
    stream = None
    t0 = time.perf_counter()
    try:
        stream = completions.create(
            model=model, messages=messages, max_tokens=max_tokens, stream=True, **extra
        )
        for chunk in stream:
            if chunk.choices and has_text(chunk.choices[0].delta):
                now = time.perf_counter()
                if last is None:
                    ttft = now - t0
                else:
                    gaps.append((now - last) * 1000)
                last = now
                chunks += 1
            elif ended is None and chunk.choices and chunk.choices[0].finish_reason:
                ended = time.perf_counter() - t0
            usage = chunk.usage or usage
            timings = getattr(chunk, "timings", None) or timings
    except openai.OpenAIError as exc:
        if (stopped := stopped_by(exc)) is not None:  # a limit of the kit's (felab/guarded.py), the
            raise stopped from None  # first cause: not a connection error a caller may pass over
        if stream is not None and isinstance(exc, openai.APIConnectionError):  # cut off mid-way
            # (an error event inside the stream, as TGI sends one, is the server's answer: explained)
            raise cut_off(exc, _target(api), chunks) from exc
        raise explain(exc, _target(api)) from exc
    got = read_usage(usage, timings)
    if ttft is None or last is None:  # no text at all: there is no first token to time
        if not time_empty or ended is None:
            raise no_text(_target(api), model)
        return CallResult(
            ttft_ms=ended * 1000,
            total_ms=ended * 1000,
            output_tokens=got.completion_tokens if got.completion_tokens is not None else 0,
            usage=got,
            ended_empty=True,
        )
    return CallResult(
        ttft_ms=ttft * 1000,
        total_ms=(last - t0) * 1000,
        output_tokens=got.completion_tokens if got.completion_tokens is not None else chunks,
        usage=got,
        itl_ms=gaps,
    )


def usage_once(
    api: openai.OpenAI, model: str, messages: list[dict], max_tokens: int = 8, **extra: Any
) -> Usage:
    """One non-streamed call, for the token counts the server reports in `usage`."""
    try:
        completions: Any = api.chat.completions  # as in stream_once
        reply = completions.create(model=model, messages=messages, max_tokens=max_tokens, **extra)
    except openai.OpenAIError as exc:
        raise explain(exc, _target(api)) from exc
    return read_usage(reply.usage, getattr(reply, "timings", None))
