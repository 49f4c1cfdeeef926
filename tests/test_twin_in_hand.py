"""Issue 29, the twin in a learner's hands: `python -m felab` without the kit's environment,
03-labs/ seeing what the page names, a twin's advice and its numbers.

Each test types what the learner types (a fresh Python, a folder, a make target) and, where a
message gives advice, follows it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import KIT, LESSON06, PREFIX_BENCH, make_command, run_felab, run_make, run_script
from fake_llamacpp import MODEL_PATH as LLAMACPP_MODEL
from fake_llamacpp import fake_llamacpp

from felab.course import forms, numbers
from felab.mock_server.launch import practice_server, wait_until_serving
from felab.results import read_records

LABS = KIT / "03-labs"


def backticked(text: str) -> list[str]:
    """The commands a message shows, in `backticks`, with its line breaks undone."""
    return re.findall(r"`([^`]+)`", " ".join(text.split()))


# ── `python -m felab` in a Python without the kit (issue 29, point 8) ─────────


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python with no packages at all: a new terminal's `python3`, the kit's environment not active."""
    venv = tmp_path_factory.mktemp("no-kit") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return str(venv / "bin" / "python")


def subcommands() -> list[str]:
    from felab.cli import cli

    return sorted(cli.commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("folder", [KIT, LABS], ids=["kit root", "03-labs"])
def test_python_m_felab_without_the_kit_says_which_python_for_every_subcommand(
    folder: Path, bare_python: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    python = os.path.relpath(KIT / ".venv" / "bin" / "python", folder)
    for sub in subcommands():
        out = subprocess.run(
            [bare_python, "-m", "felab", sub, "--help"], cwd=folder, env=env, capture_output=True, text=True
        )
        assert out.returncode == 2 and "Traceback" not in out.stderr, (sub, out.stderr)
        said = " ".join(out.stderr.split())
        assert said.startswith(f"error: this Python ({bare_python}) has no click"), said
        commands = backticked(said)
        assert f"{python} -m felab {sub} --help" in commands, commands  # the kit's Python, for this folder
        activate = f"source {os.path.relpath(KIT / '.venv' / 'bin' / 'activate', folder)}"
        assert "make setup" in commands or activate in commands


# ── 03-labs/ sees what the page names (point 5) ───────────────────────────────


@pytest.mark.parametrize("name", ["results", "data", "lessons", ".venv", ".env", "felab"])
def test_the_lab_book_folder_reaches_the_kits_folders_by_their_names(name: str) -> None:
    link = LABS / name
    assert link.is_symlink() and Path(os.readlink(link)) == Path("..") / name
    assert link.resolve() == (KIT / name).resolve()


def test_a_shipped_profile_typed_in_the_lab_book_folder_is_found() -> None:
    """`make mock PROFILE=data/profiles/lesson-mac.toml` in 03-labs/ reads 03-labs/data/...: there."""
    from felab.mock_server.profile import read_settings

    assert read_settings(LABS / "data" / "profiles" / "lesson-mac.toml")["seats"] == 4


# ── Advice keeps the twin (point 4) ───────────────────────────────────────────


def small_seated_twin(folder: Path) -> Path:
    """The lesson's example Mac with 4 seats of 2,048 tokens: lesson 06's opening does not fit one."""
    text = (KIT / "data" / "profiles" / "lesson-mac.toml").read_text(encoding="utf-8")
    path = folder / "small-mac.toml"
    path.write_text(text.replace("context_tokens = 16384", "context_tokens = 8192"), encoding="utf-8")
    return path


def twin_served(url: str) -> dict[str, Any] | None:
    """What GET /v1/models says of the twin the server at `url` serves."""
    with urllib.request.urlopen(f"{url}/models", timeout=10) as reply:
        return json.loads(reply.read())["data"][0].get("felab_twin")


def test_a_twin_says_which_twin_it_is(tmp_path: Path) -> None:
    profile = small_seated_twin(tmp_path)
    with practice_server("--profile", str(profile)) as url:
        said = twin_served(url)
    assert said is not None and said["name"] == "small-mac" and said["path"] == str(profile.resolve())
    assert said["engine"] == "llama.cpp (the lesson's example Mac)"
    with practice_server() as url:
        assert twin_served(url) is None  # the plain practice server


def test_the_seat_advice_followed_literally_serves_the_same_twin(tmp_path: Path) -> None:
    profile = small_seated_twin(tmp_path)
    with practice_server("--profile", str(profile)) as url:
        out = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url, "--quick")
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "does not fit a seat of the practice server" in said, said
    command = next(c for c in backticked(said) if "mock_server" in c)
    port = url.split(":")[2].split("/")[0]
    profile_here = os.path.relpath(profile, LESSON06)
    kept = f"--profile {profile_here} --seats 4 --context-tokens 16384 --port {port}"
    assert command.endswith(kept), command
    proc = subprocess.Popen(shlex.split(command), cwd=LESSON06, stdout=subprocess.DEVNULL)  # as typed
    try:
        wait_until_serving(url, proc)
        served = twin_served(url)
        assert served is not None and served["name"] == "small-mac", "it serves the twin, not the plain one"
        again = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url, "--quick")
        assert again.returncode == 0, again.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def start_on(port: int, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "felab.mock_server", "--port", str(port), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_twin_asked_for_where_the_plain_server_runs_names_both_and_serves_the_twin_elsewhere(
    tmp_path: Path,
) -> None:
    profile = small_seated_twin(tmp_path)
    with practice_server() as url:
        port = int(url.split(":")[2].split("/")[0])
        out = start_on(port, "--profile", str(profile))
    said = " ".join(out.stderr.split())
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "Use that one as it is" not in said  # it is not the twin
    assert "it is the plain practice server (no profile), not the twin from profile small-mac" in said, said
    command = next(c for c in backticked(said) if "mock_server" in c)
    assert f"--profile {os.path.relpath(profile, Path.cwd())} --port " in command
    other = int(command.rsplit(" ", 1)[1])
    proc = subprocess.Popen(shlex.split(command), stdout=subprocess.DEVNULL)  # as typed, in this folder
    try:
        wait_until_serving(f"http://127.0.0.1:{other}/v1", proc)
        served = twin_served(f"http://127.0.0.1:{other}/v1")
        assert served is not None and served["name"] == "small-mac"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_same_twin_on_the_port_is_used_as_it_is_and_a_twin_there_is_named(tmp_path: Path) -> None:
    profile = small_seated_twin(tmp_path)
    with practice_server("--profile", str(profile)) as url:
        port = int(url.split(":")[2].split("/")[0])
        same = " ".join(start_on(port, "--profile", str(profile)).stderr.split())
        plain = " ".join(start_on(port).stderr.split())
    assert "a practice server already runs there" in same and "Use that one as it is" in same
    assert "it is the twin from profile small-mac, of llama.cpp" in plain
    assert "not the plain practice server (no profile) you asked for" in plain


# ── A twin's numbers are a twin's (point 3) ───────────────────────────────────


def fast_twin(folder: Path) -> Path:
    """The lesson's example Mac, reading 50,000 tokens a second: a twin whose runs take a moment."""
    text = (KIT / "data" / "profiles" / "lesson-mac.toml").read_text(encoding="utf-8")
    path = folder / "fast-mac.toml"
    path.write_text(text.replace("prefill_tps = 1050.0", "prefill_tps = 50000.0"), encoding="utf-8")
    return path


def test_a_twins_runs_are_recorded_as_the_twins_and_shown_as_their_own_rows(
    isolated: Path, tmp_path: Path
) -> None:
    with practice_server() as url:
        plain = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url, "--quick")
    with practice_server("--profile", str(fast_twin(tmp_path))) as url:
        twin = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url, "--quick")
    assert plain.returncode == 0 and twin.returncode == 0, plain.stderr + twin.stderr
    rows = read_records("06-prefix")
    assert [r.get("profile") for r in rows] == [None, "fast-mac"]
    assert rows[1]["profile_engine"] == "llama.cpp (the lesson's example Mac)" and rows[1]["quick"] is True

    found = numbers.collect()["06-prefix"]
    assert len(found) == 2, "the twin's run does not replace the practice server's"
    out = run_felab("numbers")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("mock, twin fast-mac ") for line in lines), out.stdout
    assert any(line.startswith("mock ") and "twin" not in line for line in lines), out.stdout


def test_the_model_recorded_is_the_one_the_server_reports(isolated: Path) -> None:
    with fake_llamacpp("ok") as url:
        out = run_script(
            PREFIX_BENCH, "--target", "llamacpp", "--base-url", url, "--model", "llama-3.1-8b", "--quick"
        )
    assert out.returncode == 0, out.stderr
    (row,) = read_records("06-prefix")
    assert row["model"] == LLAMACPP_MODEL and row["model_asked"] == "llama-3.1-8b"
    assert "profile" not in row


def prefix_row(ts: str, first: float, **more: Any) -> dict[str, Any]:
    return {
        "ts": ts,
        "target": "llamacpp",
        "model": "m.gguf",
        "order": "stable-first",
        "first_ms": first,
        "rest_p50_ms": 36.0,
        "speedup_x": first / 36.0,
        "warm_start": False,
        **more,
    }


def write(results: Path, *rows: dict[str, Any]) -> None:
    results.mkdir(parents=True, exist_ok=True)
    with (results / "06-prefix.jsonl").open("a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def test_the_page_takes_the_lessons_step_and_says_which_run(isolated: Path) -> None:
    write(
        isolated,
        prefix_row("2026-12-02T10:00:00+00:00", 740.0, quick=False),
        prefix_row("2026-12-02T10:05:00+00:00", 555.0, quick=True),  # later, but --quick
    )
    field = numbers.declared()["06-prefix-caching"][0]
    got = numbers.measured(field.source)
    assert got is not None and got["value"] == "740 / 36"
    assert got["run"] == "the stable-first run of 2026-12-02 10:00 UTC"
    assert "2026-12-02 10:05 UTC is left out: it was a --quick run" in got["note"]
    form = " ".join(forms.numbers_form("06-prefix-caching", numbers.declared()["06-prefix-caching"]).split())
    assert "Filled from your run: the stable-first run of 2026-12-02 10:00 UTC on llamacpp" in form
    assert "is left out: it was a --quick run" in form

    write(
        isolated, prefix_row("2026-12-02T10:10:00+00:00", 650.0, model="m.gguf", model_asked="llama-3.1-8b")
    )
    got = numbers.measured(field.source)
    assert got is not None and got["value"] == "650 / 36"  # llama.cpp ran its model: the figure stands
    assert "The server ran m.gguf, though the run asked for llama-3.1-8b." in got["note"]


def test_a_page_field_never_takes_a_twins_run() -> None:
    source = numbers.Source("06-prefix", {"target": "mock", "order": "stable-first"}, ("first_ms",))
    twin_row = {**prefix_row("2026-12-02T10:00:00+00:00", 90.0), "target": "mock", "profile": "fast-mac"}
    assert numbers.left_out(twin_row, source) == "it ran on a twin (profile fast-mac), not on mock itself"
    assert numbers.left_out({**twin_row, "profile": None}, source) is None


# ── The course page's errata, for the instructor (point 10) ───────────────────

PAGE = """Prefix caching

lesson 06 · lessons/06-prefix-caching

Run python prefix_bench.py --target mock --fast and read results/06-prefix.jsonl.
Stuck? pkill -f felab.mock_server, then make mock & and make warp-speed.
See serve_everything.sh and felab/mock_server.py.

Code in this step

prefix_bench.py Python · 3 lines

1
\"\"\"Lesson 06: prefix caching, measured on an agent-shaped workload.
2
print("an old line")
3
print("another")
"""


def test_course_errata_name_each_difference_from_the_kit(tmp_path: Path) -> None:
    from felab.course import errata

    page = tmp_path / "lesson-06-prefix-caching.txt"
    page.write_text(PAGE, encoding="utf-8")
    found = {(e.kind, e.page) for e in errata.errata(page, KIT)}
    assert ("command", "pkill -f felab.mock_server") in found
    assert ("command", "make warp-speed") in found and ("command", "make mock") not in found
    assert ("command", "python prefix_bench.py ... --fast") in found  # it has no --fast
    assert ("file name", "serve_everything.sh") in found
    moved = next(e for e in errata.errata(page, KIT) if e.page == "felab/mock_server.py")
    assert moved.kit.endswith("it is now a package, felab/mock_server/")
    assert ("file name", "results/06-prefix.jsonl") not in found  # a run writes it
    listing = next(e for e in errata.errata(page, KIT) if e.kind == "code listing")
    assert listing.page == "prefix_bench.py: 3 lines" and "(the first at line 2)" in listing.kit
    step = next(e for e in errata.errata(page, KIT) if e.kind == "missing step")
    assert (
        "`make calibrate`" in step.kit
        and "`make mock PROFILE=results/profiles/llamacpp-DATE.toml`" in step.kit
    )


def test_make_course_errata_reads_the_page_it_is_given(tmp_path: Path) -> None:
    page = tmp_path / "lesson-06-prefix-caching.txt"
    page.write_text(PAGE, encoding="utf-8")
    out = run_make(LABS, "-s", "course-errata", f"PAGES={page}")  # typed in 03-labs/: passed on
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.startswith("lesson-06-prefix-caching.txt: ") and "pkill -f felab.mock_server" in out.stdout
    )
    missing = run_make(KIT, "-s", "course-errata", "PAGES=no-such-page.txt")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "no course page at no-such-page.txt" in missing.stderr


def test_a_warm_twins_advice_restarts_the_same_twin(tmp_path: Path) -> None:
    profile = fast_twin(tmp_path)
    with practice_server("--profile", str(profile)) as url:
        run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url, "--quick")
        again = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url, "--quick")
    said = " ".join(again.stdout.split())
    assert again.returncode == 0 and "call 1 was not cold" in said, said
    port = url.split(":")[2].split("/")[0]  # the same twin, on the port this run used
    advised = f"make -C ../.. mock PROFILE={os.path.relpath(profile, LESSON06)} PORT={port}"
    assert advised in backticked(said)
    # followed from the lesson folder (the test's Python, no .venv built: conftest.make_command)
    command, env = make_command(LESSON06, *shlex.split(advised)[1:])
    proc = subprocess.Popen(command, cwd=LESSON06, env=env, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until_serving(url, proc)
        served = twin_served(url)
        assert served is not None and served["name"] == "fast-mac"
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl+C in its terminal: make and its server, this group only
        proc.wait(timeout=20)


# ── A run made while calibrate sends to the same server (issue 29, "Also:") ────

HOLD_BUSY = """
import sys, time
from felab.results import busy
with busy("calibrate", sys.argv[1]):
    print("busy", flush=True)
    time.sleep(120)
"""


def test_a_run_made_during_calibrate_is_recorded_so_and_left_out_of_the_page(isolated: Path) -> None:
    with practice_server() as url:
        calibrating = subprocess.Popen(
            [sys.executable, "-c", HOLD_BUSY, url], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
        )
        try:
            assert calibrating.stdout is not None and calibrating.stdout.readline() == "busy\n"
            during = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url)
        finally:
            calibrating.terminate()
            calibrating.wait(timeout=10)
        alone = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url, "--order", "variable-first")
    assert during.returncode == 0 and alone.returncode == 0, during.stderr + alone.stderr
    first, second = read_records("06-prefix")
    assert first["during"] == "calibrate" and "during" not in second  # its process ended: nothing is busy
    source = numbers.Source("06-prefix", {"target": "mock", "order": "stable-first"}, ("first_ms",))
    assert numbers.measured(source) is None  # the only stable-first run shared the server
    assert numbers.left_out(first, source) == (
        "it ran while calibrate was sending to the same server: run the step again alone"
    )


def test_a_calibration_that_died_marks_nothing(isolated: Path) -> None:
    from felab.results import busy_dir, busy_with

    busy_dir().mkdir(parents=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    (busy_dir() / f"{dead.stdout.strip()}.json").write_text(
        '{"what": "calibrate", "base_url": "http://x/v1"}'
    )
    assert busy_with("http://x/v1") is None


def test_a_field_whose_only_run_was_left_out_says_why(isolated: Path) -> None:
    row = {**prefix_row("2026-12-02T10:15:00+00:00", 900.0), "order": "variable-first", "speedup_x": 2.5}
    write(isolated, {**row, "during": "calibrate"})
    fields = numbers.declared()["06-prefix-caching"]
    assert numbers.measured(fields[1].source) is None
    said = "Your run of 2026-12-02 10:15 UTC is left out: it ran while calibrate was sending to the same"
    assert said in numbers.nothing_usable(fields[1].source)
    assert said in " ".join(forms.numbers_form("06-prefix-caching", fields).split())
    out = run_felab("numbers")
    assert out.returncode == 0 and said in " ".join(out.stdout.split()), out.stdout


def test_two_lesson_runs_on_one_server_at_once_are_each_recorded_so(isolated: Path) -> None:
    # Started half a second apart in two terminals, each timed the other's requests too (the
    # opening-first run read speedup 1.0), and both were offered as clean cold runs. Here the long
    # one (time first: 12 cold calls) runs around the short one, which ends first.
    with practice_server() as url:
        argv = [sys.executable, str(PREFIX_BENCH), "--target", "mock", "--base-url", url]
        long = subprocess.Popen(
            [*argv, "--order", "variable-first"],
            cwd=PREFIX_BENCH.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30  # until the long one has marked its run
            while not list((isolated / ".busy").glob("run-*.json")) and time.monotonic() < deadline:
                time.sleep(0.05)
            short = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url, "--quick")
        finally:
            _, err = long.communicate(timeout=120)
        alone = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", url)
    assert long.returncode == 0 and short.returncode == 0 and alone.returncode == 0, err + short.stderr
    rows = read_records("06-prefix")
    by = {(r["order"], r.get("quick")): r for r in rows}
    assert by["stable-first", True]["during"] == "another lesson run (prefix_bench.py)"  # the long one, going
    assert by["variable-first", False]["during"] == "another lesson run (prefix_bench.py)"  # the short, ended
    assert "during" not in by["stable-first", False]  # after both: nothing overlapped it
