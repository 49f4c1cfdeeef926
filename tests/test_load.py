"""Load and slow clients, opt-in: `make test-load` (pytest -m load). Not part of `make test`.

Each test runs bounded loops against servers on 127.0.0.1 and takes seconds, so
they are kept out of the default suite. Every margin is wide and written where it
is used: what is checked is "seconds instead of tens of seconds", or "closed
instead of held forever".
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import openai
import pytest
from test_hang_ups import Together, booked_tokens, hang_up, tiny_wait

from felab.course import serve
from felab.mock_server import metrics
from felab.mock_server.launch import practice_server

pytestmark = pytest.mark.load


# ── Hung-up clients, at the size the issue measured ───────────────────────────


@pytest.mark.parametrize("stream", [True, False])
def test_twenty_hung_up_prompts_leave_no_queue(stream: bool) -> None:
    # 20 queued 3,000-token prompts (~24 s of prefill) whose clients close at 0.3 s: the next
    # tiny request waited 21-23 s before the lane gave their time back. Allowed: 3 s.
    with practice_server() as url:
        Together(*(lambda i=i: hang_up(url, i, stream) for i in range(20))).join()
        assert booked_tokens(url) > 20 * 2900  # every long prompt was booked
        assert tiny_wait(url, stream) < 3.0
        m = metrics.scrape(url)
        assert (m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]) == (0, 0)


def test_one_hung_up_130k_token_prompt_gives_its_52_s_back() -> None:
    # 130,000 tokens at 2,500 tokens/s is 52 s of prefill. Its client closes at 0.3 s. Allowed: 3 s.
    with practice_server() as url:
        big = "the refund policy says " * 22_600  # ~520,000 characters, ~130,000 tokens
        cli = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=0.3)
        with pytest.raises(openai.APITimeoutError):
            cli.chat.completions.create(
                model="felab-practice", messages=[{"role": "user", "content": big}], max_tokens=1
            )
        assert booked_tokens(url) > 129_000  # it was booked before its client left
        assert tiny_wait(url, True) < 3.0


def test_hung_up_clients_across_four_replicas() -> None:
    # 40 prompts over 4 replicas (~12 s of prefill each), half streamed; all close at 0.3 s.
    with practice_server("--replicas", "4", "--route", "round-robin") as url:
        Together(*(lambda i=i: hang_up(url, i, i % 2 == 0) for i in range(40))).join()
        assert booked_tokens(url) > 40 * 2900
        for _ in range(4):  # one tiny request lands on each replica
            assert tiny_wait(url, True) < 3.0


def test_a_chain_of_hung_up_prompts_each_extending_the_last_leaves_no_queue() -> None:
    # Issue 22: 60 streamed prompts share a ~3,000-token opening, each the last one plus ~400
    # tokens, so each finds the blocks of the one booked before it (~10.8 s of prefill in all).
    # Every client closes 0.5 s after it sent, before its prefill ends. A tiny request then
    # waited ~10 s while the gauges read 0/0. Allowed: 3 s (an idle server: ~20 ms).
    opening = "".join(f"rule {i}: answer briefly. " for i in range(500))  # ~3,000 tokens

    def send(k: int) -> None:
        text = opening + "".join(f"question {j} of the chain goes here. " * 50 for j in range(k + 1))
        api = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=0.5)
        with pytest.raises(openai.APITimeoutError):
            for _ in api.chat.completions.create(
                model="felab-practice", messages=[{"role": "user", "content": text}], stream=True
            ):
                pass

    with practice_server() as url:
        Together(*(lambda k=k: send(k) for k in range(60))).join()  # 10 ms apart, in order
        assert booked_tokens(url) > 60 * 3000
        assert tiny_wait(url, True) < 3.0
        m = metrics.scrape(url)
        assert (m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]) == (0, 0)


# ── Slow and idle clients: the practice server ────────────────────────────────


def connect(url: str) -> socket.socket:
    host, port = url.split("//")[1].split("/")[0].split(":")
    s = socket.create_connection((host, int(port)), timeout=15)
    return s


def closed_within(s: socket.socket, limit_s: float, trickle: bytes = b"") -> float:
    """Send `trickle` a byte every 0.1 s (if any), and return when the server closes the connection."""
    t0 = time.monotonic()
    for byte in trickle:
        try:
            s.send(bytes([byte]))
        except OSError:
            return time.monotonic() - t0
        time.sleep(0.1)
        assert time.monotonic() - t0 < limit_s, "still open"
    s.settimeout(limit_s)
    assert s.recv(1024) == b""  # closed by the server, with nothing sent
    return time.monotonic() - t0


HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200


def test_silent_and_trickling_connections_are_closed_and_do_not_hold_the_server() -> None:
    # --idle-timeout 1 and --request-timeout 1: a connection that sends nothing, or trickles
    # its head one byte every 0.1 s, is closed in about 1 s (allowed: 4 s). Meanwhile, with
    # 50 such connections open, a normal request is served at once (allowed: 2 s).
    with practice_server("--idle-timeout", "1", "--request-timeout", "1") as url:
        silent = [connect(url) for _ in range(50)]
        assert tiny_wait(url, True) < 2.0
        assert closed_within(connect(url), 4.0) < 4.0
        assert closed_within(connect(url), 4.0, trickle=HEAD) < 4.0
        for s in silent:
            s.settimeout(4.0)
            assert s.recv(1) == b""
            s.close()


def test_a_body_sent_a_byte_at_a_time_gets_408_in_openais_envelope() -> None:
    body = json.dumps({"model": "felab-practice", "messages": [{"role": "user", "content": "hi"}]}).encode()
    with practice_server("--request-timeout", "1") as url:
        s = connect(url)
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        t0 = time.monotonic()
        for byte in body[:30]:  # a byte every 0.1 s: 3 s for 30 bytes, the deadline is 1 s
            try:
                s.send(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
        s.settimeout(5)
        reply = s.recv(4096).decode()
        assert time.monotonic() - t0 < 4.0
        assert reply.startswith("HTTP/1.1 408")
        error = json.loads(reply.split("\r\n\r\n", 1)[1])["error"]
        assert error["message"] == "The request body did not arrive within 1 s."


def test_the_defaults_close_a_silent_connection() -> None:
    # Without flags: --idle-timeout 5. Allowed: 8 s.
    with practice_server() as url:
        assert 4.0 < closed_within(connect(url), 8.0) < 8.0


# ── Slow and idle clients: bundle-serve ──────────────────────────────────────


def test_bundle_serve_closes_silent_and_trickling_connections(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<p>the course</p>")
    with serve.served(site, timeout_s=1.0) as url:  # serve.TIMEOUT_S is 10 s in use
        assert closed_within(connect(url), 4.0) < 4.0
        head = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
        assert closed_within(connect(url), 4.0, trickle=head) < 4.0


def test_bundle_serve_closes_a_silent_connection_after_10_s(tmp_path: Path) -> None:
    # As `make bundle-serve` runs: serve.TIMEOUT_S, 10 s. Allowed: 9 to 14 s.
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<p>the course</p>")
    with serve.served(site) as url:
        assert 9.0 < closed_within(connect(url), 14.0) < 14.0
