"""Hostile HTTP at the practice server's door: every answer is OpenAI's envelope, never a reset.

Raw sockets and Python's http.client send what the openai client never would: a huge body
sent whole before the reply is read, and requests HTTP/1.1 does not allow.
"""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import urlsplit

import pytest

MODEL = "felab-practice"


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    return parts.hostname, parts.port


def envelope(raw: bytes) -> dict:
    """The error object of an HTTP reply's JSON body, with the status line checked for 4xx."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 4"), head[:200]
    assert b"content-type: application/json" in head.lower(), head
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def huge_body(megabytes: int) -> bytes:
    text = b"x" * (megabytes * 1_000_000)
    return b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "' + text + b'"}]}'


def test_a_30_mb_body_sent_whole_before_reading_gets_the_413(mock_url: str) -> None:
    # http.client writes the whole body before it reads a byte: the 413 must still reach it.
    conn = http.client.HTTPConnection(*address(mock_url), timeout=60)
    try:
        conn.request(
            "POST", "/v1/chat/completions", body=huge_body(30), headers={"content-type": "application/json"}
        )
        reply = conn.getresponse()
        assert reply.status == 413
        assert json.loads(reply.read())["error"]["type"] == "invalid_request_error"
    finally:
        conn.close()


def test_a_chunked_body_over_the_limit_sent_whole_gets_the_413(mock_url: str) -> None:
    conn = http.client.HTTPConnection(*address(mock_url), timeout=60)
    pieces = (huge_body(12)[i : i + 1_000_000] for i in range(0, 12_000_100, 1_000_000))
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=pieces,
            headers={"content-type": "application/json"},
            encode_chunked=True,
        )
        reply = conn.getresponse()
        assert reply.status == 413
        assert "larger than" in json.loads(reply.read())["error"]["message"]
    finally:
        conn.close()


def test_a_chunked_body_gets_its_413_when_it_crosses_the_limit(mock_url: str) -> None:
    # 9 MB of a chunked body (the limit is 8 MiB), then nothing more and no end: the 413 comes
    # at once, not when the body's deadline (--request-timeout, 10 s) has passed.
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
    piece = b"%x\r\n%s\r\n" % (1_000_000, b"x" * 1_000_000)
    with socket.create_connection(address(mock_url), timeout=10) as s:
        s.sendall(head + piece * 9)
        s.settimeout(3.0)  # generous (an idle server answers within milliseconds): else TimeoutError
        raw = s.recv(65536)
    assert raw.startswith(b"HTTP/1.1 413"), raw[:200]
    assert "larger than" in envelope(raw)["message"]


def test_a_huge_body_announced_with_100_continue_is_refused_before_it_is_sent(mock_url: str) -> None:
    # curl's way: it waits for `100 Continue` before a large body; the 413 comes instead, at once.
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        "content-length: 30000000\r\nexpect: 100-continue\r\n\r\n"
    )
    with socket.create_connection(address(mock_url), timeout=10) as s:
        s.sendall(head.encode())
        raw = read_reply(s)
    assert envelope(raw)["type"] == "invalid_request_error" and raw.startswith(b"HTTP/1.1 413")


MALFORMED = {
    "chunked and content-length": (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n"
        b"transfer-encoding: chunked\r\n\r\n0\r\n\r\n"
    ),
    "a bad chunk size": (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
        b"zz\r\nhello\r\n0\r\n\r\n"
    ),
    "bare LF": b"POST /v1/chat/completions HTTP/1.1\nhost: x\ncontent-length: 2\n\n{}",
    "a space in a header name": b"GET /health HTTP/1.1\r\nhost: x\r\nbad header: 1\r\n\r\n",
}


def test_a_head_over_the_limit_gets_a_431_in_openais_envelope(mock_url: str) -> None:
    # 100 kB of headers, sent whole before the reply is read: the 431 still reaches the client.
    head = b"GET /health HTTP/1.1\r\nhost: x\r\n" + b"x-big: " + b"a" * 100_000 + b"\r\n\r\n"
    with socket.create_connection(address(mock_url), timeout=10) as s:
        s.sendall(head)
        raw = b""
        while not raw.endswith(b"}}"):
            chunk = s.recv(65536)
            assert chunk, raw
            raw += chunk
    assert raw.startswith(b"HTTP/1.1 431"), raw[:200]
    assert "headers are larger than" in envelope(raw)["message"]


def read_reply(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or 10 s pass)."""
    chunks = []
    while chunk := s.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_http_gets_a_400_in_openais_envelope(mock_url: str, case: str) -> None:
    with socket.create_connection(address(mock_url), timeout=10) as s:
        s.sendall(MALFORMED[case])
        raw = read_reply(s)
    assert raw.startswith(b"HTTP/1.1 400"), raw[:200]
    error = envelope(raw)
    assert error["type"] == "invalid_request_error"
    assert "HTTP" in error["message"]


def test_an_http_1_0_client_gets_its_stream_unchunked_and_ended_by_the_close(mock_url: str) -> None:
    # HTTP/1.0 has no chunked transfer coding: the events come as they are, until the close.
    body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    ).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.0\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(address(mock_url), timeout=10) as s:
        s.sendall(head.encode() + body)
        raw = read_reply(s)
    head_out, _, events = raw.partition(b"\r\n\r\n")
    assert head_out.startswith(b"HTTP/1.1 200"), head_out
    assert b"transfer-encoding" not in head_out.lower() and b"connection: close" in head_out.lower()
    assert events.endswith(b"data: [DONE]\n\n"), events[-200:]
    blocks = events.split(b"\n\n")[:-1]  # each event whole, with no chunk sizes between them
    assert all(block.startswith(b"data: ") for block in blocks), events[:300]
    assert len(blocks) == 5  # the role, three tokens, [DONE]
