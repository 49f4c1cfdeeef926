"""What a web page or an odd path can do to the kit's two local servers: nothing.

POST /admin/reset (the practice server) refuses a request a web page sent; bundle-serve
serves the site's files and nothing else. The slow and idle clients are in
tests/test_load.py (opt-in: `make test-load`).
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from felab.course import serve
from felab.errors import FelabError

# ── POST /admin/reset: no Origin, or the server's own ─────────────────────────


def root_of(url: str) -> str:
    return url.removesuffix("/v1")


@pytest.mark.parametrize(
    "origin", ["https://evil.example", "null", "http://evil.example:8765", "http://localhost.evil.example"]
)
def test_reset_from_a_web_page_is_403_in_openais_envelope(mock_url: str, origin: str) -> None:
    reply = httpx.post(f"{root_of(mock_url)}/admin/reset", headers={"Origin": origin})
    assert reply.status_code == 403
    error = reply.json()["error"]
    assert error["code"] == "forbidden_origin" and error["type"] == "invalid_request_error"
    assert (
        "refused from a web page" in error["message"] and "curl -X POST http://127.0.0.1:" in error["message"]
    )


def test_reset_with_no_origin_or_its_own_is_accepted(mock_url: str) -> None:
    root = root_of(mock_url)
    assert httpx.post(f"{root}/admin/reset").status_code == 200  # curl, scripts
    assert httpx.post(f"{root}/admin/reset", headers={"Origin": root}).status_code == 200  # its own page


def test_a_rebound_name_with_a_matching_origin_is_still_refused(mock_url: str) -> None:
    # DNS rebinding: the page's name now points at 127.0.0.1, so Host and Origin agree, but
    # the name is not a loopback name.
    root = root_of(mock_url)
    port = root.rsplit(":", 1)[1]
    headers = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
    assert httpx.post(f"{root}/admin/reset", headers=headers).status_code == 403


# ── bundle-serve: the site's files, nothing else ──────────────────────────────


@pytest.fixture
def site_url(tmp_path: Path) -> Iterator[str]:
    site = tmp_path / "site"
    (site / "lessons").mkdir(parents=True)
    (site / "index.html").write_text("<p>the course</p>")
    (site / "lessons" / "06.html").write_text("<p>lesson 06</p>")
    (site / "assets").mkdir()  # a folder without index.html
    (tmp_path / "secret.txt").write_text("not part of the site")
    os.symlink(tmp_path / "secret.txt", site / "leak.txt")
    os.symlink(tmp_path, site / "up")
    os.symlink(site / "index.html", site / "inside.html")
    with serve.served(site) as url:
        yield url


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def raw_status(url: str, path: str) -> int:
    """The status line for a path sent as is (urllib would clean it up first)."""
    host, port = url.split("//")[1].strip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        return int(s.recv(64).split()[1])


def test_the_site_is_served(site_url: str) -> None:
    assert status(site_url) == 200 and status(site_url + "lessons/06.html") == 200


ATTACKS = [
    "/..%00/x",  # a NUL byte: Python's own handler stopped with a traceback
    "/%00",
    "/lessons/%00.html",
    "/index.html%00",
    "/leak.txt",  # a symlink to a file outside the site
    "/up/secret.txt",  # through a symlink to a folder outside
    "/inside.html",  # a symlink to a file inside the site: no symlink is followed
    "/assets/",  # a folder without index.html: never listed
    "/assets",
    "/../secret.txt",
    "/../../etc/passwd",
    "/lessons/../../secret.txt",
    "/%2e%2e/secret.txt",
    "/..%2fsecret.txt",
]


@pytest.mark.parametrize("path", ATTACKS)
def test_an_odd_path_is_a_404_and_nothing_on_stderr(site_url: str, path: str, capfd) -> None:
    capfd.readouterr()
    assert raw_status(site_url, path) == 404
    assert capfd.readouterr().err == ""  # no traceback, no log line (the server runs in this process)


def test_a_folder_with_an_index_serves_it(site_url: str) -> None:
    assert status(site_url + "lessons/") == 404  # no index.html there
    assert raw_status(site_url, "/") == 200


def test_a_second_server_on_the_port_says_the_first_probably_runs(site_url: str, tmp_path: Path) -> None:
    port = int(site_url.rsplit(":", 1)[1].strip("/"))
    with pytest.raises(FelabError) as said, serve.served(tmp_path / "site", port):
        pass
    text = " ".join(str(said.value).split())
    assert f"could not serve the bundle on 127.0.0.1:{port}" in text
    assert "an earlier `make bundle-serve` still runs" in text
    assert f"`.venv/bin/python -m felab bundle serve --port {port + 1}`" in text  # from the kit's folder


def test_a_silent_connection_is_closed(tmp_path: Path) -> None:
    # uvicorn's internal protocol with the kit's timers (connections.py), here with 1 s instead
    # of 10 s; the opt-in tests/test_load.py checks 10 s and trickled heads. Allowed: 5 s.
    (tmp_path / "index.html").write_text("<p>the course</p>")
    with serve.served(tmp_path, timeout_s=1.0) as url:
        port = int(url.rsplit(":", 1)[1].strip("/"))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            t0 = time.monotonic()
            assert s.recv(64) == b""  # closed by the server, nothing sent
            assert 0.5 < time.monotonic() - t0 < 5.0
