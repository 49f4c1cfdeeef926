"""The practice server speaks the protocol as real servers do, checked with clients nobody here wrote.

The openai SDK drives chat, legacy completions (streamed and not) and models.retrieve;
raw httpx sends what the SDK will not (wrong types, values out of range) and reads the
raw chunks (is the `usage` key there, and null?); prometheus_client's own parser reads
/metrics, whose counters must equal the usage the client saw, per replica and in total.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from felab.mock_server.launch import practice_server

MODEL = "felab-practice"
OPENING = "You are a careful assistant who answers in full sentences. " * 60  # ~870 tokens


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="not-needed", max_retries=0)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """One practice server for the module's contract tests (none of them reads its counters)."""
    with practice_server("--prefill-tps", "50000") as base:
        yield base


def raw_events(url: str, path: str, body: dict) -> list[dict]:
    """The data of every server-sent event of a streamed reply, as sent (before [DONE])."""
    with httpx.stream("POST", f"{url}{path}", json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        lines = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


# ── Chat and legacy completions, through the openai SDK ─────────────────────


def test_chat_whole_and_streamed_with_the_sdk(url: str) -> None:
    api = sdk(url)
    messages = [{"role": "system", "content": OPENING}, {"role": "user", "content": "chat?"}]
    whole = api.chat.completions.create(model=MODEL, messages=messages, max_tokens=4)
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.content == "This is the practice"
    assert whole.choices[0].finish_reason == "length"
    stream = api.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=4, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0  # the same prompt, again


def test_legacy_completion_whole_with_the_sdk(url: str) -> None:
    api = sdk(url)
    prompt = OPENING + "Complete this: the sky is"
    first = api.completions.create(model=MODEL, prompt=prompt, max_tokens=5)
    assert first.object == "text_completion"
    assert first.id.startswith("cmpl-")
    assert first.choices[0].text == "This is the practice server"
    assert first.choices[0].finish_reason == "length"
    assert first.usage.completion_tokens == 5
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    again = api.completions.create(model=MODEL, prompt=[prompt], max_tokens=5)  # a list of one string
    assert again.usage.prompt_tokens == first.usage.prompt_tokens
    assert again.usage.prompt_tokens - 64 < again.usage.prompt_tokens_details.cached_tokens


def test_legacy_completion_streamed_with_the_sdk_carries_cached_tokens(url: str) -> None:
    api = sdk(url)
    prompt = OPENING + "Complete this: the sea is"
    api.completions.create(model=MODEL, prompt=prompt, max_tokens=1)  # warms the cache
    chunks = list(
        api.completions.create(
            model=MODEL, prompt=prompt, max_tokens=6, stream=True, stream_options={"include_usage": True}
        )
    )
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert texts == ["This", " is", " the", " practice", " server", " answering"]  # one token a chunk
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert all(c.object == "text_completion" for c in chunks)
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == 6
    assert 0 < usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens


def test_a_batch_of_prompts_is_refused_and_token_ids_too(url: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        sdk(url).completions.create(model=MODEL, prompt=["one", "two"], max_tokens=2)
    assert info.value.code == "unsupported_value" and info.value.param == "prompt"
    assert "one prompt per request" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        sdk(url).completions.create(model=MODEL, prompt=[1, 2, 3], max_tokens=2)
    assert info.value.param == "prompt" and "token ids" in info.value.message


def test_stop_strings_end_the_reply_where_they_begin(url: str) -> None:
    api = sdk(url)
    whole = api.completions.create(model=MODEL, prompt="x", max_tokens=9, stop=[" practice", "zz"])
    assert whole.choices[0].text == "This is the"
    assert whole.choices[0].finish_reason == "stop"
    assert whole.usage.completion_tokens == 4  # the token the stop string begins in was generated
    chat = api.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=9, stop="ract"
    )
    assert chat.choices[0].message.content == "This is the p"
    assert chat.choices[0].finish_reason == "stop"


# ── The same booking as chat: cache, timing, routing, failures ───────────────


def test_completions_go_through_the_cache_and_the_timing_model(url: str) -> None:
    # Wide margin on purpose (noisy machine): at 50,000 tok/s the cold ~1,500-token prompt is
    # booked ~45 ms, the warm one ~16 ms; the header is the model's own prediction.
    body = {"model": MODEL, "prompt": "A fresh opening, not seen before. " * 180, "max_tokens": 1}
    cold = httpx.post(f"{url}/completions", json=body, timeout=30)
    warm = httpx.post(f"{url}/completions", json=body, timeout=30)
    predicted = [float(r.headers["x-felab-predicted-ttft-ms"]) for r in (cold, warm)]
    assert predicted[0] > 2 * predicted[1]
    assert warm.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 1400


def test_completions_follow_the_fleets_routes_and_faults() -> None:
    with practice_server("--replicas", "3", "--route", "affinity") as base:
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 1, "user": "session-7"}
        replicas = {httpx.post(f"{base}/completions", json=body).headers["x-felab-replica"] for _ in range(4)}
        assert len(replicas) == 1  # one session, one replica
    with practice_server("--fail-rate", "1", "--fail-types", "429") as base:
        with pytest.raises(openai.RateLimitError) as info:
            sdk(base).completions.create(model=MODEL, prompt="hello", max_tokens=1)
        assert info.value.response.headers["retry-after"] == "1"


# ── Models ───────────────────────────────────────────────────────────────────


def test_models_retrieve_and_an_unknown_id_in_openais_envelope(url: str) -> None:
    model = sdk(url).models.retrieve(MODEL)
    assert (model.id, model.object, model.owned_by) == (MODEL, "model", "felab")
    with pytest.raises(openai.NotFoundError) as info:
        sdk(url).models.retrieve("gpt-9")
    assert info.value.code == "model_not_found" and info.value.param == "model"
    body = httpx.get(f"{url}/models/org/name-with-a-slash").json()
    assert body == {
        "error": {
            "message": "The model `org/name-with-a-slash` does not exist.",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


# ── Sampling parameters, by type and range (raw HTTP: the SDK would not send these) ──

BAD_FIELDS = [
    ({"temperature": "hot"}, "temperature", "invalid_type"),
    ({"temperature": "0.5"}, "temperature", "invalid_type"),  # a number in a string is still a string
    ({"temperature": -1}, "temperature", "decimal_below_min_value"),  # a number field: decimal_
    ({"temperature": 2.5}, "temperature", "decimal_above_max_value"),
    ({"top_p": 2}, "top_p", "decimal_above_max_value"),
    ({"top_p": True}, "top_p", "invalid_type"),
    ({"n": 0}, "n", "integer_below_min_value"),
    ({"n": 1.5}, "n", "invalid_type"),
    ({"presence_penalty": -2.5}, "presence_penalty", "decimal_below_min_value"),
    ({"frequency_penalty": 3}, "frequency_penalty", "decimal_above_max_value"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", None),
    ({"stop": 7}, "stop", None),
    ({"seed": "42"}, "seed", "invalid_type"),
    ({"seed": 4.2}, "seed", "invalid_type"),
    ({"logit_bias": {"50256": -101}}, "logit_bias.50256", "decimal_below_min_value"),
    ({"max_tokens": 0}, "max_tokens", "integer_below_min_value"),
    ({"stream": "yes"}, "stream", "invalid_type"),
    (
        {"stream": True, "stream_options": {"include_usage": "yes"}},
        "stream_options.include_usage",
        "invalid_type",
    ),
    ({"user": 5}, "user", "invalid_type"),
]
CHAT_ONLY = [
    ({"logprobs": "yes"}, "logprobs", "invalid_type"),
    ({"top_logprobs": 21}, "top_logprobs", "integer_above_max_value"),
    ({"max_completion_tokens": -3}, "max_completion_tokens", "integer_below_min_value"),
]
COMPLETION_ONLY = [
    ({"prompt": 5}, "prompt", None),
    ({"prompt": []}, "prompt", None),
    ({"logprobs": 6}, "logprobs", "integer_above_max_value"),
    ({"echo": "no"}, "echo", "invalid_type"),
]
CANNOT_HONOUR = [  # valid values the practice server cannot honour: a clear 400, never ignored
    ("/chat/completions", {"n": 2}, "n"),
    ("/chat/completions", {"logprobs": True}, "logprobs"),
    ("/chat/completions", {"top_logprobs": 3}, "top_logprobs"),
    ("/completions", {"n": 3}, "n"),
    ("/completions", {"best_of": 2}, "best_of"),
    ("/completions", {"logprobs": 1}, "logprobs"),
    ("/completions", {"echo": True}, "echo"),
    ("/completions", {"suffix": "end"}, "suffix"),
    ("/completions", {"prompt": ["one", "two"]}, "prompt"),
]


def base_body(path: str) -> dict:
    if path == "/chat/completions":
        return {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    return {"model": MODEL, "prompt": "x", "max_tokens": 2}


def cases() -> Iterator[tuple[str, dict, str, str | None]]:
    for path in ("/chat/completions", "/completions"):
        for fields, param, code in BAD_FIELDS:
            yield path, fields, param, code
    for fields, param, code in CHAT_ONLY:
        yield "/chat/completions", fields, param, code
    for fields, param, code in COMPLETION_ONLY:
        yield "/completions", fields, param, code


@pytest.mark.parametrize(("path", "fields", "param", "code"), list(cases()))
def test_a_bad_field_is_a_400_naming_it(
    url: str, path: str, fields: dict, param: str, code: str | None
) -> None:
    r = httpx.post(f"{url}{path}", json={**base_body(path), **fields}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert f"'{param}'" in error["message"]


@pytest.mark.parametrize(("path", "fields", "param"), CANNOT_HONOUR)
def test_a_value_the_server_cannot_honour_is_a_400_not_ignored(
    url: str, path: str, fields: dict, param: str
) -> None:
    r = httpx.post(f"{url}{path}", json={**base_body(path), **fields}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == (param, "unsupported_value")
    assert "not supported" in error["message"]


def test_every_documented_value_in_range_is_accepted(url: str) -> None:
    api = sdk(url)
    sampling = {
        "temperature": 0,
        "top_p": 1,
        "n": 1,
        "presence_penalty": -2,
        "frequency_penalty": 2.0,
        "stop": ["\n\n", "###", "User:", "</s>"],
        "seed": 1234,
        "logit_bias": {"50256": -100},
        "user": "someone",
    }
    chat = api.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "x"}],
        max_completion_tokens=2,
        logprobs=False,
        top_logprobs=0,
        **sampling,
    )
    assert chat.choices[0].message.content == "This is"
    done = api.completions.create(
        model=MODEL,
        prompt="x",
        max_tokens=2,
        temperature=2,
        top_p=0,
        **{k: v for k, v in sampling.items() if k not in ("temperature", "top_p")},
    )
    assert done.choices[0].text == "This is"
    # What vLLM's `vllm bench serve` and guidellm send to /v1/completions, extras and nulls included.
    for body in (
        {"prompt": "x", "repetition_penalty": 1.0, "max_tokens": 2, "logprobs": None, "ignore_eos": True},
        {"prompt": "x", "max_tokens": 2, "stop": None, "ignore_eos": True},
    ):
        events = raw_events(
            url,
            "/completions",
            {
                "model": MODEL,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                **body,
            },
        )
        assert events[-1]["usage"]["completion_tokens"] == 2


# ── Streamed usage: null before the last chunk; vLLM's continuous_usage_stats ─


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_chunks_before_the_last_carry_usage_null_only_when_usage_is_asked(url: str, path: str) -> None:
    body = {**base_body(path), "max_tokens": 3, "stream": True}
    plain = raw_events(url, path, body)
    assert all("usage" not in e for e in plain)  # OpenAI: no usage key unless asked for
    asked = raw_events(url, path, {**body, "stream_options": {"include_usage": True}})
    assert all("usage" in e and e["usage"] is None for e in asked[:-1])
    assert asked[-1]["choices"] == [] and asked[-1]["usage"]["completion_tokens"] == 3
    assert "cached_tokens" in asked[-1]["usage"]["prompt_tokens_details"]


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_continuous_usage_stats_gives_every_chunk_the_usage_so_far(url: str, path: str) -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    events = raw_events(
        url, path, {**base_body(path), "max_tokens": 4, "stream": True, "stream_options": options}
    )
    *chunks, last = events
    prompt = last["usage"]["prompt_tokens"]
    sent = [c["usage"]["completion_tokens"] for c in chunks]
    expected = [0, 1, 2, 3, 4] if path == "/chat/completions" else [1, 2, 3, 4]  # chat's role chunk: 0
    assert sent == expected
    assert all(c["usage"]["prompt_tokens"] == prompt for c in chunks)
    assert all(c["usage"]["total_tokens"] == prompt + c["usage"]["completion_tokens"] for c in chunks)
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 4
    # As vLLM: continuous usage only comes with include_usage.
    alone = raw_events(
        url, path, {**base_body(path), "stream": True, "stream_options": {"continuous_usage_stats": True}}
    )
    assert all("usage" not in e for e in alone)


def test_chat_role_chunk_comes_with_the_first_token_not_before() -> None:
    """As llama.cpp and vLLM send it (measured on the kit's llama-server: the head at once, the
    role chunk with the first token): vLLM's own benchmark stops its TTFT clock at the first
    chunk of any kind, so a role chunk sent early would make any server read ~0 ms. A lower
    bound only: a busy machine can make the chunk later, never earlier than the model's 400 ms."""
    with practice_server("--overhead-ms", "400") as base:
        api = openai.OpenAI(base_url=base, api_key="unused")
        start = time.perf_counter()
        stream = api.chat.completions.create(
            model="felab-practice", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True
        )
        head_s = time.perf_counter() - start
        first = next(iter(stream))
        first_s = time.perf_counter() - start
        rest = list(stream)
    assert head_s < 0.35  # the response's head (status, headers) does not wait for the model
    assert first.choices[0].delta.role == "assistant"
    assert first_s >= 0.35
    assert [c.choices[0].delta.content for c in rest if c.choices][0]


# ── /metrics, parsed by prometheus_client, against what the client saw ───────

TYPES = {
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:time_to_first_token_seconds": "histogram",
    "felab:injected_faults": "counter",
    "process_cpu_seconds": "counter",
}


def one_call(api: openai.OpenAI, kind: str, user: str, turn: int) -> tuple[str, openai.types.CompletionUsage]:
    """One request through the SDK; (the replica that served it, the usage the client saw)."""
    question = f"{user} asks question {turn}"
    stream = turn % 2 == 0
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    if kind == "chat":
        messages = [{"role": "system", "content": OPENING}, {"role": "user", "content": question}]
        raw = api.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, max_tokens=3, user=user, **extra
        )
    else:
        raw = api.completions.with_raw_response.create(
            model=MODEL, prompt=OPENING + question, max_tokens=3, user=user, **extra
        )
    reply = raw.parse()
    usage = list(reply)[-1].usage if stream else reply.usage
    return raw.headers["x-felab-replica"], usage


def test_metrics_parsed_by_prometheus_client_equal_the_usage_the_client_saw() -> None:
    seen: dict[str, Counter] = defaultdict(Counter)
    with practice_server("--replicas", "3", "--route", "affinity", "--prefill-tps", "50000") as base:
        api = sdk(base)
        for turn in range(4):
            for user in ("ann", "bob", "cat", "hal", "ivy"):  # rendezvous: replicas 1, 0, 0, 2, 2
                replica, usage = one_call(api, "chat" if turn < 2 else "completion", user, turn)
                seen[replica].update(
                    prompt=usage.prompt_tokens,
                    cached=usage.prompt_tokens_details.cached_tokens,
                    generated=usage.completion_tokens,
                    requests=1,
                )
        page = httpx.get(f"{base.removesuffix('/v1')}/metrics")
    assert page.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    families = {f.name: f for f in text_string_to_metric_families(page.text)}
    assert {name: f.type for name, f in families.items()} == TYPES  # every counter typed a counter
    assert not any(s.name.endswith("_created") for f in families.values() for s in f.samples)

    def per_replica(family: str, sample: str) -> dict[str, float]:
        return {s.labels["replica"]: s.value for s in families[family].samples if s.name == sample}

    expected = {
        ("vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total"): "prompt",
        ("vllm:prompt_tokens", "vllm:prompt_tokens_total"): "prompt",
        ("vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total"): "cached",
        ("vllm:generation_tokens", "vllm:generation_tokens_total"): "generated",
        ("vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count"): "requests",
    }
    assert set(seen) == {"0", "1", "2"}  # the sessions spread over every replica
    for (family, sample), key in expected.items():
        got = per_replica(family, sample)
        assert set(got) == {"0", "1", "2"}
        assert got == {r: float(seen[r][key]) for r in ("0", "1", "2")}, family
        assert sum(got.values()) == sum(s[key] for s in seen.values())
    assert sum(s["cached"] for s in seen.values()) > 0
    assert all(
        s.labels["model_name"] == MODEL for f in families.values() for s in f.samples if "replica" in s.labels
    )


def test_max_tokens_is_bounded_by_the_servers_context_not_a_fixed_number() -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 200_000,
        "stream": True,
    }
    with (
        practice_server("--context-tokens", "262144") as url,
        httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=10) as reply,
    ):
        assert reply.status_code == 200  # it fits this server's context
    with practice_server() as url:  # 131,072 tokens
        reply = httpx.post(f"{url}/chat/completions", json=body, timeout=10)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "max_tokens"
