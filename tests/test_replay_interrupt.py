"""Ctrl+C stops a real-time replay at once, whatever its requests in flight are waiting for.

An interrupted replay records nothing (a configuration is recorded when it is whole), so the
replies in flight have no reader: the replay must not wait for them. Two waits were hidden
behind Ctrl+C: the worker threads (a thread pool joins its threads before the program may
exit: with a server that never answers, never), and the replay's own practice server, given
10 s to end its streams gracefully before it was killed. Both are shown here with a server
whose replies take far longer than any bound the test sets, so a replay that waits for them
cannot pass, on a machine of any speed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from conftest import KIT

from felab.mock_server.launch import practice_server

LEAVES_WITHIN_S = 20.0
"""Far above what leaving takes (under 2 s here), far below what waiting would (forever; 10 s of grace)."""


class Silent(BaseHTTPRequestHandler):
    """Lists a model as OpenAI does, then takes each chat request and never answers it."""

    got = threading.Event()
    release = threading.Event()

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b'{"object": "list", "data": [{"id": "felab-practice", "object": "model", "owned_by": "x"}]}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        Silent.got.set()
        Silent.release.wait(120)  # the request stays in flight until the test ends

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def silent_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        Silent.release.set()
        server.shutdown()


def test_ctrl_c_leaves_a_real_time_replay_whose_requests_are_never_answered(
    silent_server: str, isolated: object
) -> None:
    args = ["replay", "--target", "mock", "--base-url", silent_server, "--limit", "5", "--speed", "100"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "felab", *args],
        cwd=KIT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own group, which Ctrl+C in a terminal signals as a whole
    )
    try:
        assert Silent.got.wait(60), "the replay sent nothing"
        pressed = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=LEAVES_WITHIN_S)  # before: it waited for the replies
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and "interrupted" in out, out
    assert time.monotonic() - pressed < LEAVES_WITHIN_S


def running(url: str) -> float:
    """The practice server's requests in prefill or decoding now (its /metrics, as vLLM's)."""
    page = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=5).text
    line = next(x for x in page.splitlines() if x.startswith("vllm:num_requests_running"))
    return float(line.split()[-1])


def test_a_replays_own_server_is_not_given_time_to_end_streams_nobody_reads() -> None:
    def ask(url: str) -> None:  # a 2,000-token prompt at 10 tokens/s: 200 s to its first token
        message = {"role": "user", "content": "w" * 8000}
        body = {"model": "felab-practice", "messages": [message], "stream": True}
        with contextlib.suppress(httpx.HTTPError):  # the server is stopped under it
            httpx.post(url + "/chat/completions", json=body, timeout=300)

    with pytest.raises(KeyboardInterrupt), practice_server("--prefill-tps", "10") as url:
        threading.Thread(target=ask, args=(url,), daemon=True).start()
        deadline = time.monotonic() + 60
        while running(url) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running(url) == 1
        pressed = time.monotonic()
        raise KeyboardInterrupt  # as Ctrl+C does, inside the replay's `with practice_server(...)`
    assert time.monotonic() - pressed < 5  # before: 10 s, its graceful end of a stream nobody reads
