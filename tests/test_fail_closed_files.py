"""Profiles, files and processes fail closed (issues 29 and 31): what a learner types or a file
holds is checked before it is used, and what the kit starts it also stops."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner, Result
from conftest import KIT, make_command, run_make
from fake_fireworks import COULD_NOT, DEPLOYMENTS, KEY, FakeFireworks, deployment

from felab.calibrate import save
from felab.calibrate.profile import Profile, to_toml, write
from felab.calibrate.save import out_problem
from felab.cli import cli
from felab.mock_server.config import DAY_S, DEFAULTS, Settings, term_bounds
from felab.mock_server.launch import free_port, practice_server, wait_until_serving
from felab.mock_server.profile import END_LINE, SCHEMA, ProfileError, read_settings
from felab.mock_server.serve import port_is_free
from felab.mock_server.waits import OnTime, clock

LABS = KIT / "03-labs"


def make(folder: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`make ARGS` typed in `folder`, as conftest.run_make runs it (nothing built or installed
    into the checkout)."""
    return run_make(folder, "-s", *args)


# ── make new-lesson: NAME and N are arguments, never shell text (31.10) ─────────


@pytest.mark.parametrize("folder", [KIT, LABS], ids=["kit", "03-labs"])
@pytest.mark.parametrize(
    ("n", "name"),
    [
        ("07", "$(touch x)"),
        ("07", "`touch x`"),
        ("07", 'a";touch x;"'),
        ("07", "a'; touch x; '"),
        ("$(touch x)", "ok"),
    ],
)
def test_new_lesson_runs_nothing_a_name_holds(
    tmp_path: Path, folder: Path, n: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative `touch x` would land here, or in the folder make runs in
    before = sorted(p.name for p in (KIT / "lessons").iterdir())
    out = make(folder, tmp_path, "new-lesson", f"N={n}", f"NAME={name}")
    assert out.returncode != 0
    said = out.stdout + out.stderr
    assert "must be" in said and repr(name if n == "07" else n) in said  # the value, as typed
    assert "Traceback" not in said
    for where in (tmp_path, folder, KIT):
        assert not (where / "x").exists()
    assert sorted(p.name for p in (KIT / "lessons").iterdir()) == before


# ── fw-check: a page it cannot read for sure, an output it cannot write (31.12) ──


def fw_check(shell_redirect: str = "") -> subprocess.CompletedProcess[str]:
    """`python -m felab fw-check` as a shell runs it, with `shell_redirect` (`>&-`) after it."""
    cmd = f"exec {shlex.quote(sys.executable)} -m felab fw-check {shell_redirect}"
    out = subprocess.run(["sh", "-c", cmd], cwd=KIT, capture_output=True, text=True, timeout=60)
    assert KEY not in out.stdout + out.stderr and "Traceback" not in out.stderr
    return out


@pytest.mark.parametrize(
    "body",
    [
        # Python's json keeps the last value (0 replicas: all clear); another parser, the first
        b'{"deployments": [{"name": "accounts/learner/deployments/d",'
        b' "replicaCount": 1, "replicaCount": 0}]}',
        b'{"deployments": [], "deployments": []}',
        b'{"deployments": [], "nextPageToken": "p2", "nextPageToken": ""}',
    ],
)
def test_a_page_with_a_key_named_twice_is_could_not_check(fake: FakeFireworks, body: bytes) -> None:
    fake.override[DEPLOYMENTS] = (200, body)
    out = fw_check()
    assert out.returncode == 2, out.stdout + out.stderr
    said = " ".join(out.stderr.split())
    assert COULD_NOT in said and "twice in one object" in said and "Nothing is billing" not in out.stdout


@pytest.mark.parametrize("billing", [False, True])
def test_a_closed_output_exits_2_with_its_message_on_stderr(fake: FakeFireworks, billing: bool) -> None:
    if billing:
        fake.deployments["learner"] = [deployment("bills")]
    out = fw_check(">&-")
    assert out.returncode == 2, out.stderr
    said = " ".join(out.stderr.split())
    assert COULD_NOT in said and "its output was closed (`>&-`)" in said
    assert "AttributeError" not in said


# ── Profiles within plausible bounds (31.6) ──────────────────────────────────


def serve_profile(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """`python -m felab.mock_server --profile FILE` on a free port: what it says when it stops."""
    path = tmp_path / "hostile.toml"
    path.write_text(text)
    cmd = [sys.executable, "-m", "felab.mock_server", "--port", str(free_port()), "--profile", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


HEAD = "[profile]\nschema = 1\n[settings]\n"


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("seats = 100000000", "--seats must be at most 1024, not 100000000"),
        ("chars_per_token = 1e-6", "--chars-per-token must be at least 0.5, not 1e-06"),
        ("chars_per_token = 25.0", "--chars-per-token must be at most 20, not 25"),
        ("cached_token_us = 1e15", "--cached-token-us 1e+15 would make the longest request"),
        ("prefill_attention_ns = 1e9", "--prefill-attention-ns 1e+09 would make the longest request"),
        ("decode_context_ns = 1e9", "--decode-context-ns 1e+09 would make the longest request"),
        ("prefill_tps = 0.001", "--prefill-tps 0.001 would make the longest request"),
        ("decode_tps = 0.001", "--decode-tps 0.001 would make the longest request"),
        ("tile_tokens = 64\nuntiled_ns = 1e12", "--untiled-ns 1e+12 would make the longest request"),
        ("overhead_ms = 1e12", "--overhead-ms must be at most 60000, not 1e+12"),
        ("context_tokens = 1000000000", "--context-tokens must be at most 16777216, not 1000000000"),
    ],
)
def test_a_hostile_profile_is_refused_naming_the_setting_value_and_bound(
    tmp_path: Path, setting: str, said: str
) -> None:
    # Today: seats = 1e8 exhausted memory at start; cached_token_us = 1e15 killed the thread that
    # sends first tokens; chars_per_token = 1e-6 held the server 12 s, then a plain 500.
    out = serve_profile(tmp_path, HEAD + setting + "\n[fit]\n")
    assert out.returncode != 0
    said_here = " ".join(out.stderr.split())
    assert said in said_here and "Traceback" not in said_here
    if "longest request" in said:  # the bound for this profile's context, and what to do
        assert "--context-tokens 131072" in said_here and re.search(
            r"must be at (most|least) [\d.e+]+", said_here
        )


def test_a_deeply_nested_profile_is_damaged_not_a_recursion_error(tmp_path: Path) -> None:
    out = serve_profile(tmp_path, HEAD + "seats = " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert out.returncode != 0
    said = " ".join(out.stderr.split())
    assert "is damaged: it nests arrays or tables too deeply" in said and "Traceback" not in said


def worst_request_s(s: Settings) -> float:
    """The longest modelled time of one request these settings allow, by timing.py's own formula:
    every split of --context-tokens (with seats, of a seat's share: a longer request is refused)
    into cached opening c, new tokens u and reply r, alone (with seats, beside a stream in each)."""
    streams = s.seats or 1
    model, c_max = s.timing, s.context_tokens // streams
    worst = 0.0
    for c in range(0, c_max + 1, c_max // 64):
        for u in range(1, c_max - c + 1, max((c_max - c) // 64, 1)):
            for rows in (
                0,
                s.tile_tokens - 1,
            ):  # the last piece: none, or the most rows it reads one at a time
                uu = max(u - u % s.tile_tokens + rows, 1) if s.tile_tokens else u
                if uu + c > c_max:
                    continue
                r = c_max - c - uu
                decode = r * model.token_interval_s(streams, c + uu)
                worst = max(worst, s.overhead_ms / 1000 + model.prefill_s(uu, c) + decode)
    return worst


@pytest.mark.parametrize("context", [4096, 131_072])
@pytest.mark.parametrize("seats", [None, 4])
def test_every_term_at_its_bound_keeps_the_longest_request_within_a_day(
    context: int, seats: int | None
) -> None:
    # Each term's bound is worked out from the formula (config.term_bounds); with all of them at
    # their bounds at once, a request filling the context still takes at most a day.
    base = dataclasses.replace(
        DEFAULTS,
        context_tokens=context,
        seats=seats,
        tile_tokens=64,
        decode_slowdown=0.5,
        overhead_ms=60_000.0,
    )
    at_bounds = {name: bound for name, _, bound, _ in term_bounds(base)}
    s = dataclasses.replace(base, **at_bounds)
    assert worst_request_s(s) <= DAY_S
    # and the bounds are not far tighter than a day: six terms, each at most a sixth of it, do not
    # all peak on one request (attention at no cached opening, the cached tokens' cost at a full one)
    assert worst_request_s(s) >= 0.4 * DAY_S
    for name, _, bound, side in term_bounds(base):  # one step past any bound is refused
        past = bound * (0.99 if side == "at least" else 1.01)
        with pytest.raises(ValueError, match=f"--{name.replace('_', '-')} .* must be {side}"):
            dataclasses.replace(s, **{name: past})


def test_the_first_token_sender_survives_a_deadline_years_away() -> None:
    # A wait of 1e15 s overflowed the lock's timeout inside OnTime's thread, which died: no
    # first token was sent after it. Now the thread waits in steps and wakes the next one on time.
    async def main() -> bool:
        on_time = OnTime()
        far = on_time.at(clock() + 1e15)
        await asyncio.sleep(0.1)  # the thread is asleep on the far deadline
        await asyncio.wait_for(on_time.until(clock() + 0.05), timeout=10)
        far.cancel()
        return on_time.thread is not None and on_time.thread.is_alive()

    assert asyncio.run(main())


# ── A damaged profile: cut short, or a setting misspelt (29.6) ──────────────────


def a_written_profile() -> str:
    """A profile as calibrate writes it (schema 2, its closing line last)."""
    settings = {
        "overhead_ms": 7.5,
        "prefill_tps": 51000.0,
        "chars_per_token": 3.9,
        "cache_mode": "seat-prefix",
    }
    settings |= {"seats": 4, "context_tokens": 16384, "batch_tokens": "none"}
    about = {"schema": SCHEMA, "engine": "llama.cpp", "date": "2026-12-02"}
    return to_toml(Profile(about, settings, {"prefill_points": 7}, {"cache_reuse": "yes"}))


def test_a_profile_cut_at_any_line_is_refused_and_the_whole_one_reads(tmp_path: Path) -> None:
    text = a_written_profile()
    path = tmp_path / "p.toml"
    path.write_text(text)
    assert read_settings(path)["seats"] == 4
    assert text.rstrip().splitlines()[-1] == END_LINE
    lines = text.splitlines(keepends=True)
    settings_at = lines.index("[settings]\n")
    for cut in range(settings_at + 1, len(lines) - 1):  # cut after each line, the closing one lost
        path.write_text("".join(lines[:cut]))
        with pytest.raises(ProfileError) as refused:
            read_settings(path)
        said = str(refused.value)
        if "cut short" not in said:  # a cut before any setting: the [settings] table is empty, not missing
            continue
        assert f"it ends at line {len(''.join(lines[:cut]).rstrip().splitlines())}" in said
        assert "would silently be the practice server's defaults" in said


def test_an_old_profile_cut_inside_its_settings_is_refused(tmp_path: Path) -> None:
    # Schema 1 (before the closing line): whole when a table follows [settings], as every
    # schema-1 writer wrote one; the shipped profiles are schema 1 and still read.
    shipped = (KIT / "data" / "profiles" / "lesson-mac.toml").read_text()
    assert "schema = 1" in shipped and read_settings(KIT / "data" / "profiles" / "lesson-mac.toml")
    cut = shipped[: shipped.index("context_tokens = 16384")]  # valid TOML, valid settings: 4 seats
    path = tmp_path / "old.toml"
    path.write_text(cut)
    last = len(cut.rstrip().splitlines())
    with pytest.raises(
        ProfileError, match=rf"was cut short: it ends inside \[settings\] at line {last} \(`seats = 4"
    ):
        read_settings(path)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("seat = 4", "sets seat, which this practice server does not have (line 6). Did you mean seats?"),
        (
            "prefill_tp = 900.0",
            "sets prefill_tp, which this practice server does not have (line 6). Did you mean prefill_tps?",
        ),
        (
            "warp_factor = 9",
            "sets warp_factor, which this practice server does not have (line 6). No setting has a name",
        ),
    ],
)
def test_a_misspelt_setting_names_its_line_and_the_likely_setting(
    tmp_path: Path, line: str, said: str
) -> None:
    path = tmp_path / "typo.toml"
    path.write_text(f"[profile]\nschema = {SCHEMA}\n\n[settings]\noverhead_ms = 5.0\n{line}\n\n{END_LINE}\n")
    with pytest.raises(ProfileError) as refused:
        read_settings(path)
    assert said in str(refused.value) and "newer felab" not in str(refused.value)


# ── Writing the profile: whole or not at all, never over what is not a profile (29.6, 31.7) ──


def calibrate_out(out: Path) -> Result:
    """`felab calibrate --out OUT` against an address where nothing listens: --out is checked first."""
    args = [
        "calibrate",
        "--target",
        "mock",
        "--base-url",
        f"http://127.0.0.1:{free_port()}/v1",
        "--out",
        str(out),
    ]
    return CliRunner().invoke(cli, args)


def test_out_refuses_a_file_that_is_not_a_profile(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("FIREWORKS_API_KEY=fw_secret_0123\n")
    result = calibrate_out(env)
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert (
        f"--out {env} already exists and is not a felab profile" in said
        and "results/profiles/NAME.toml" in said
    )
    assert "fw_secret" not in said and "Could not connect" not in said  # refused before any request
    assert env.read_text() == "FIREWORKS_API_KEY=fw_secret_0123\n"


@pytest.mark.parametrize("kind", ["a symbolic link", "a folder", "a device"])
def test_out_refuses_anything_but_a_regular_file(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out.toml"
    if kind == "a symbolic link":
        (tmp_path / "p.toml").write_text(a_written_profile())
        out.symlink_to(tmp_path / "p.toml")  # even to a profile: the rename would replace the link
    elif kind == "a folder":
        out.mkdir()
    else:
        out = Path("/dev/full")
    result = calibrate_out(out)
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    if kind == "a folder":  # click's own check of --out (dir_okay=False) says it first
        assert f"'{out}' is a directory" in said
    else:
        assert f"--out {out} is {kind}: calibrate writes its profile only to a regular file" in said
    assert out.is_symlink() or out.is_dir() or out.is_char_device()


def test_out_replaces_a_profile_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "p.toml"
    out.write_text(a_written_profile())
    assert out_problem(out) is None and out_problem(tmp_path / "new.toml") is None
    write(Profile({"schema": SCHEMA}, {"seats": 2}), out)
    assert read_settings(out) == {"seats": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml"]


def test_a_full_disk_loses_nothing_and_leaves_no_part_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "p.toml"
    out.write_text(before := a_written_profile())

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(save.os, "fsync", full)  # the disk fills as the profile is written
    profile = Profile({"schema": SCHEMA}, {"seats": 2})
    with pytest.raises(save.ProfileNotWritten) as refused:
        write(profile, out)
    said = str(refused.value)
    assert f"could not be written to {out} (No space left on device)" in said and "printed above" in said
    assert refused.value.text == to_toml(profile)  # what calibrate prints: the whole profile
    assert out.read_text() == before  # the old profile untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml"]  # no .part left


# ── No orphans: SIGTERM and SIGHUP stop the throw-away practice server (31.9, 29.7) ──


def descendants(pid: int) -> dict[int, str]:
    """Every live process below `pid` (from /proc), with its command line."""
    parents: dict[int, int] = {}
    lines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            lines[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":  # a zombie has ended: only its parent has not read its status yet
            parents[int(entry.name)] = int(fields[1])
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                found[child] = lines[child]
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def the_server_below(command: subprocess.Popen, within_s: float = 60) -> int:
    """The PID of the practice server `command` started (`-m felab.mock_server`, below it)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        servers = [p for p, line in descendants(command.pid).items() if "felab.mock_server" in line]
        if servers:
            return servers[0]
        assert command.poll() is None, command.communicate()
        time.sleep(0.05)
    raise AssertionError(f"no practice server under {command.args}")


def stop_and_check(
    cmd: list[str], sig: signal.Signals, cwd: Path = KIT, env: dict[str, str] | None = None
) -> None:
    """Start `cmd`, wait for its practice server, send `sig` to the command alone: both end."""
    command = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    server = None
    try:
        server = the_server_below(command)
        time.sleep(0.3)  # let it get under way (the lesson script running, or the server starting)
        command.send_signal(sig)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (alive(server) or command.poll() is None):
            time.sleep(0.05)
        assert not alive(server), f"the practice server {server} outlived {sig.name} to {cmd}"
        assert command.poll() is not None
        assert "Traceback" not in command.communicate()[1]
    finally:
        for pid in (server, command.pid):
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)
        command.wait(timeout=10)


needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


@needs_proc
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("what", ["demo", "smoke"])
def test_felab_demo_and_smoke_leave_no_server_behind(sig: signal.Signals, what: str) -> None:
    stop_and_check([sys.executable, "-m", "felab", what], sig)


@needs_proc
def test_make_demo_leaves_no_server_behind() -> None:
    argv, env = make_command(KIT, "-s", "demo")
    stop_and_check(argv, signal.SIGTERM, env=env)


@needs_proc
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_calibrate_check_leaves_no_twin_behind(tmp_path: Path, sig: signal.Signals) -> None:
    profile = tmp_path / "twin.toml"
    profile.write_text(a_written_profile())
    with practice_server() as target:  # the "real" server it checks against
        cmd = [sys.executable, "-m", "felab", "calibrate", "--check", str(profile), "--target", "mock"]
        stop_and_check([*cmd, "--base-url", target], sig)


@needs_proc
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGINT], ids=["SIGHUP", "Ctrl+C"])
def test_the_practice_server_stops_cleanly(sig: signal.Signals) -> None:
    # SIGHUP (its terminal closed): a graceful stop, where SIGHUP's default would be -1. Ctrl+C
    # ("Ctrl+C stops it"): uvicorn raises it again once it has stopped, which click called
    # `Aborted!` (status 1), and `make mock` then `make: *** [mock] Error 1`.
    port = free_port()
    cmd = [sys.executable, "-m", "felab.mock_server", "--port", str(port)]
    server = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/v1", server)
        server.send_signal(sig)
        out, err = server.communicate(timeout=20)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0 and "Traceback" not in err and "Aborted" not in err, err
    assert port_is_free("127.0.0.1", port)
    assert sig != signal.SIGINT or "practice server stopped (Ctrl+C)" in out


@needs_proc
@pytest.mark.parametrize("folder", [KIT / "lessons" / "06-prefix-caching", LABS], ids=["lesson", "03-labs"])
def test_ctrl_c_on_make_mock_in_a_forwarding_folder_says_stopped_and_no_failure(folder: Path) -> None:
    # Typed in a lesson folder, `make mock` runs the kit's make inside this folder's: Ctrl+C
    # reaches both, and this one added "make: *** [Makefile:10: mock] Interrupt" after the
    # server's "stopped", as if something had failed.
    port = free_port()
    argv, env = make_command(folder, "mock", f"PORT={port}")
    command = subprocess.Popen(
        argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/v1", command)
        os.killpg(command.pid, signal.SIGINT)  # as a terminal sends Ctrl+C: to the whole group
        out, err = command.communicate(timeout=20)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
    assert "practice server stopped (Ctrl+C)" in out, out + err
    assert "***" not in err and "Traceback" not in err, err
    assert port_is_free("127.0.0.1", port)


def metrics(url: str) -> str:
    return httpx.get(url.removesuffix("/v1") + "/metrics", timeout=5).text


@needs_proc
def test_ctrl_c_stops_the_practice_server_with_streams_under_way_without_waiting_for_them() -> None:
    # Behind a queue of long prompts (here 200 s each at 10 tokens/s) the server waited for every
    # stream, saying nothing, and a second Ctrl+C printed a traceback for each one it cancelled.
    port = free_port()
    cmd = [sys.executable, "-m", "felab.mock_server", "--port", str(port), "--prefill-tps", "10"]
    server = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}/v1"
    body = {"model": "felab-practice", "messages": [{"role": "user", "content": "w" * 8000}], "stream": True}

    def ask() -> None:
        with contextlib.suppress(httpx.HTTPError):  # cut by the stop
            httpx.post(url + "/chat/completions", json=body, timeout=300)

    try:
        wait_until_serving(url, server)
        for _ in range(3):
            threading.Thread(target=ask, daemon=True).start()
        deadline = time.monotonic() + 30
        while not re.search(r"^vllm:num_requests_running\S* [1-9]", metrics(url), re.MULTILINE):
            assert time.monotonic() < deadline, "no request ever ran"
            time.sleep(0.05)
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=30)  # before: it waited for every stream (600 s)
    finally:
        if server.poll() is None:
            server.kill()
    assert server.returncode == 0 and "Traceback" not in err and "Exception in ASGI" not in err, err
    assert "stopping: cut" in err and "practice server stopped (Ctrl+C)" in out
