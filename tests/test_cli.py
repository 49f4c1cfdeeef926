"""The front door: make help, felab check, felab smoke, felab demo."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import KIT, run_felab, run_make
from fleet_helpers import free_range

from felab.mock_server.launch import stop, wait_until_serving


def test_make_help_lists_every_target_with_its_help_line() -> None:
    out = run_make(KIT, "--no-print-directory", "help")
    assert out.returncode == 0
    for target in ("setup", "demo", "mock", "check", "smoke", "test"):
        assert f"make {target} " in out.stdout


def test_check_shows_up_and_down_servers_and_never_the_key(mock_url: str, monkeypatch) -> None:
    monkeypatch.setenv("FELAB_MOCK_URL", mock_url)
    monkeypatch.setenv("FELAB_LLAMACPP_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-very-secret-key-42")
    out = run_felab("check")
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert " up " in lines["mock"] and "felab-practice" in lines["mock"]
    assert "down" in lines["llamacpp"] and "serve_llamacpp.sh" in lines["llamacpp"]
    assert "FIREWORKS_API_KEY is set" in lines["fireworks"]
    assert "fw-very-secret-key-42" not in out.stdout + out.stderr


def test_check_says_when_the_key_is_missing() -> None:
    out = run_felab("check")
    assert "FIREWORKS_API_KEY is NOT set" in out.stdout


def test_smoke_runs_every_lesson_script_without_touching_results(isolated: Path) -> None:
    out = run_felab("smoke")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "prefix_bench.py" in out.stdout and "ok" in out.stdout
    assert not isolated.exists()


def test_demo_prints_both_rows_as_the_lesson_says(isolated: Path) -> None:
    # The README's first command. The lesson expects ~34x and ~1.0x; the margins here are wider
    # than the (25-60 and 0.8-1.25) so a busy 2-core machine cannot make the test flaky.
    out = run_felab("demo", timeout=180)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in (isolated / "06-prefix.jsonl").read_text().splitlines()]
    stable, variable = rows
    assert stable["order"] == "stable-first" and 15 <= stable["speedup_x"] <= 80
    assert variable["order"] == "variable-first" and 0.7 <= variable["speedup_x"] <= 1.4
    table = out.stdout.split("Lesson 06 on the practice server")[1]
    assert "stable-first" in table and "variable-first" in table


def test_check_names_an_address_without_a_scheme_instead_of_calling_its_server_down(
    mock_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FELAB_MOCK_URL", mock_url.removeprefix("http://"))
    out = run_felab("check")
    assert out.returncode == 0, out.stderr
    assert "address without http://" in out.stdout and "down (start: make mock)" not in out.stdout
    assert f"Use `FELAB_MOCK_URL={mock_url}`" in " ".join(out.stdout.split())


def note_of(out: str, target: str) -> str:
    """make check's note for `target`'s row, on one line."""
    return next(n for n in " ".join(out.split()).split("note: ")[1:] if f"the {target} target" in n)


def test_check_calls_a_plain_web_server_what_it_is_and_its_advice_starts_the_practice_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A learner's `python3 -m http.server` where the practice server should be: before, make check
    # said "up (HTTP 404 on /v1/models)", as if the practice server were there.
    port = free_range(3)
    web = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_serving_anything(port)
        monkeypatch.setenv("FELAB_MOCK_URL", f"http://127.0.0.1:{port}/v1")
        out = run_felab("check")
        assert out.returncode == 0, out.stderr
        row = next(line for line in out.stdout.splitlines() if line.startswith("mock "))
        assert "not an OpenAI-compatible server" in row and " up" not in row
        note = note_of(out.stdout, "mock")
        assert "`SimpleHTTP/" in note and "HTTP 404 and a reply of text/html" in note
        # Following the advice: the practice server on the free port it names, the target there.
        command = re.search(r"on a free port, `([^`]+)`, with FELAB_MOCK_URL=(\S+) in", note)
        assert command is not None, note
        argv = [sys.executable if w.endswith("python") else w for w in shlex.split(command.group(1))]
        server = subprocess.Popen(argv, cwd=KIT, stdout=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_until_serving(command.group(2), server)
            monkeypatch.setenv("FELAB_MOCK_URL", command.group(2))
            row = next(line for line in run_felab("check").stdout.splitlines() if line.startswith("mock "))
            assert " up " in row and "felab-practice" in row
        finally:
            stop(server)
    finally:
        web.terminate()
        web.wait(timeout=10)


@pytest.mark.parametrize(
    ("kind", "body", "said"),
    [
        ("text/html", b"<html><body>It works!</body></html>", "HTTP 200 and a reply of text/html"),
        ("text/plain", b"models: none", "HTTP 200 and a reply of text/plain"),
        ("application/json", b'{"status": "ok"}', "HTTP 200 and a reply of application/json"),
    ],
)
def test_check_calls_a_200_that_is_no_list_of_models_not_the_server(
    kind: str, body: bytes, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a page that was not JSON ended make check with the SDK's traceback.
    with answering(kind, body) as port:
        monkeypatch.setenv("FELAB_LLAMACPP_URL", f"http://127.0.0.1:{port}/v1")
        out = run_felab("check")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("llamacpp "))
    assert "not an OpenAI-compatible server" in row
    note = note_of(out.stdout, "llamacpp")
    assert "`felab-test-web`" in note and said in note
    assert f"LLAMACPP_PORT={port} bash lessons/02-three-local-servers/serve_llamacpp.sh" in note


@contextlib.contextmanager
def answering(kind: str, body: bytes) -> Iterator[int]:
    """A web server on loopback that answers every GET with HTTP 200, `kind` and `body`; its port."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "felab-test-web"
        sys_version = ""

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_range(3)), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def wait_until_serving_anything(port: int, timeout_s: float = 20) -> None:
    """Until something accepts connections on 127.0.0.1:`port`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise AssertionError(f"nothing listened on {port} in {timeout_s} s")
