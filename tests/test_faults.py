"""Failure injection: seeded, off by default; the kit turns each failure into one paragraph."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from conftest import PREFIX_BENCH, run_script

from felab.connect import client
from felab.errors import FelabError
from felab.mock_server.faults import Faults
from felab.mock_server.launch import free_port, practice_server, wait_until_serving
from felab.streaming import stream_once
from felab.targets import NO_KEY, Target

MODEL = "felab-practice"
HELLO = [{"role": "user", "content": "hello"}]


def kit_client(url: str):
    return client(Target("mock", url, MODEL, NO_KEY, False, "make mock"))


def test_faults_are_off_by_default_and_draw_nothing() -> None:
    faults = Faults()
    state = faults.rng.getstate()
    assert [faults.draw() for _ in range(100)] == [None] * 100
    assert faults.rng.getstate() == state and faults.injected == {}


def test_faults_are_seeded_and_come_at_the_rate_asked() -> None:
    draws = [Faults(0.25, seed=3).draw() for _ in range(1)]
    a, b = Faults(0.25, seed=3), Faults(0.25, seed=3)
    seq = [a.draw() for _ in range(2000)]
    assert seq == [b.draw() for _ in range(2000)]
    assert draws[0] == seq[0]
    assert 400 < sum(d is not None for d in seq) < 600
    assert set(seq) == {None, "429", "503", "500", "cut"}
    assert sum(a.injected.values()) == sum(d is not None for d in seq)


def test_unknown_fault_types_are_refused() -> None:
    with pytest.raises(ValueError):
        Faults(0.1, ("404",))


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("429", ["HTTP 429", "rate limiting", "Wait 1 s"]),
        ("503", ["HTTP 503", "not ready"]),
        ("500", ["HTTP 500", "failed on this request"]),
        ("cut", ["was cut off", "after 2 tokens"]),
    ],
)
def test_stream_once_turns_each_fault_into_one_paragraph(kind: str, words: list[str]) -> None:
    with practice_server("--fail-rate", "1", "--fail-types", kind) as url, pytest.raises(FelabError) as info:
        stream_once(kit_client(url), MODEL, HELLO, max_tokens=5)
    message = info.value.message
    assert all(w in message for w in words), message
    assert "\n" not in message and "Traceback" not in message


def test_a_429_carries_retry_after_and_openai_shape() -> None:
    with practice_server("--fail-rate", "1", "--fail-types", "429") as url:
        r = httpx.post(f"{url}/chat/completions", json={"model": MODEL, "messages": HELLO})
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["code"] == "rate_limit_exceeded"


def test_bad_requests_still_get_their_400_when_everything_fails() -> None:
    with practice_server("--fail-rate", "1") as url:
        r = httpx.post(f"{url}/chat/completions", json={"model": MODEL, "messages": []})
        gone = httpx.post(f"{url}/chat/completions", json={"model": "gpt-9", "messages": HELLO})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    assert gone.status_code == 404


def test_some_requests_fail_and_the_rest_are_served() -> None:
    codes = []
    with practice_server("--fail-rate", "0.5", "--fail-types", "503", "--seed", "1") as url:
        for _ in range(20):
            codes.append(
                httpx.post(f"{url}/chat/completions", json={"model": MODEL, "messages": HELLO}).status_code
            )
    assert set(codes) == {200, 503}


def test_a_lesson_script_stops_with_one_paragraph_not_a_traceback() -> None:
    with practice_server("--fail-rate", "1", "--fail-types", "cut") as url:
        out = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url, "--quick")
    assert out.returncode == 2
    assert out.stderr.startswith("error: The reply from the mock server") and "Traceback" not in out.stderr


def test_a_cut_stream_leaves_no_traceback_in_the_server_log(tmp_path) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "felab.mock_server",
                "--port",
                str(port),
                "--fail-rate",
                "1",
                "--fail-types",
                "cut",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=dict(os.environ),
        )
        try:
            url = f"http://127.0.0.1:{port}/v1"
            wait_until_serving(url, proc)
            with pytest.raises(FelabError):
                stream_once(kit_client(url), MODEL, HELLO, max_tokens=6)
            assert httpx.get(f"{url.removesuffix('/v1')}/health").status_code == 200  # still serving
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert "Traceback" not in log.read_text() and "StreamCut" not in log.read_text()
