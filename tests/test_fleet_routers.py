"""The real routers in front of practice servers (`make test-routers`; marked `routers`).

The routers extra is installed here if it is missing (pip, from PyPI); without network the
tests skip, saying why. Each test starts real processes on loopback only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fleet_helpers import all_gone, fleet, free_range, pids, wait_up

from felab.fleet.routers import ROUTERS
from felab.mock_server.launch import stop, wait_until_serving
from felab.mock_server.profile import tomllib
from felab.paths import KIT_ROOT

pytestmark = pytest.mark.routers

PREFIX_BENCH = KIT_ROOT / "lessons" / "06-prefix-caching" / "prefix_bench.py"


@pytest.fixture(scope="module", autouse=True)
def routers_installed() -> None:
    """The routers extra, installed now if it is missing; a skip that says why if it cannot be."""
    if all(r.path().exists() for r in ROUTERS.values()):
        return
    with (KIT_ROOT / "pyproject.toml").open("rb") as f:
        packages = tomllib.load(f)["project"]["optional-dependencies"]["routers"]  # as pinned there
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", *packages],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0 or not all(r.path().exists() for r in ROUTERS.values()):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"the routers extra ({', '.join(packages)}) could not be installed: {last}")


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[tuple[list[str], list[Path]]]:
    """Three practice servers started here, each with its stderr in a file to read."""
    base = free_range(3)
    procs, logs = [], []
    try:
        for i in range(3):
            log = tmp_path / f"worker{i}.err"
            cmd = [sys.executable, "-m", "felab.mock_server", "--port", str(base + i)]
            with log.open("w") as err:
                procs.append(
                    subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
                )
            logs.append(log)
        urls = [f"http://127.0.0.1:{base + i}" for i in range(3)]
        for url, proc in zip(urls, procs, strict=True):
            wait_until_serving(f"{url}/v1", proc)
        yield urls, logs
    finally:
        for proc in procs:
            stop(proc)


@pytest.mark.parametrize("name", ["sglang", "vllm"])
def test_the_router_names_the_model_and_no_worker_logs_an_invalid_request(
    name: str, workers: tuple[list[str], list[Path]], tmp_path: Path
) -> None:
    urls, logs = workers
    router = ROUTERS[name]
    for _ in range(3):  # a free port can be taken by another process before the router binds it
        port = free_range(2)
        cmd = router.command(port, port + 1, urls, "cache_aware")
        with (tmp_path / "router.log").open("w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=1.0)  # it exits at once only when it cannot start
        except subprocess.TimeoutExpired:
            break
        assert "Address already in use" in (tmp_path / "router.log").read_text(), "the router exited"
    try:
        root = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                models = httpx.get(f"{root}/v1/models", timeout=2).json()["data"]
                if models and (
                    name != "sglang" or len(httpx.get(f"{root}/get_loads").json()["workers"]) == 3
                ):
                    break
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            assert time.monotonic() < deadline, (tmp_path / "router.log").read_text()[-2000:]
            time.sleep(0.1)
        assert [m["id"] for m in models] == ["felab-practice"]  # not "unknown"
        body = {
            "model": models[0]["id"],
            "messages": [{"role": "user", "content": "hi " * 100}],
            "max_tokens": 2,
        }
        for _ in range(3):
            httpx.post(f"{root}/v1/chat/completions", json=body, timeout=30).raise_for_status()
        if name == "sglang":  # the router's own /get_loads and /flush_cache reach every worker
            loads = httpx.get(f"{root}/get_loads", timeout=10).json()["workers"]
            assert sorted(w["worker"] for w in loads) == urls and all(w["load"] >= 0 for w in loads)
            flushed = httpx.post(f"{root}/flush_cache", timeout=10).json()
            assert flushed["workers_flushed"] == 3, flushed
    finally:
        stop(proc)
    for log in logs:
        assert "Invalid HTTP request" not in log.read_text()


@pytest.mark.parametrize("name", ["sglang", "vllm"])
def test_make_fleet_runs_lesson_06_without_naming_a_model_and_stops_every_process(
    name: str, isolated: Path
) -> None:
    base = free_range(6)
    began = time.monotonic()
    proc = fleet("-n", "4", "--router", name, "--port", str(base))
    try:
        shown = wait_up(proc)
        up_s = time.monotonic() - began
        print(f"{name}: up in {up_s:.1f} s (the fleet says: {shown.splitlines()[0]})")
        listed = pids(isolated)
        assert len(listed) == 6  # the watcher, the router, 4 workers
        lesson_through(base)
        stats = subprocess.run(
            [sys.executable, "-m", "felab", "fleet", "stats"], cwd=KIT_ROOT, capture_output=True, text=True
        )
        assert stats.returncode == 0 and "worker 4" in stats.stdout, stats.stderr
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert all_gone(listed) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def lesson_through(base: int) -> str:
    """Lesson 06's script, quick, sent to the fleet whose router listens on `base`; what it printed."""
    done = subprocess.run(
        [sys.executable, str(PREFIX_BENCH), "--base-url", f"http://127.0.0.1:{base}/v1", "--quick"],
        cwd=PREFIX_BENCH.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_run_through_sglang_router_in_front_of_twins_is_recorded_as_the_fleets_twin(isolated: Path) -> None:
    # The router lists the model without the workers' twin card: the fleet's state file says both.
    base = free_range(4)
    profile = KIT_ROOT / "data" / "profiles" / "lesson-mac.toml"
    proc = fleet("-n", "2", "--router", "sglang", "--port", str(base), "--profile", str(profile))
    try:
        wait_up(proc)
        lesson_through(base)
        again = lesson_through(base)  # warm: its advice for a cold start is the fleet's restart
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    # It was the router's /admin/reset (a 404) or one practice server started on the router's port.
    assert "call 1 was not cold" in again and "/admin/reset" not in again and "mock_server" not in again
    start = f"fleet N=2 ROUTER=sglang POLICY=cache_aware PORT={base} PROFILE={profile}"
    assert f"`make -C ../.. fleet-stop`, then `make -C ../.. {start}`" in again
    row = json.loads((isolated / "06-prefix.jsonl").read_text().splitlines()[-1])
    assert row["fleet"] == "sglang-router cache_aware, 2 workers"
    assert row["profile"] == "lesson-mac" and row["profile_engine"].startswith("llama.cpp")


def test_the_modelled_route_agrees_with_sglang_router_on_lesson_shaped_work() -> None:
    """The issue's target: the same worker for at least 95% of requests and hit rates within 2
    points (the lesson workload's prompts take far longer than the 50 ms between a wave's
    requests, so the router's decisions do not hang on timing; docs/fleet.md)."""
    from felab.fleet.check import check

    rows = check("sglang", 3, ["lesson"], 24, print)
    total = rows[-1]
    assert total["agreement_pct"] >= 95, rows
    assert abs(total["hit_pct_real"] - total["hit_pct_model"]) <= 2, rows
    assert total["load_real"] == total["load_model"], rows
