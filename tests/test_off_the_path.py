"""The learner's path off the happy path (issue 11): the mistakes learners make, each ending in
one paragraph with a command that works when typed as printed, and numbers that stay theirs.

Each test follows the advice where it can: it runs the command the message names and checks
what that printed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import KIT, LESSON06, PREFIX_BENCH, run_felab, run_make, run_script
from fleet_helpers import fleet, free_range, wait_up

from felab import record
from felab.course import numbers
from felab.course.forms import measured_note
from felab.mock_server.launch import free_port, practice_server, wait_until_serving
from felab.mock_server.serve import port_is_free
from felab.paths import from_here

LABS = KIT / "03-labs"


def make(folder: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`make ARGS` typed in `folder`, as in a learner's shell, never building in the checkout
    (conftest.run_make: this test's Python, a stand-in .venv whose stamps say it is installed)."""
    return run_make(folder, *args, timeout=timeout)


def backticked(text: str) -> list[str]:
    """The commands a message shows, in `backticks`, with its line breaks undone."""
    return re.findall(r"`([^`]+)`", " ".join(text.split()))


# ── 3. A warm re-run does not replace the learner's numbers ──────────────────


def row(ts: str, first: float, rest: float, warm: bool | None) -> dict:
    r = {"ts": ts, "target": "llamacpp", "model": "m", "order": "stable-first"}
    r.update({"first_ms": first, "rest_p50_ms": rest, "speedup_x": None if warm else first / rest})
    if warm is not None:
        r["warm_start"] = warm
    return r


def write_rows(folder: Path, *rows: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "06-prefix.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_warm_rerun_labels_call_1_warm_not_cold(fresh_mock: str) -> None:
    assert run_script(PREFIX_BENCH, "--base-url", fresh_mock, "--quick").returncode == 0
    out = run_script(PREFIX_BENCH, "--base-url", fresh_mock, "--quick")
    assert out.returncode == 0, out.stderr
    call_1 = next(line for line in out.stdout.splitlines() if "call  1" in line)
    assert "(warm: already cached)" in call_1 and "(cold)" not in call_1
    note = out.stdout.split("note: call 1 was not cold")[1]
    reset = next(c for c in backticked(note) if c.startswith("curl"))
    assert reset == f"curl -X POST {fresh_mock.removesuffix('/v1')}/admin/reset"
    # following it: the next run is cold again
    subprocess.run(reset.split(), check=True, capture_output=True, timeout=10)
    again = run_script(PREFIX_BENCH, "--base-url", fresh_mock, "--quick")
    assert "(cold)" in next(line for line in again.stdout.splitlines() if "call  1" in line)


def test_numbers_offer_the_latest_cold_run_and_say_a_later_one_was_warm(isolated: Path) -> None:
    write_rows(
        isolated,
        row("2026-11-30T04:00:00+00:00", 740.0, 36.0, warm=False),
        row("2026-11-30T04:10:00+00:00", 15.0, 11.0, warm=True),
    )
    field = numbers.declared()["06-prefix-caching"][0]
    got = numbers.measured(field.source)
    assert got is not None and got["value"] == "740 / 36" and got["warm"] is False
    assert "latest cold run" in got["note"] and "2026-11-30 04:10 UTC started warm" in got["note"]
    assert got["note"] in measured_note(got)  # the course page says it too

    out = run_felab("numbers")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "740 / 36" in text and "15 / 11" not in text
    assert "started warm (call 1 already cached) and is not used" in text


def test_numbers_say_when_the_only_run_was_warm(isolated: Path) -> None:
    write_rows(isolated, row("2026-11-30T04:10:00+00:00", 15.0, 11.0, warm=True))
    got = numbers.measured(numbers.declared()["06-prefix-caching"][0].source)
    assert got is not None and got["warm"] is True and "started warm" in got["note"]
    text = " ".join(run_felab("numbers").stdout.split())
    assert "15 / 11" in text and "is no cold figure" in text


def test_rows_without_warm_start_count_as_cold(isolated: Path) -> None:
    write_rows(isolated, row("2026-11-30T04:00:00+00:00", 900.0, 80.0, warm=None))
    got = numbers.measured(numbers.declared()["06-prefix-caching"][0].source)
    assert got is not None and got["value"] == "900 / 80" and got["note"] == ""


# ── 4. A port still closing is free; a busy one names the one process to stop ──


def time_wait_on(port: int) -> None:
    """Leave a connection of `port` in TIME_WAIT, as a practice server stopped mid-stream does:
    its listener has SO_REUSEADDR (uvicorn sets it), and the server side closes first."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen()
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = listener.accept()
        conn.close()  # the active close: this side of the connection goes to TIME_WAIT
        time.sleep(0.1)
        client.close()


def test_a_port_in_time_wait_is_free_and_the_server_starts_there() -> None:
    port = free_port()
    time_wait_on(port)
    with socket.socket() as plain, pytest.raises(OSError):  # the check before the fix: "in use"
        plain.bind(("127.0.0.1", port))
    assert port_is_free("127.0.0.1", port)
    proc = subprocess.Popen(
        [sys.executable, "-m", "felab.mock_server", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/v1", proc)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_second_practice_server_names_the_first_and_the_kill_that_stops_only_it() -> None:
    with practice_server() as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        second = subprocess.run(
            [sys.executable, "-m", "felab.mock_server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode == 1 and "Traceback" not in second.stderr
        said = " ".join(second.stderr.split())
        assert "a practice server already runs there (process" in said and "pkill" not in said
        kill = next(c for c in backticked(said) if c.startswith("kill "))
        pid = int(kill.split()[1])
        assert pid != os.getpid()
        subprocess.run(kill.split(), check=True, timeout=10)  # following it
        deadline = time.monotonic() + 10
        while not port_is_free("127.0.0.1", port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert port_is_free("127.0.0.1", port), "the practice server it named is stopped"


def test_another_program_on_the_port_is_named_with_lsof() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "felab.mock_server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    said = " ".join(out.stderr.split())
    assert out.returncode == 1 and "another program, not a practice server" in said
    assert f"lsof -nP -iTCP:{port} -sTCP:LISTEN" in backticked(said)
    # The free port's command as the learner started it: through make, `--port` would be make's own
    # option ("make: unrecognized option '--port'"); PORT= is the variable make mock reads.
    python = next(c for c in backticked(said) if "-m felab.mock_server --port" in c)
    assert "make" not in python
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))
        other.listen()
        typed = run_make(KIT, "mock", f"PORT={port}", timeout=30)
    said = " ".join(typed.stderr.split())
    assert "another program, not a practice server" in said, said
    assert any(re.fullmatch(r"make mock PORT=\d+", c) for c in backticked(said)), said


def test_a_fleet_workers_port_names_the_fleet_not_a_kill_that_stops_it(isolated: Path) -> None:
    # `kill` of the worker the message named took the whole fleet down ("worker 2 (pid ...) exited
    # ... the rest of the fleet is stopped").
    base = free_range(4)
    proc = fleet("-n", "2", "--router", "none", "--port", str(base))
    try:
        wait_up(proc)
        second = subprocess.run(
            [sys.executable, "-m", "felab.mock_server", "--port", str(base)],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    said = " ".join(second.stderr.split())
    assert second.returncode == 1 and "server of a fleet started with `make fleet`" in said, said
    assert "`make fleet-stop` stops the fleet" in said and "kill" not in said


# ── 5. A key a header cannot carry is caught where it is read ────────────────

BAD_KEYS = {
    "curly quote": ("fw_abc\u201cdef123", "U+201C LEFT DOUBLE QUOTATION MARK"),
    "line break": ("fw_abc\ndef123", "a line break"),
    "space": ("fw_abc def123", "a space or tab"),
}


@pytest.mark.parametrize("name", list(BAD_KEYS))
def test_make_check_says_a_key_cannot_be_sent(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    key, what = BAD_KEYS[name]
    monkeypatch.setenv("FIREWORKS_API_KEY", key)
    out = run_felab("check")
    line = " ".join(out.stdout.split())
    assert "FIREWORKS_API_KEY is set but cannot be sent (it contains " in line and f"{what})" in line
    assert "note: FIREWORKS_API_KEY contains" in line and "Copy the key again" in line
    assert "abc" not in out.stdout + out.stderr  # no part of the key


def test_the_paid_bench_stops_before_sending_a_key_it_cannot_send(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", BAD_KEYS["curly quote"][0])
    out = run_script(PREFIX_BENCH, "--target", "fireworks", "--base-url", "http://127.0.0.1:9/v1", "--quick")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "UnicodeEncodeError" not in out.stderr
    said = " ".join(out.stderr.split())
    assert "FIREWORKS_API_KEY contains the character U+201C" in said and "cannot be sent" in said
    assert "abc" not in said


# ── 6. make check shows the model a script would use ─────────────────────────


def test_check_honours_felab_target_model(mock_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FELAB_MOCK_URL", mock_url)
    monkeypatch.setenv("FELAB_MOCK_MODEL", "my-own-model")
    monkeypatch.setenv("FELAB_FIREWORKS_MODEL", "accounts/fireworks/models/another-one")
    out = run_felab("check")
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert "my-own-model" in lines["mock"] and "up, but it serves felab-practice" in lines["mock"]
    assert "accounts/fireworks/models/another-one" in lines["fireworks"]


# ── 7. Ctrl+C says what this run recorded ────────────────────────────────────


def test_ctrl_c_before_anything_is_recorded_says_so(fresh_mock: str, isolated: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-u", str(PREFIX_BENCH), "--base-url", fresh_mock],
        cwd=LESSON06,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # wait until it measures, then stop it as Ctrl+C does
        if "call  1" in line:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "Traceback" not in err
    said = " ".join(err.split())
    assert "this run recorded nothing" in said and "kept" not in said
    assert not (isolated / "06-prefix.jsonl").exists()


def test_a_stopped_run_names_what_it_recorded(isolated: Path, capsys, monkeypatch) -> None:
    from felab import errors, this_run

    monkeypatch.setattr(this_run, "RECORDED", [])

    def main() -> None:
        record("06-prefix", {"target": "mock", "model": "m"})
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as stop:
        errors.run(main)
    assert stop.value.code == 130
    said = " ".join(capsys.readouterr().err.split())
    expected = os.path.relpath(isolated / "06-prefix.jsonl", Path.cwd())
    assert f"this run recorded 1 row before it stopped, kept in {expected}." in said


# ── 8. make targets typed in 03-labs/ work as in the kit folder ──────────────


def test_make_help_in_the_lab_book_folder_lists_the_kits_targets() -> None:
    here, kit = make(LABS), make(KIT)
    assert here.returncode == 0, here.stderr
    assert here.stdout == kit.stdout and "make check" in here.stdout


@pytest.mark.parametrize("target", ["check", "mock", "fw-check", "numbers", "demo"])
def test_each_course_page_target_runs_from_the_lab_book_folder(target: str) -> None:
    out = make(LABS, "-n", target)
    assert out.returncode == 0, out.stderr
    assert "No rule to make target" not in out.stderr


def test_make_check_in_the_lab_book_folder_prints_commands_for_that_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The practice server's address is one nothing listens on: a learner's `make mock` may hold 8765.
    port = free_port()
    monkeypatch.setenv("FELAB_MOCK_URL", f"http://127.0.0.1:{port}/v1")
    out = make(LABS, "check")
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("llamacpp"))
    assert "bash ../lessons/02-three-local-servers/serve_llamacpp.sh" in line  # works from 03-labs/
    mock_line = " ".join(next(x for x in out.stdout.splitlines() if x.startswith("mock")).split())
    assert f"down (start: ../.venv/bin/python -m felab.mock_server --port {port})" in mock_line
    # and a make target is written as typed there (03-labs/Makefile forwards it), not `make -C ..`
    monkeypatch.setenv("FELAB_CALLER_DIR", str(LABS))
    assert from_here("make mock") == "make mock"


# ── 2. A Python without the kit gets the exact command, not ModuleNotFoundError ──


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python with no felab and no packages: a fresh venv, as a learner's other project has."""
    venv = tmp_path_factory.mktemp("other-project") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return str(venv / "bin" / "python")


def run_with(python: str, script: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return subprocess.run(
        [python, str(script.relative_to(cwd)), *args], cwd=cwd, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize("script", ["prefix_bench.py", "affinity_bench.py"])
def test_a_lesson_script_without_the_kit_names_the_kits_python(
    script: str, bare_python: str, mock_url: str
) -> None:
    args = ("--target", "mock", "--base-url", mock_url, "--quick")
    out = run_with(bare_python, LESSON06 / script, *args, cwd=LESSON06)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    said = " ".join(out.stderr.split())
    assert said.startswith(f"error: this Python ({bare_python}) has no felab")
    command = backticked(said)[0]
    assert command == f"../../.venv/bin/python {script} " + " ".join(args)
    assert "source ../../.venv/bin/activate" in backticked(said)
    followed = subprocess.run(command.split(), cwd=LESSON06, capture_output=True, text=True, timeout=120)
    assert followed.returncode == 0, followed.stderr  # following it, from the same folder


def test_from_the_kit_folder_the_command_is_written_for_the_kit_folder(bare_python: str) -> None:
    out = run_with(bare_python, PREFIX_BENCH, "--target", "mock", cwd=KIT)
    said = " ".join(out.stderr.split())
    assert backticked(said)[0] == ".venv/bin/python lessons/06-prefix-caching/prefix_bench.py --target mock"


def test_a_new_lessons_script_has_the_guard(tmp_path: Path, bare_python: str) -> None:
    from felab.course.new_lesson import create_lesson

    (tmp_path / "felab").symlink_to(KIT / "felab")  # a kit: its felab/, and lessons/ beside it
    folder = create_lesson("07", "batching", tmp_path / "lessons")
    out = run_with(bare_python, folder / "batching.py", "--target", "mock", cwd=folder)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "has no felab" in out.stderr and "batching.py --target mock`" in out.stderr


def test_no_kit_advice_when_the_kits_environment_is_missing_or_broken(tmp_path: Path) -> None:
    from felab import no_kit

    kit, lesson = tmp_path / "kit", tmp_path / "kit" / "lessons" / "06-prefix-caching"
    lesson.mkdir(parents=True)
    said = no_kit.advice(kit, lesson, ["prefix_bench.py"], "/usr/bin/python3", "/usr", "felab")
    assert "`make -C ../.. setup`" in said and "`../../.venv/bin/python prefix_bench.py`" in said
    assert "`make setup`" in no_kit.advice(kit, kit, ["x.py"], "/usr/bin/python3", "/usr", "felab")

    (kit / ".venv" / "bin").mkdir(parents=True)
    (kit / ".venv" / "bin" / "python").touch()
    broken = no_kit.advice(
        kit, lesson, ["prefix_bench.py"], str(kit / ".venv/bin/python"), str(kit / ".venv"), "openai"
    )
    assert "has no openai, though it is the kit's own" in broken
    assert "`../../.venv/bin/python -m pip install -e ../..`" in broken


# ── Siblings: a start command for the address the run used ─────────────────


def test_start_commands_follow_the_address(monkeypatch: pytest.MonkeyPatch) -> None:
    from felab.targets import start_command

    monkeypatch.chdir(LESSON06)
    serve = "bash ../02-three-local-servers/serve_llamacpp.sh Q4_K_M 16384 4"
    assert start_command("llamacpp", "http://127.0.0.1:8080/v1") == serve
    assert start_command("llamacpp", "http://127.0.0.1:9090/v1") == f"LLAMACPP_PORT=9090 {serve}"
    assert start_command("mock", "http://127.0.0.1:8765/v1") == "make -C ../.. mock"
    assert start_command("mock", "http://localhost:9000/v1") == (
        "../../.venv/bin/python -m felab.mock_server --port 9000"
    )
    assert start_command("vllm", "http://127.0.0.1:8001/v1") == "vllm serve <model> --port 8001"


def test_a_refused_llamacpp_on_another_port_names_that_port() -> None:
    out = run_script(PREFIX_BENCH, "--target", "llamacpp", "--base-url", "http://127.0.0.1:9/v1")
    said = " ".join(out.stderr.split())
    assert out.returncode == 2
    assert "`LLAMACPP_PORT=9 bash ../02-three-local-servers/serve_llamacpp.sh Q4_K_M 16384 4`" in said


# ── Siblings: an address typed without http:// or without /v1 ────────────────


@pytest.mark.parametrize(
    ("scheme", "path", "said"),
    [
        ("", "/v1", "without http:// or https:// in front"),
        ("ftp://", "/v1", "with ftp:// in front"),
        ("", "", "without http:// or https:// in front"),  # the fix had no /v1: a second message
    ],
)
def test_a_base_url_without_a_scheme_names_the_fixed_one(
    mock_url: str, scheme: str, path: str, said: str
) -> None:
    # No scheme, or one the OpenAI API is not served at: the message says which, and the fix runs.
    bare = scheme + mock_url.removeprefix("http://").removesuffix("/v1") + path
    out = run_script(PREFIX_BENCH, "--base-url", bare, "--quick")
    told = " ".join(out.stderr.split())
    assert out.returncode == 2 and said in told, told
    fixed = backticked(told)[0]
    assert fixed == f"--base-url {mock_url}"
    assert run_script(PREFIX_BENCH, *fixed.split(), "--quick").returncode == 0  # following it


@pytest.mark.parametrize("pasted", ["", "/", "/chat/completions", "/chat/completions?x=1"])
def test_a_base_url_that_is_not_the_api_root_names_the_root(mock_url: str, pasted: str) -> None:
    # Without /v1, or an endpoint pasted whole: the advice is the root, and following it runs.
    # Before: `--base-url …/v1/chat/completions/v1`.
    url = mock_url.removesuffix("/v1") + pasted if pasted in ("", "/") else mock_url + pasted
    out = run_script(PREFIX_BENCH, "--base-url", url, "--quick")
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"`--base-url {mock_url}`" in said, said


# ── Issue 20: where a server cannot be reached, the cause, and advice that works ──


@pytest.fixture
def fireworks_fake(monkeypatch: pytest.MonkeyPatch):
    from fake_fireworks import fireworks_env

    with fireworks_env(monkeypatch) as running:
        yield running


def fireworks_bench(monkeypatch: pytest.MonkeyPatch, root: str) -> tuple[int, str]:
    monkeypatch.setenv("FIREWORKS_BASE_URL", root)
    out = run_script(PREFIX_BENCH, "--target", "fireworks", "--quick", timeout=60)
    assert "Traceback" not in out.stderr
    return out.returncode, " ".join(out.stderr.split())


def test_a_name_that_does_not_resolve_is_not_nothing_listening(fireworks_fake, monkeypatch) -> None:
    code, said = fireworks_bench(monkeypatch, "https://api.fireworks.invalid")
    assert code == 2 and "The name api.fireworks.invalid does not resolve" in said
    assert "nothing is listening" not in said and "nothing to start" not in said
    assert "FIREWORKS_BASE_URL (the service's root; unset, https://api.fireworks.ai)" in said
    assert fireworks_bench(monkeypatch, fireworks_fake.url)[0] == 0  # the address corrected


def test_no_name_server_is_no_network(fireworks_fake, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import socket

    from felab import FelabError, add_target_args, client, resolve, stream_once

    monkeypatch.setenv("FIREWORKS_BASE_URL", "https://api.fireworks.ai")  # the usual name: not a typo
    target = resolve(add_target_args(argparse.ArgumentParser()).parse_args(["--target", "fireworks"]))
    with monkeypatch.context() as offline:  # what getaddrinfo says with no network
        lookup_fails = socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        offline.setattr(socket, "getaddrinfo", lambda *a, **k: (_ for _ in ()).throw(lookup_fails))
        with pytest.raises(FelabError) as caught:
            stream_once(client(target), target.model, [{"role": "user", "content": "hi"}])
    said = caught.value.message
    assert "Could not look up api.fireworks.ai" in said and "seems to have no network" in said
    assert "nothing is listening" not in said
    # Connected again (names resolve), the same call gets through: here to the fake, by name.
    monkeypatch.setenv("FIREWORKS_BASE_URL", fireworks_fake.url.replace("127.0.0.1", "localhost"))
    target = resolve(add_target_args(argparse.ArgumentParser()).parse_args(["--target", "fireworks"]))
    assert stream_once(client(target), target.model, [{"role": "user", "content": "hi"}]).ttft_ms > 0


@pytest.mark.parametrize("typed", ["{host}", "{root}/inference/v1", "{root}/v1/"])
def test_fireworks_base_url_is_advised_as_the_root_and_works_for_both_uses(
    fireworks_fake, monkeypatch: pytest.MonkeyPatch, typed: str
) -> None:
    root = fireworks_fake.url
    value = typed.format(host=root.removeprefix("http://"), root=root)
    code, said = fireworks_bench(monkeypatch, value)
    assert code == 2 and said.startswith(f"error: FIREWORKS_BASE_URL is {value!r}")
    assert f"Use `FIREWORKS_BASE_URL={root}` (in" in said and "inference/v1`" not in said
    monkeypatch.setenv("FIREWORKS_BASE_URL", value)
    check = " ".join(run_felab("fw-check", timeout=60).stderr.split())
    assert f"Use `FIREWORKS_BASE_URL={root}` (in" in check  # make fw-check: the same advice
    assert fireworks_bench(monkeypatch, root)[0] == 0  # following it: the lesson
    assert run_felab("fw-check", timeout=60).returncode == 0  # and make fw-check


def test_the_public_name_is_advised_with_https(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw_test_key_0000")
    code, said = fireworks_bench(monkeypatch, "api.fireworks.ai/inference/v1")
    assert code == 2 and "Use `FIREWORKS_BASE_URL=https://api.fireworks.ai` (in" in said


@pytest.fixture
def web_server(tmp_path: Path):
    """A web server that is not an LLM server: Python's own, serving a folder."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("model", [[], ["--model", "m"]], ids=["asked", "given"])
def test_a_web_server_that_is_not_an_llm_server_is_named(web_server: str, mock_url: str, model) -> None:
    out = run_script(PREFIX_BENCH, "--base-url", web_server, *model, "--quick")
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"The server at {web_server} answered" in said and "a text/html page" in said
    assert "a web server is there, but not one that speaks OpenAI's API" in said
    assert "no model ''" not in said and "restart" not in said and "<html" not in said.lower()
    assert "`make -C ../.. check`" in said
    assert run_script(PREFIX_BENCH, "--base-url", mock_url, "--quick").returncode == 0  # an LLM server's


@pytest.mark.parametrize(
    ("status", "body", "what"),
    [(404, b'{"detail":"Not Found"}', "the words 'Not Found'"), (200, b'{"status":"ok"}', "something other")],
    ids=["404", "200-not-a-list"],
)
def test_a_json_api_that_is_not_an_llm_server_is_named_too(
    mock_url: str, status: int, body: bytes, what: str
) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class FastApiLike(BaseHTTPRequestHandler):  # a JSON API with other routes
        def log_message(self, *_: object) -> None:
            pass

        def do_GET(self) -> None:
            data = body
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), FastApiLike)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        out = run_script(PREFIX_BENCH, "--target", "vllm", "--base-url", url, "--quick")
    finally:
        server.shutdown()
        server.server_close()
    said = " ".join(out.stderr.split())
    assert (
        out.returncode == 2 and f"The server at {url} answered GET /v1/models with HTTP {status} and" in said
    )
    assert what in said
    assert "not one that speaks OpenAI's API" in said and "no model ''" not in said
    assert run_script(PREFIX_BENCH, "--base-url", mock_url, "--quick").returncode == 0  # an LLM server's


@pytest.fixture(params=["reset", "close"])
def resets(request: pytest.FixtureRequest):
    """A program that accepts each connection and drops it without an answer, as a server at its
    limit, or something that is not an HTTP server, can: reset at once (SO_LINGER 0), or read
    the request and close (the client sees "disconnected without sending a response")."""
    import struct
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            if request.param == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            else:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    read = b""
                    while b"\r\n\r\n" not in read and (more := conn.recv(65536)):
                        read += more
                    conn.shutdown(socket.SHUT_WR)  # an orderly close, no reply
                    time.sleep(0.05)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    listener.close()


def test_a_server_that_accepts_then_resets_is_not_nothing_listening(resets: int, mock_url: str) -> None:
    url = f"http://127.0.0.1:{resets}/v1"
    out = run_script(PREFIX_BENCH, "--target", "llamacpp", "--base-url", url, "--quick")
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "accepted the connection, then reset or closed it" in said
    assert "nothing is listening" not in said and "serve_llamacpp.sh" not in said  # the port is taken
    lsof = next(c for c in backticked(said) if c.startswith("lsof"))
    if shutil.which("lsof"):  # following it: it names this test's own process as the listener
        shown = subprocess.run(lsof.split(), capture_output=True, text=True, timeout=30).stdout
        assert str(os.getpid()) in shown and "LISTEN" in shown
    assert run_script(PREFIX_BENCH, "--base-url", mock_url, "--quick").returncode == 0  # the server's address


def test_connection_failure_names_each_cause_for_other_callers(resets: int) -> None:
    """connection_failure() is what the real-time replay calls to count its failures by kind."""
    import openai

    from felab.connect import client
    from felab.explain import NO_NAME, REFUSED, RESET, connection_failure
    from felab.targets import Target

    def failure(url: str) -> str:
        try:
            client(Target("vllm", url, "m", "k", False), timeout=10).models.list()
        except openai.APIConnectionError as exc:
            return connection_failure(exc)
        raise AssertionError(f"{url} answered")

    assert failure("http://127.0.0.1:9/v1") == REFUSED
    assert failure(f"http://127.0.0.1:{resets}/v1") == RESET
    assert failure("http://no-such-host.invalid/v1") == NO_NAME
    # What the real-time replay holds is stream_once()'s FelabError: its cause is read the same way.
    from felab import FelabError, stream_once

    with pytest.raises(FelabError) as caught:
        stream_once(client(Target("vllm", f"http://127.0.0.1:{resets}/v1", "m", "k", False)), "m", [])
    assert connection_failure(caught.value) == RESET and "accepted the connection" in caught.value.message


def test_calibrate_stops_at_a_server_that_answers_nothing_before_announcing_anything() -> None:
    # A port that takes connections (the kernel's backlog) and answers no request. Before:
    # `calibrate --target mlx` (whose model needs no GET) announced its 127 requests, then sat
    # silent for the first probe's two minutes.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)  # never accepted: every request waits for an answer that never comes
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        started = time.monotonic()
        out = run_felab("calibrate", "--target", "mlx", "--base-url", url, timeout=90)
        seconds = time.monotonic() - started
    finally:
        listener.close()
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "did not answer in time" in said and "Traceback" not in said, said
    assert "it sends at most" not in out.stdout and seconds < 60
