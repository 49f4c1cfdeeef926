"""`--scheduler ADDR` fails clearly: bad addresses, servers that are not Dask schedulers, lost workers.

The servers here are real ones on 127.0.0.1: a plain HTTP server (what the scheduler's dashboard
port is), a silent one, one that greets as SSH does; and, under the `load` marker, a real Dask
scheduler whose worker processes are killed by PID while the sweep runs.
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_felab
from test_replay import session_trace

from felab.errors import FelabError
from felab.mock_server.config import DEFAULTS
from felab.paths import KIT_ROOT
from felab.replay import parallel, scheduler


@pytest.fixture
def web_server() -> Iterator[int]:
    """A plain HTTP server on a free loopback port (as Dask's dashboard on 8787 is one)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    server.RequestHandlerClass.log_message = lambda *a: None  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def tcp_server(greeting: bytes | None) -> tuple[socket.socket, int]:
    """A loopback server that sends `greeting` to each connection and holds it open 10 s (None: says
    nothing; b"": closes it at once)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if greeting == b"":
                conn.close()
                continue
            if greeting is not None:
                conn.sendall(greeting)
            threading.Timer(10, conn.close).start()

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def cluster_run(address: str, path: Path) -> None:
    list(parallel.run_all(print, [DEFAULTS], scheduler=address, trace_path=path))


def test_an_http_server_as_the_scheduler_fails_fast_with_one_message(web_server: int, tmp_path: Path) -> None:
    path = session_trace(tmp_path, sessions=2, turns=3)
    t0 = time.monotonic()
    out = run_felab("replay", str(path), "--replicas", "1,2", "--scheduler", f"tcp://127.0.0.1:{web_server}")
    took = time.monotonic() - t0
    assert out.returncode == 2, out.stderr
    assert "not a Dask scheduler" in out.stderr and "a web server" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and "EiB" not in out.stderr
    assert took < 15, took


@pytest.mark.parametrize(
    ("greeting", "why"),
    [
        (None, "said nothing"),
        (b"SSH-2.0-OpenSSH_9.6\r\n", "greeted with 'SSH-2.0-"),
        (b"", "closed the connection"),
    ],
)
def test_a_server_that_is_not_dask_is_named_so(greeting: bytes | None, why: str, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    path = session_trace(tmp_path, sessions=2, turns=3)
    listener, port = tcp_server(greeting)
    try:
        with pytest.raises(FelabError, match=rf"not a Dask scheduler \(it {why}"):
            cluster_run(f"127.0.0.1:{port}", path)
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("http://127.0.0.1:8787", r"is a web address; a Dask scheduler's address is tcp://HOST:PORT"),
        ("https://cluster.example/status", r"is a web address"),
        ("foo", r"--scheduler foo is not a Dask scheduler's address: give its host and port"),
        ("tcp://foo", r"not a Dask scheduler's address"),
        ("tcp://host:port", r"not a Dask scheduler's address"),
        ("ftp://host:21", r"not ftp://"),
    ],
)
def test_bad_addresses_are_each_one_message(address: str, says: str) -> None:
    with pytest.raises(FelabError, match=says):
        scheduler.checked(address)


def test_good_addresses_pass() -> None:
    assert scheduler.checked("tcp://10.0.0.5:8786") == ("tcp://10.0.0.5:8786", "10.0.0.5", 8786)
    assert scheduler.checked(" 127.0.0.1:8786 ") == ("tcp://127.0.0.1:8786", "127.0.0.1", 8786)
    assert scheduler.checked("tls://[::1]:8786/")[1:] == ("::1", 8786)


@pytest.mark.parametrize("address", ["http://127.0.0.1:8787", "foo"])
def test_the_command_says_it_without_a_traceback(address: str, tmp_path: Path) -> None:
    path = session_trace(tmp_path, sessions=2, turns=3)
    out = run_felab("replay", str(path), "--replicas", "1,2", "--scheduler", address)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "tcp://HOST:PORT" in out.stderr and out.stderr.count("--scheduler") >= 1


@pytest.mark.load
def test_all_workers_killed_names_the_lost_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real scheduler, two `dask worker` processes started here and killed by PID mid-sweep."""
    distributed = pytest.importorskip("distributed")
    path = session_trace(tmp_path, sessions=2, turns=3)
    monkeypatch.setattr(scheduler, "LOST_S", 2.0)
    dask = Path(sys.executable).with_name("dask")
    env = {**os.environ, "PYTHONPATH": str(KIT_ROOT)}
    with distributed.LocalCluster(
        n_workers=0, processes=False, protocol="tcp", host="127.0.0.1", dashboard_address=":0"
    ) as c:
        workers = [
            subprocess.Popen(
                [str(dask), "worker", c.scheduler_address, "--no-nanny", "--nthreads", "1", "--name", name],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name in ("worker-a", "worker-b")
        ]
        try:

            def kill_when_busy() -> None:
                time.sleep(4)
                for w in workers:
                    w.send_signal(signal.SIGKILL)

            threading.Thread(target=kill_when_busy, daemon=True).start()
            slow = lambda s, data=None: time.sleep(120)  # noqa: E731  (cloudpickle sends it by value)
            t0 = time.monotonic()
            with pytest.raises(FelabError) as caught:
                list(
                    parallel.run_all(
                        slow, [DEFAULTS, DEFAULTS], scheduler=c.scheduler_address, trace_path=path
                    )
                )
        finally:
            for w in workers:
                w.kill()
                w.wait()
    message = str(caught.value)
    assert "lost its workers: worker-a" in message and "worker-b" in message, message
    assert "version" not in message
    assert time.monotonic() - t0 < 30


def test_a_watched_cluster_future_answers_what_the_sweep_asks() -> None:
    # parallel.collect asks each future done() while it waits, then result(): a cluster's futures
    # are wrapped in scheduler.Watched, which must answer both (it lacked done() from 2026-12-02
    # to 2026-12-07, and every sweep on a cluster stopped at once; only make test-load showed it).
    # concurrent.futures' Future stands in for Dask's: the same two methods.
    from concurrent.futures import Future

    ready, later = Future(), Future()
    ready.set_result("row 1")
    watched = [scheduler.Watched(f, None, "tcp://127.0.0.1:8786", {}) for f in (ready, later)]
    assert watched[0].done() and not watched[1].done()
    later.set_result("row 2")
    said: list[str] = []
    configs = [DEFAULTS, DEFAULTS]
    assert list(parallel.collect(watched, configs, lambda event, s: said.append(event))) == ["row 1", "row 2"]
    assert said == ["done", "done"]
