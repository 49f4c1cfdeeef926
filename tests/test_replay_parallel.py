"""Sweeps in parallel: `--jobs N` on this machine's cores and `--scheduler` on a real Dask cluster
give the serial run's rows, in its order, field by field (all but the wall time).

The cluster is a real one, started here (a LocalCluster: a scheduler and two worker
processes on 127.0.0.1), and the command reaches it over TCP as it would another machine's.
It is marked `load`: `make test-load` runs it, `make test` starts no cluster.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_felab
from test_replay import session_trace

from felab.errors import FelabError
from felab.replay import parallel

SWEEP = ("--replicas", "1,2", "--route", "random,affinity", "--cache-blocks", "8,unlimited", "--json")
WALL = ("wall_s", "x_real_time")
"""The only fields a parallel run may change: how long it took."""


def rows(path: Path, *flags: str) -> list[dict]:
    out = run_felab("replay", str(path), *SWEEP, *flags)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def same_but_wall(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b) == 8
    for mine, theirs in zip(a, b, strict=True):
        assert mine.keys() == theirs.keys()
        differ = {k: (mine[k], theirs[k]) for k in mine if k not in WALL and mine[k] != theirs[k]}
        assert not differ, differ


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """A trace with sessions, and its sweep's rows run one after another (--jobs 1)."""
    folder = tmp_path_factory.mktemp("sweep")
    path = session_trace(folder, sessions=6, turns=5)
    with pytest.MonkeyPatch.context() as mp:  # set up before the per-test `isolated`: isolate here too
        mp.setenv("FELAB_RESULTS_DIR", str(folder / "results"))
        got = rows(path, "--jobs", "1")
    assert len({(r["replicas"], r["route"], r["cache_blocks"]) for r in got}) == 8
    assert len({(r["hit_pct"], r["ttft_p95_ms"]) for r in got}) > 2  # the configurations differ
    return path, got


def test_jobs_gives_the_serial_rows_in_order(serial: tuple[Path, list[dict]]) -> None:
    path, expected = serial
    same_but_wall(expected, rows(path, "--jobs", "2"))


@pytest.mark.load  # a real cluster (a scheduler, two worker processes): make test-load, not make test
def test_a_dask_cluster_gives_the_serial_rows_in_order(serial: tuple[Path, list[dict]]) -> None:
    distributed = pytest.importorskip("distributed")  # the dev extra installs it: skipped only outside it
    path, expected = serial
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", host="127.0.0.1"
    ) as cluster:
        same_but_wall(expected, rows(path, "--scheduler", cluster.scheduler_address))


def test_a_bad_line_stops_a_parallel_sweep_with_its_message(tmp_path: Path) -> None:
    path = session_trace(tmp_path, sessions=2, turns=2)
    path.write_text(path.read_text() + "broken\n")
    out = run_felab("replay", str(path), *SWEEP, "--jobs", "2")
    assert out.returncode == 2 and "not JSON" in out.stderr and "Traceback" not in out.stderr


def test_no_dask_and_no_scheduler_are_each_one_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = session_trace(tmp_path, sessions=1, turns=1)
    real = parallel.importlib.util.find_spec
    monkeypatch.setattr(
        parallel.importlib.util, "find_spec", lambda name: None if name == "distributed" else real(name)
    )
    with pytest.raises(FelabError, match=r"make cluster"):
        list(parallel.run_all(print, [], scheduler="tcp://127.0.0.1:9", trace_path=path))
    monkeypatch.undo()
    pytest.importorskip("distributed")
    from felab.mock_server.launch import free_port

    monkeypatch.setattr(parallel, "CONNECT_TIMEOUT_S", 1)
    with pytest.raises(
        FelabError, match=r"Could not reach a Dask scheduler at tcp://127.0.0.1:\d+ .*dask scheduler"
    ):
        list(parallel.run_all(print, [], scheduler=f"tcp://127.0.0.1:{free_port()}", trace_path=path))


def test_jobs_is_for_virtual_time_only() -> None:
    out = run_felab("replay", "--target", "mock", "--limit", "1", "--jobs", "2")
    assert out.returncode == 2 and "--jobs and --scheduler are for virtual time" in out.stderr
