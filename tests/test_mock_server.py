"""The practice server, started for real and driven over loopback HTTP."""

from __future__ import annotations

import concurrent.futures as cf
import json

import httpx
import openai
import pytest

from felab.mock_server.launch import practice_server
from felab.streaming import stream_once, usage_once

MODEL = "felab-practice"
OPENING = "You are a careful assistant. " * 400  # ~2,800 tokens


def ask(question: str) -> list[dict]:
    return [{"role": "system", "content": OPENING}, {"role": "user", "content": question}]


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key="not-needed", max_retries=0)


def root(url: str) -> str:
    return url.removesuffix("/v1")


def test_models_and_health(mock_url: str) -> None:
    assert [m.id for m in client(mock_url).models.list()] == [MODEL]
    health = httpx.get(f"{root(mock_url)}/health").json()
    assert health["status"] == "ok" and health["server"] == "felab practice server"  # as llama.cpp's, named
    assert isinstance(health["pid"], int)  # so a second `make mock` can name the one process to stop


def test_streamed_reply_carries_usage_with_cached_tokens(fresh_mock: str) -> None:
    api = client(fresh_mock)
    first = stream_once(api, MODEL, ask("one?"), max_tokens=5)
    second = stream_once(api, MODEL, ask("two, a different question?"), max_tokens=5)
    assert first.output_tokens == 5 and len(first.itl_ms) == 4
    assert first.cached_tokens == 0
    assert first.prompt_tokens > 2700
    # everything but the last partial block and the question comes from the cache
    assert second.prompt_tokens - 64 - 20 < second.cached_tokens < second.prompt_tokens
    assert second.cached_tokens % 64 == 0


def test_non_streamed_reply_has_usage(fresh_mock: str) -> None:
    usage = usage_once(client(fresh_mock), MODEL, ask("hi"), max_tokens=3)
    assert usage.completion_tokens == 3
    assert usage.cached_tokens == 0
    again = usage_once(client(fresh_mock), MODEL, ask("hi"), max_tokens=3)
    assert again.cached_tokens > 0


def test_admin_reset_empties_the_cache(fresh_mock: str) -> None:
    api = client(fresh_mock)
    usage_once(api, MODEL, ask("warm it"), max_tokens=1)
    cleared = httpx.post(f"{root(fresh_mock)}/admin/reset").json()["cleared_blocks"]
    assert cleared > 40
    assert usage_once(api, MODEL, ask("warm it"), max_tokens=1).cached_tokens == 0


def test_a_cached_prompt_answers_much_sooner(fresh_mock: str) -> None:
    # Wide margin on purpose (noisy 2-core machine): cold is ~1.1 s, warm ~35 ms.
    api = client(fresh_mock)
    cold = stream_once(api, MODEL, ask("first"), max_tokens=2).ttft_ms
    warm = stream_once(api, MODEL, ask("second"), max_tokens=2).ttft_ms
    assert cold > 5 * warm


BAD_BODIES = [
    (b"{not json", None),
    (b'{"model": "felab-practice"}', "messages"),
    (b'{"model": "felab-practice", "messages": []}', "messages"),
    (b'{"model": "felab-practice", "messages": "hello"}', "messages"),
    (b'{"model": "felab-practice", "messages": [{"role": "wizard", "content": "x"}]}', "messages.0.role"),
    (b'{"model": "felab-practice", "messages": [{"role": "user", "content": 5}]}', None),
    (
        b'{"model": "felab-practice", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
        "max_tokens",
    ),
    (
        b'{"model": "felab-practice", "messages": [{"role": "user", "content": "x"}], '
        b'"max_tokens": 10000000}',
        "max_tokens",
    ),
    (
        b'{"model": "felab-practice", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
        "stream",
    ),
    (b"[1, 2, 3]", None),
]


@pytest.mark.parametrize(("body", "param"), BAD_BODIES)
def test_bad_requests_get_a_400_in_openai_shape(mock_url: str, body: bytes, param: str | None) -> None:
    r = httpx.post(f"{mock_url}/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    if param:
        assert error["param"] == param


def test_unknown_model_is_404_model_not_found(mock_url: str) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client(mock_url).chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "model_not_found"


def test_oversized_bodies_are_refused_with_413(mock_url: str) -> None:
    big = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * (9 * 1024 * 1024)}]})
    r = httpx.post(f"{mock_url}/chat/completions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "invalid_request_error"

    def chunks():  # no content-length: the server must count
        for _ in range(10):
            yield b"x" * (1024 * 1024)

    r = httpx.post(
        f"{mock_url}/chat/completions", content=chunks(), headers={"content-type": "application/json"}
    )
    assert r.status_code == 413


def test_unknown_routes_and_methods(mock_url: str) -> None:
    r = httpx.get(f"{mock_url}/nope")
    assert r.status_code == 404 and r.json()["error"]["message"] == "Unknown route."
    r = httpx.get(f"{mock_url}/chat/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_a_prompt_over_the_context_is_a_400() -> None:
    with practice_server("--context-tokens", "1000") as url, pytest.raises(openai.BadRequestError) as info:
        client(url).chat.completions.create(model=MODEL, messages=ask("x"), max_tokens=5)
    assert info.value.code == "context_length_exceeded"


def test_the_server_keeps_serving_after_bad_requests(mock_url: str) -> None:
    for body, _ in BAD_BODIES:
        httpx.post(f"{mock_url}/chat/completions", content=body)
    assert (
        usage_once(
            client(mock_url), MODEL, [{"role": "user", "content": "still there?"}], 2
        ).completion_tokens
        == 2
    )


def test_64_simultaneous_streams_all_complete(mock_url: str) -> None:
    api = client(mock_url)
    prompt = [{"role": "user", "content": "short question " * 10}]
    with cf.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(lambda _: stream_once(api, MODEL, prompt, max_tokens=8), range(64)))
    assert len(results) == 64
    assert all(r.output_tokens == 8 and r.prompt_tokens for r in results)
