"""Issue 20's cases, each followed as the learner would: `make numbers` after `agent-trace` (as
docs/replay.md shows), every affinity mode in `make numbers`, Ctrl+C in `make replay`, and
`make mock PORT=...`."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import KIT, make_command

from felab import cli as felab_cli
from felab import results, this_run
from felab.course import numbers
from felab.mock_server.launch import free_port, wait_until_serving
from felab.replay import command as replay_command


def test_numbers_after_agent_trace_says_what_the_trace_is(
    isolated: Path, capsys: pytest.CaptureFixture
) -> None:
    """Before: 10,001 "skipped" warnings and an empty section. Now: one line, with the command
    that replays it; the trace is no lesson's records."""
    out = CliRunner().invoke(felab_cli.cli, ["agent-trace", "--sessions", "5"])
    assert out.exit_code == 0, out.output
    assert (isolated / "agent-trace.jsonl").is_file()
    found = numbers.collect()
    assert "agent-trace" not in found
    text = numbers.as_text(found)
    line = next(x for x in text.splitlines() if "agent-trace.jsonl" in x)
    assert "a trace to replay, not recorded runs" in line
    assert "skipped" not in capsys.readouterr().err
    replay = line.split("(`", 1)[1].rstrip("`)").split()
    assert replay[:4] == ["python", "-m", "felab", "replay"]
    followed = CliRunner().invoke(felab_cli.cli, [*replay[3:], "--replicas", "2", "--route", "random"])
    assert followed.exit_code == 0, followed.output  # as printed, from where it was printed
    text = numbers.as_text(numbers.collect())
    assert "replay.jsonl: 1 row recorded by `felab replay`, not a lesson's numbers" in " ".join(text.split())
    assert "lesson replay" not in text  # its wide rows are not shown as a lesson's table


def test_numbers_shows_every_affinity_mode(isolated: Path) -> None:
    modes = ["random (no user)", "affinity (user = session)", "prefix router"]
    for n, mode in enumerate(modes):
        results.record(
            "06-affinity", {"target": "mock", "model": "m", "mode": mode, "history_hit_pct": 5.0 + n}
        )
    text = numbers.as_text(numbers.collect())
    section = text.split("06-affinity", 1)[1].split("\n\n")[1]
    assert all(mode in section for mode in modes), section


def test_ctrl_c_in_replay_says_what_it_recorded(
    isolated: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """troubleshooting.md promises it: the configurations replayed before Ctrl+C are kept, and it says so."""
    real = replay_command.run_virtual
    calls = []

    def second_is_interrupted(*args, **kwargs):  # the learner presses Ctrl+C during the second
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(replay_command, "run_virtual", second_is_interrupted)
    monkeypatch.setattr(this_run, "RECORDED", [])
    monkeypatch.setenv("FELAB_CALLER_DIR", str(tmp_path))
    # --jobs 1: the configurations run in this process, where the stand-in above can interrupt one
    out = CliRunner().invoke(
        felab_cli.cli, ["replay", "--limit", "200", "--replicas", "1,2,4", "--jobs", "1"]
    )
    assert out.exit_code == 130
    said = " ".join(out.output.split())
    where = os.path.relpath(isolated / "replay.jsonl", tmp_path)
    assert f"interrupted: this run recorded 1 row before it stopped, kept in {where}." in said
    assert len((isolated / "replay.jsonl").read_text().splitlines()) == 1


def test_ctrl_c_before_any_row_says_nothing_was_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(replay_command, "run_virtual", interrupted)
    monkeypatch.setattr(this_run, "RECORDED", [])
    out = CliRunner().invoke(felab_cli.cli, ["replay", "--limit", "50"])
    assert out.exit_code == 130 and "interrupted: this run recorded nothing" in out.output


def test_make_mock_takes_a_port() -> None:
    """`make mock PORT=9123`, in the kit and in 03-labs/: the practice server on that port."""
    port = free_port()
    argv, env = make_command(KIT / "03-labs", "mock", f"PORT={port}")  # PY=, VENV=: nothing built here
    server = subprocess.Popen(
        argv,
        cwd=KIT / "03-labs",
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # make and the server it starts: one group, stopped together below
    )
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/v1", server, timeout_s=60)  # it answers there
    finally:
        os.killpg(server.pid, signal.SIGINT)  # Ctrl+C in its terminal: make and its server, this group only
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_numbers_with_only_a_trace_says_nothing_is_recorded_and_what_the_trace_is(isolated: Path) -> None:
    assert CliRunner().invoke(felab_cli.cli, ["agent-trace", "--sessions", "3"]).exit_code == 0
    out = CliRunner().invoke(felab_cli.cli, ["numbers"])
    assert out.exit_code == 0 and "nothing recorded yet" in out.output
    assert "agent-trace.jsonl: a trace to replay, not recorded runs" in out.output
    assert "skipped" not in out.output
