"""`make fleet` (`python -m felab fleet`): the kit's own fleet started and stopped for real, every
way a learner stops it, with no process left behind (checked by PID); one message per bad input.

The real routers are in tests/test_fleet_routers.py (marked `routers`, `make test-routers`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import PREFIX_BENCH, make_command, run_felab, run_script
from fleet_helpers import all_gone, fleet, free_range, pids, wait_up

from felab.fleet import up
from felab.paths import KIT_ROOT


def run_fleet(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "felab", "fleet", *args],
        cwd=KIT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def one_message(done: subprocess.CompletedProcess[str]) -> str:
    """A bad input's answer: exit status 2, one `error:` paragraph, no traceback."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("error: ") == 1, done.stderr
    return done.stderr


@pytest.mark.parametrize("n", ["0", "1000"])
def test_n_out_of_range_is_one_message(n: str) -> None:
    text = one_message(run_fleet("-n", n, "--router", "sglang"))
    assert f"N={n} workers" in text and "from 1 to 32" in text


def test_n_of_1000_without_a_router_names_the_in_process_limit() -> None:
    assert "from 1 to 256" in one_message(run_fleet("-n", "1000", "--router", "none"))


def test_unknown_router_is_one_message() -> None:
    text = one_message(run_fleet("--router", "nginx"))
    assert "no router named `nginx`" in text and "sglang, vllm, none" in text


def test_unknown_policy_is_one_message() -> None:
    text = one_message(run_fleet("--router", "sglang", "--policy", "fastest"))
    assert "no policy `fastest`" in text and "cache_aware" in text


def test_a_server_that_exits_at_start_shows_its_own_error(isolated: Path, tmp_path: Path) -> None:
    """A profile that is not one (PROFILE= the wrong file): the fleet's server refuses it at start,
    and the fleet prints the server's own words from its log, not a pointer to nothing."""
    bad = tmp_path / "notes.toml"
    bad.write_text("my numbers ] day 2\n")
    port = str(free_range(1))
    text = one_message(run_fleet("-n", "2", "--router", "none", "--profile", str(bad), "--port", port))
    assert "exited at start" in text and "is not valid TOML" in text, text
    assert "printed above" not in text and str(isolated / "fleet-server.log") in text


def test_a_taken_port_in_the_range_is_one_message_and_starts_nothing(isolated: Path) -> None:
    base = free_range(6)
    with socket.socket() as held:
        held.bind(("127.0.0.1", base + 3))  # a worker's port
        held.listen()
        text = one_message(run_fleet("-n", "4", "--router", "sglang", "--port", str(base)))
    assert f"port {base + 3} on 127.0.0.1 is taken" in text and "--port" not in text
    assert "make fleet-stop" in text and f"PORT={base + 100}" in text
    assert not (isolated / "fleet.json").exists()


def test_a_missing_router_binary_is_one_message_naming_the_install(tmp_path: Path) -> None:
    """A Python with the kit but not the routers extra: here, this venv's Python linked from a
    folder without the router beside it (where the kit looks for it, as pip installs it there)."""
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    site = [p for p in sys.path if p.endswith("site-packages")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(KIT_ROOT), *site])}
    done = subprocess.run(
        [str(bare / "python"), "-m", "felab", "fleet", "--router", "vllm", "--port", str(free_range(6))],
        cwd=KIT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    text = one_message(done)
    assert "the router `vllm-router` is not installed" in text
    assert "install vllm-router" in text and "ROUTER=none" in text


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGHUP", "fleet stop", "SIGTERM twice"])
def test_the_fleet_stops_every_process_it_started(how: str, isolated: Path) -> None:
    base = free_range(3)
    proc = fleet("-n", "3", "--router", "none", "--port", str(base))
    try:
        shown = wait_up(proc)
        assert f"http://127.0.0.1:{base}/v1" in shown
        listed = pids(isolated)
        assert proc.pid in listed and len(listed) == 2  # the watcher and the one server
        models = httpx.get(f"http://127.0.0.1:{base}/v1/models", timeout=10).json()
        assert models["data"][0]["id"] == "felab-practice"
        if how == "fleet stop":
            done = run_fleet("stop")
            assert done.returncode == 0 and "fleet stopped" in done.stdout, done.stdout + done.stderr
        elif how == "SIGTERM twice":  # (a `timeout`, or kill typed again): the second while it stops
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.stdout is not None and "stopping the fleet" in proc.stdout.readline()
            os.kill(proc.pid, signal.SIGTERM)
        else:
            os.kill(proc.pid, getattr(signal, how))
        assert proc.wait(timeout=30) == 0, proc.stdout.read() if proc.stdout else ""
        assert all_gone(listed) == []
        assert not (isolated / "fleet.json").exists()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_stop_without_a_fleet_says_so() -> None:
    done = run_fleet("stop")
    assert done.returncode == 0 and "no fleet is running here" in done.stdout


def test_stats_without_a_fleet_is_one_message() -> None:
    assert "Start one first" in one_message(run_fleet("stats"))


def test_stats_reads_each_replica_of_the_kit_fleet(isolated: Path) -> None:
    base = free_range(3)
    proc = fleet("-n", "2", "--router", "none", "--policy", "round_robin", "--port", str(base))
    try:
        wait_up(proc)
        body = {
            "model": "felab-practice",
            "messages": [{"role": "user", "content": "hi " * 300}],
            "max_tokens": 1,
        }
        for _ in range(4):
            httpx.post(
                f"http://127.0.0.1:{base}/v1/chat/completions", json=body, timeout=30
            ).raise_for_status()
        done = run_fleet("stats")
        assert done.returncode == 0, done.stderr
        rows = {line.split()[0] + line.split()[1]: line.split() for line in done.stdout.splitlines()[2:4]}
        assert rows["replica0"][2] == "2" and rows["replica1"][2] == "2"  # round-robin: 2 each
        assert "load max/mean over 2 workers: 1.00" in done.stdout
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_lesson_06_through_the_kit_fleet_keeps_all_12_calls_where_the_opening_is(isolated: Path) -> None:
    # ROUTER=none with its default POLICY (cache_aware) is the kit's model of sglang-router's rule,
    # as ROUTER=sglang places these calls: all 12 on one replica. It was `--route prefix`, whose
    # load filter (work since the start) left that replica out at call 11, a cold prefill.
    base = free_range(1)
    proc = fleet("-n", "4", "--router", "none", "--port", str(base))
    try:
        assert "(--route sglang-cache-aware)" in wait_up(proc)
        out = run_script(PREFIX_BENCH, "--base-url", f"http://127.0.0.1:{base}/v1")
        assert out.returncode == 0, out.stderr
        done = run_fleet("stats")
        assert done.returncode == 0, done.stderr
        requests = sorted(int(line.split()[2]) for line in done.stdout.splitlines()[2:6])
        assert requests == [0, 0, 0, 12], done.stdout
        calls = json.loads((isolated / "06-prefix.jsonl").read_text().splitlines()[-1])["calls"]
        assert [c["cached_tokens"] > 0 for c in calls] == [False] + [True] * 11
        warm = run_script(PREFIX_BENCH, "--base-url", f"http://127.0.0.1:{base}/v1", "--quick").stdout
        # one practice server: its reset works; its restart is the fleet's, not a lone server's
        assert f"curl -X POST http://127.0.0.1:{base}/admin/reset" in warm and "mock_server" not in warm
        assert f"fleet N=4 ROUTER=none POLICY=sglang-cache-aware PORT={base}`" in warm  # (a route it takes)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_an_earlier_fleets_logs_of_processes_this_one_lacks_are_removed_at_start(isolated: Path) -> None:
    # a fleet of 4 behind sglang-router ran before; the kit's fleet of 2 starts now
    isolated.mkdir(parents=True)
    for name in ("router", "worker-1", "worker-2", "worker-3", "worker-4"):
        (isolated / f"fleet-{name}.log").write_text(f"{name} of the fleet before\n")
    (isolated / "fleet-notes.log").write_text("the learner's own file\n")
    base = free_range(1)
    proc = fleet("-n", "2", "--router", "none", "--port", str(base))
    try:
        wait_up(proc)
        logs = sorted(p.name for p in isolated.glob("*.log"))
        assert logs == ["fleet-notes.log", "fleet-server.log"]
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_router_fleet_of_2_after_one_of_4_keeps_only_its_own_logs(isolated: Path) -> None:
    isolated.mkdir(parents=True)
    for name in ("server", "router", "worker-1", "worker-2", "worker-3", "worker-4", "worker-10"):
        (isolated / f"fleet-{name}.log").write_text("before\n")
    removed = up.clear_other_logs(up.plan(2, "sglang", None, None, up.DEFAULT_PORT))
    assert sorted(p.name for p in removed) == [
        "fleet-server.log",
        "fleet-worker-10.log",
        "fleet-worker-3.log",
        "fleet-worker-4.log",
    ]
    assert sorted(p.name for p in isolated.iterdir()) == [
        "fleet-router.log",
        "fleet-worker-1.log",
        "fleet-worker-2.log",
    ]


def test_a_run_through_a_fleet_is_recorded_as_the_fleets_and_numbers_keeps_it_apart(
    isolated: Path, fresh_mock: str
) -> None:
    # The learner's own run on one practice server, then the same step through the kit's fleet,
    # addressed as `localhost` (the fleet says 127.0.0.1): before, both rows were `mock` alone,
    # and `make numbers` showed the fleet's in place of the single server's.
    assert run_script(PREFIX_BENCH, "--base-url", fresh_mock, "--quick").returncode == 0
    base = free_range(1)
    proc = fleet("-n", "2", "--router", "none", "--port", str(base))
    try:
        wait_up(proc)
        out = run_script(PREFIX_BENCH, "--base-url", f"http://localhost:{base}/v1", "--quick")
        assert out.returncode == 0, out.stderr
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    single, through = (json.loads(line) for line in (isolated / "06-prefix.jsonl").read_text().splitlines())
    assert "fleet" not in single
    assert through["fleet"] == "the kit's fleet sglang-cache-aware, 2 replicas"
    shown = run_felab("numbers").stdout
    rows = [line.split("  ")[0] for line in shown.splitlines() if line.startswith("mock")]
    assert rows == ["mock", "mock via the kit's fleet sglang-cache-aware, 2 replicas"], shown


def test_a_fleets_state_file_left_by_a_killed_fleet_names_no_fleet(isolated: Path, fresh_mock: str) -> None:
    # A fleet killed with SIGKILL leaves results/fleet.json; a server started later on its port
    # is not that fleet.
    port = fresh_mock.rsplit(":", 1)[1].split("/")[0]
    isolated.mkdir(parents=True)
    gone = {"role": "fleet", "pid": 2**22 + 7, "url": fresh_mock, "command": ["x"], "shown": "x"}
    state = {"url": f"http://127.0.0.1:{port}/v1", "fleet": "sglang-router cache_aware, 4 workers"}
    (isolated / "fleet.json").write_text(json.dumps({**state, "processes": [gone]}))
    assert run_script(PREFIX_BENCH, "--base-url", fresh_mock, "--quick").returncode == 0
    assert "fleet" not in json.loads((isolated / "06-prefix.jsonl").read_text())


def test_check_with_a_router_the_kit_does_not_model_is_one_message() -> None:
    text = one_message(run_fleet("check", "--router", "vllm"))
    assert "no modelled route for --router vllm" in text and "--router sglang" in text


def test_check_with_an_unknown_workload_is_one_message() -> None:
    assert "--workload is lesson or trace" in one_message(run_fleet("check", "--workload", "chat"))


def test_the_routers_extra_failing_to_install_says_what_to_do_offline(tmp_path: Path) -> None:
    """The Makefile's rule for the extra, with a Python whose pip fails as it does offline."""
    venv, stamp = tmp_path / "venv", tmp_path / "stamp"
    venv.mkdir()
    stamp.touch()
    offline = tmp_path / "python"
    offline.write_text(
        "#!/bin/sh\necho 'ERROR: No matching distribution found for sglang-router' >&2\nexit 1\n"
    )
    offline.chmod(0o755)
    argv, env = make_command(KIT_ROOT, "-s", f"{venv}/.installed-routers")
    # The stand-ins of make_command, then this test's own (on make's command line the last wins).
    argv += [f"VENV={venv}", f"PY={offline}", f"STAMP={stamp}"]
    done = subprocess.run(argv, cwd=KIT_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "could not install the routers extra (sglang-router, vllm-router) from PyPI" in done.stderr
    assert "pip download sglang-router vllm-router -d wheels" in done.stderr
    assert "make fleet ROUTER=none" in done.stderr
    assert not (venv / ".installed-routers").exists()


def test_a_port_still_closing_is_free_for_a_fleet_and_one_listened_on_is_not() -> None:
    # A fleet stopped a moment ago leaves its ports in TIME_WAIT for about a minute. Before: a
    # fleet started again then was refused ("port 8780 … is taken"), and `make fleet-stop` found
    # nothing to stop. The servers bind with SO_REUSEADDR; so does the check.
    from felab.errors import FelabError

    port = free_range(1)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    conn.close()  # the server's end closes first: it waits in TIME_WAIT
    client.close()
    server.close()
    plan = up.plan(1, "none", None, None, port)
    up.check_ports(plan)
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(("127.0.0.1", port))
    held.listen()
    try:
        with pytest.raises(FelabError, match=f"port {port} on 127.0.0.1 is taken"):
            up.check_ports(plan)
    finally:
        held.close()


def test_a_second_fleet_from_the_same_folder_is_refused_while_the_first_runs(isolated: Path) -> None:
    # One state file a kit folder: a second fleet would hide the first from fleet-stop and
    # fleet-stats. Before: it started, and the first ran on with no way to reach it by make.
    base = free_range(1)
    first = fleet("-n", "1", "--router", "none", "--port", str(base))
    try:
        wait_up(first)
        text = one_message(run_fleet("-n", "1", "--router", "none", "--port", str(free_range(1))))
        assert f"a fleet is already running from this kit folder (pid {first.pid}" in text, text
        assert "make fleet-stop" in text
    finally:
        os.kill(first.pid, signal.SIGTERM)
        assert first.wait(timeout=30) == 0


def test_a_fleets_profile_is_read_from_the_folder_make_was_typed_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `make fleet PROFILE=mine.toml` runs at the kit's root; the path is the learner's folder's
    # (FELAB_CALLER_DIR), read by the fleet as by the server and the replay, not joined by make.
    (tmp_path / "mine.toml").write_text((KIT_ROOT / "data" / "profiles" / "lesson-mac.toml").read_text())
    monkeypatch.setenv("FELAB_CALLER_DIR", str(tmp_path))
    assert up.plan(2, "none", None, "mine.toml", 20000).profile == tmp_path / "mine.toml"
