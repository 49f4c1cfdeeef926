"""The kit reads what servers send with limits (felab/guarded.py): an endless body, a trickled
stream and a stream without end each stop in one message that names the server.

The servers are the fake llama-server (tests/fake_llamacpp.py) misbehaving on the real wire;
the commands are the real ones (a lesson script, `felab check`, `felab calibrate`), run as
subprocesses. Short limits come from FELAB_READ_IDLE_S and FELAB_READ_DEADLINE_S, so no test
takes more than a few seconds. Each subprocess runs under a 2 GB address-space limit: code that
read without a cap fails there with a MemoryError (as it did at 3.9 GB), not by filling the machine.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import KIT, PREFIX_BENCH
from fake_fireworks import fireworks_env
from fake_llamacpp import fake_llamacpp

from felab.connect import client
from felab.engine_families.family import get_json
from felab.errors import FelabError
from felab.guarded import IDLE_ENV, Limits, ReplyStopped, get_text
from felab.streaming import stream_once
from felab.targets import Target

SLOW = 30.0
"""Seconds a command may take here before the test calls it hung (each should stop in a few)."""


def two_gigabytes() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def run(args: list[str], cwd: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run a command as a learner does, with `env` added; its output and its seconds."""
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=SLOW,
        env={**os.environ, **env},
        preexec_fn=two_gigabytes,
    )
    return out, time.monotonic() - t0


def one_message(out: subprocess.CompletedProcess[str]) -> str:
    """The run stopped with one `error:` paragraph (exit 2, no traceback); its words, unwrapped."""
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("error:") == 1, out.stderr
    return " ".join(out.stderr.split())


def lesson(url: str, *extra: str) -> list[str]:
    return [str(PREFIX_BENCH), "--target", "llamacpp", "--base-url", url, "--quick", *extra]


# ── a lesson script ──────────────────────────────────────────────────────────


def test_a_lesson_script_stops_at_a_model_list_without_end() -> None:
    with fake_llamacpp("endless-models") as url:
        out, seconds = run(lesson(url), PREFIX_BENCH.parent)
    said = one_message(out)
    assert f"The llamacpp server at {url} sent more than 8 MiB for GET /v1/models" in said
    assert "make -C ../.. check" in said  # advice for the lesson's folder
    assert seconds < 15


def test_a_lesson_script_stops_at_a_trickled_stream() -> None:
    with fake_llamacpp("trickle") as url:
        out, seconds = run(lesson(url), PREFIX_BENCH.parent, FELAB_READ_IDLE_S="1")
    said = one_message(out)
    assert f"The llamacpp server at {url} sent no whole event (no token) for 1 s" in said
    assert "POST /v1/chat/completions" in said and "set FELAB_READ_IDLE_S=60 in .env" in said
    assert seconds < 15


def test_a_lesson_script_stops_at_a_stream_without_end() -> None:
    with fake_llamacpp("endless-stream") as url:
        out, seconds = run(lesson(url), PREFIX_BENCH.parent, FELAB_READ_DEADLINE_S="2")
    said = one_message(out)
    assert (
        f"The llamacpp server at {url} did not finish its reply to POST /v1/chat/completions within 2 s"
        in said
    )
    assert "set FELAB_READ_DEADLINE_S=60 in .env" in said
    assert seconds < 15


# ── felab check and calibrate ─────────────────────────────────────────────────


def test_check_names_a_server_whose_model_list_never_ends_and_goes_on() -> None:
    with fake_llamacpp("endless-models") as url:
        out, seconds = run(["-m", "felab", "check"], KIT, FELAB_LLAMACPP_URL=url)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("llamacpp"))
    assert "its answer was not readable" in row
    assert "mock" in out.stdout and "fireworks" in out.stdout  # the other rows are there
    said = " ".join(out.stdout.split())
    assert f"note: The llamacpp server at {url} sent more than 8 MiB for GET /v1/models" in said
    assert seconds < 15


def test_calibrate_stops_at_a_props_page_without_end() -> None:
    with fake_llamacpp("endless-props") as url:
        args = ["-m", "felab", "calibrate", "--target", "llamacpp", "--base-url", url, "--max-requests", "90"]
        out, seconds = run(args, KIT)
    said = one_message(out)
    root = url.removesuffix("/v1")
    assert f"The server at {root} sent more than 8 MiB for GET /props" in said
    assert seconds < 15


def test_calibrate_stops_at_a_trickled_stream() -> None:
    with fake_llamacpp("trickle") as url:
        args = ["-m", "felab", "calibrate", "--target", "llamacpp", "--base-url", url, "--max-requests", "90"]
        out, seconds = run(args, KIT, FELAB_READ_IDLE_S="1")
    said = one_message(out)
    assert f"The llamacpp server at {url} sent no whole event (no token) for 1 s" in said
    assert seconds < 15


def test_calibrate_check_stops_at_a_trickled_stream() -> None:
    # --check times the real server and its twin (a practice server) by turns: the real one's
    # trickle stops it, with no twin left running.
    profile = KIT / "data" / "profiles" / "practice-defaults.toml"
    with fake_llamacpp("trickle") as url:
        args = ["-m", "felab", "calibrate", "--check", str(profile), "--target", "llamacpp"]
        out, seconds = run([*args, "--base-url", url, "--yes"], KIT, FELAB_READ_IDLE_S="1")
    said = one_message(out)
    assert f"The llamacpp server at {url} sent no whole event (no token) for 1 s" in said
    assert seconds < 20


def test_fw_checks_stop_names_the_server_it_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # fw-check's guard is this one's pieces with one deadline for the whole check; its stop
    # names the address it read (FIREWORKS_BASE_URL may point anywhere), as every other does.
    with fireworks_env(monkeypatch) as fake:
        fake.huge_bytes, fake.huge_declared = 20 * 1024 * 1024, False
        out, seconds = run(["-m", "felab", "fw-check"], KIT)
    said = one_message(out)
    assert f"the reply from {fake.url} to GET /v1/accounts/" in said and "was larger than 8 MB" in said
    assert seconds < 15


# ── the engines' own routes, and limits that do not trip on a slow honest server ─


def test_context_fit_stops_at_a_props_page_without_end() -> None:
    # The prompt is over the seat's context; explain() asks the llama.cpp family for the restart
    # that fits, which reads GET /props for the seats: that page never ends.
    with fake_llamacpp("too-small+endless-props") as url:
        out, seconds = run(lesson(url), PREFIX_BENCH.parent)
    said = one_message(out)
    assert f"The server at {url.removesuffix('/v1')} sent more than 8 MiB for GET /props" in said
    assert seconds < 15


def test_the_engines_own_routes_are_read_within_the_limits() -> None:
    with fake_llamacpp("endless-props") as url, pytest.raises(ReplyStopped, match="8 MiB for GET /props"):
        get_json(f"{url.removesuffix('/v1')}/props")


def test_a_quiet_wait_between_whole_events_is_not_a_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    # The reasoning fake sends its thinking, then nothing for 0.5 s, then the answer: silence
    # between whole events is a slow server, not a trickle, and is timed as before.
    monkeypatch.setenv(IDLE_ENV, "0.1")
    with fake_llamacpp("reasoning") as url:
        api = client(Target("llamacpp", url, "m", "none", False))
        r = stream_once(api, "m", [{"role": "user", "content": "hi"}], max_tokens=4)
    assert r.output_tokens == 2 and r.total_ms >= 500 > r.ttft_ms


def test_a_page_that_does_not_come_is_one_message() -> None:
    said = r"Could not read http://.*/metrics \(HTTPStatusError"
    with fake_llamacpp("reasoning") as url, pytest.raises(FelabError, match=said):  # no /metrics: 404
        get_text(f"{url.removesuffix('/v1')}/metrics")


@pytest.mark.parametrize("value", ["soon", "-1", "0", "nan", "1e9"])
def test_a_limit_that_is_not_a_number_of_seconds_says_so(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("FELAB_READ_DEADLINE_S", value)
    with pytest.raises(FelabError, match="FELAB_READ_DEADLINE_S is .* not a number of seconds"):
        Limits.for_timeout(300.0)
