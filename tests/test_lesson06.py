"""Lesson 06's prefix_bench.py, run as a learner runs it, against real HTTP servers.

Timing assertions use wide margins on purpose (2 noisy cores): the defaults
give call 1 ≈ 1.2 s and calls 2-12 ≈ 35 ms, so a speed-up of 34; we ask for > 10.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import PREFIX_BENCH, run_script
from fake_llamacpp import fake_llamacpp


def last_row(results: Path) -> dict:
    return json.loads((results / "06-prefix.jsonl").read_text().splitlines()[-1])


def test_stable_first_is_many_times_faster_and_is_recorded(fresh_mock: str, isolated: Path) -> None:
    out = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", fresh_mock)
    assert out.returncode == 0, out.stderr
    assert "call  1" in out.stdout and "(cold)" in out.stdout and "call 12" in out.stdout
    row = last_row(isolated)
    assert row["order"] == "stable-first" and row["model"] == "felab-practice"
    assert len(row["calls"]) == 12
    assert 900 < row["first_ms"] < 3000
    assert row["speedup_x"] > 10
    assert row["cache_hit_pct"] > 90
    assert row["calls"][0]["cached_tokens"] == 0
    for column in ("first_ms", "rest_p50_ms", "speedup_x", "cache_hit_pct"):
        assert column in out.stdout


def test_variable_first_gains_nothing(fresh_mock: str, isolated: Path) -> None:
    out = run_script(
        PREFIX_BENCH, "--target", "mock", "--base-url", fresh_mock, "--order", "variable-first", "--quick"
    )
    assert out.returncode == 0, out.stderr
    row = last_row(isolated)
    assert 0.5 < row["speedup_x"] < 2
    assert row["cache_hit_pct"] == 0


def test_a_warm_first_call_is_called_out_instead_of_a_speedup(fresh_mock: str, isolated: Path) -> None:
    assert run_script(PREFIX_BENCH, "--base-url", fresh_mock, "--quick").returncode == 0
    out = run_script(PREFIX_BENCH, "--base-url", fresh_mock, "--quick")
    assert out.returncode == 0
    row = last_row(isolated)
    assert row["warm_start"] is True and row["speedup_x"] is None
    assert "call 1 was not cold" in out.stdout and "/admin/reset" in out.stdout


def test_usage_line_on_the_practice_server(fresh_mock: str) -> None:
    out = run_script(PREFIX_BENCH, "--base-url", fresh_mock, "--quick", "--usage")
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("usage:"))
    prompt, cached = (int(part.split("=")[1]) for part in line.split()[1:])
    assert cached > 0.9 * prompt


def test_connection_refused_is_one_clear_paragraph() -> None:
    out = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", "http://127.0.0.1:9/v1")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    # the commands are written for the folder the learner is in (the lesson's), and start the
    # practice server where this run looked for it (make mock would listen on 8765, not 9)
    assert "http://127.0.0.1:9/v1" in out.stderr
    assert "`../../.venv/bin/python -m felab.mock_server --port 9`" in out.stderr
    assert "`make -C ../.. check`" in out.stderr


def test_an_unknown_model_says_to_pass_another(mock_url: str) -> None:
    out = run_script(PREFIX_BENCH, "--base-url", mock_url, "--model", "no-such-model", "--quick")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no-such-model" in out.stderr and "--model" in out.stderr


def test_llamacpp_context_too_small_gives_the_lesson_fix(isolated: Path) -> None:
    with fake_llamacpp("too-small") as url:
        out = run_script(PREFIX_BENCH, "--target", "llamacpp", "--base-url", url)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    said = " ".join(out.stderr.split())
    assert "(2,048 tokens)" in said  # the seat, as the server reported it
    # the restart, written for the lesson folder (tests/test_context_fit.py has the rest)
    assert "bash ../02-three-local-servers/serve_llamacpp.sh Q4_K_M 16384 4`" in said
    assert not (isolated / "06-prefix.jsonl").exists()


def test_old_llamacpp_cached_tokens_come_from_timings(isolated: Path) -> None:
    with fake_llamacpp("old-usage") as url:
        out = run_script(PREFIX_BENCH, "--target", "llamacpp", "--base-url", url, "--quick")
    assert out.returncode == 0, out.stderr
    row = last_row(isolated)
    assert row["model"] == "/models/practice.gguf"  # asked from /v1/models
    call = row["calls"][1]
    assert call["cached_tokens"] == call["prompt_tokens"] - 7


def test_the_script_imports_without_running() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("prefix_bench", PREFIX_BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert len(module.QUESTIONS) == 12
    assert 3000 <= len(module.PREAMBLE) // 4 <= 3060


def test_a_reasoning_models_first_thought_is_its_first_token() -> None:
    # gpt-oss (the Fireworks default) streams `reasoning_content` before `content`: the wait
    # for the first token ends at the first thought, not 0.5 s later at the answer.
    from felab.connect import client
    from felab.streaming import stream_once
    from felab.targets import Target

    with fake_llamacpp("reasoning") as url:
        api = client(Target("llamacpp", url, "m", "k", False))
        r = stream_once(api, "m", [{"role": "user", "content": "hi"}], max_tokens=4)
    assert r.ttft_ms < 400 < r.total_ms  # 0.5 s between them: a margin of 100 ms each way
    assert r.output_tokens == 2
