"""A client that sends and does not read holds only its own connection.

Each test runs a practice server of its own (a real process on loopback) and talks to it
through raw sockets, as a stuck or hostile client would: requests sent ahead of their
replies (HTTP/1.1 pipelining) and never read. Meanwhile another client asks for /health
and must be answered as if nothing happened. The bounds are generous (1 s; an idle
server answers in about a millisecond): the old server failed them by seconds, or never
answered until the hog hung up.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from felab.mock_server.connections import MAX_WAITING
from felab.mock_server.launch import practice_server

MODEL = "felab-practice"
HEALTH = b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n"


@pytest.fixture
def server() -> Iterator[tuple[str, tuple[str, int]]]:
    with practice_server() as url:
        parts = urlsplit(url)
        assert parts.hostname and parts.port
        yield url, (parts.hostname, parts.port)


def non_reader(address: tuple[str, int]) -> socket.socket:
    """A connection that will read nothing: its receive buffer as small as the kernel allows."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(address)
    return s


def send_buffer_max() -> int:
    """The most the kernel buffers for a TCP sender, in bytes (Linux: tcp_wmem's third figure,
    4 MB unless changed)."""
    path = Path("/proc/sys/net/ipv4/tcp_wmem")
    return int(path.read_text(encoding="ascii").split()[2]) if path.exists() else 4 * 1024 * 1024


def health_s(address: tuple[str, int]) -> float:
    """Seconds for a new connection's GET /health to be answered in full (at most 10 s)."""
    start = time.perf_counter()
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(HEALTH)
        reply = b""
        while not reply.endswith(b"}"):
            chunk = s.recv(65536)
            assert chunk, f"the server closed the connection: {reply[:200]!r}"
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    return time.perf_counter() - start


def beside(
    hog: socket.socket, address: tuple[str, int], send: Callable[[], None]
) -> tuple[list[float], list[BaseException | None]]:
    """Ten /health times (s) from another client while `send` writes to `hog` in a thread of its
    own, and how the sending ended (None: it finished; else the error, as the server cut it off)."""
    outcome: list[BaseException | None] = []

    def sending() -> None:
        try:
            send()
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc)

    sender = threading.Thread(target=sending, daemon=True)
    sender.start()
    try:
        waits = [health_s(address) for _ in range(10)]
        sender.join(timeout=30)
    finally:
        hog.close()
    return waits, outcome


def chat_answers(url: str) -> bool:
    """Whether a chat request through the openai client gets its reply (within 10 s)."""
    api = openai.OpenAI(base_url=url, api_key="not-needed", max_retries=0, timeout=10)
    chat = api.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    return bool(chat.choices[0].message.content)


def test_a_flood_of_pipelined_gets_closes_only_its_own_connection(
    server: tuple[str, tuple[str, int]],
) -> None:
    url, address = server
    flood = HEALTH * (10_000_000 // len(HEALTH))  # 10 MB of GET /health, none of it read
    hog = non_reader(address)
    waits, outcome = beside(hog, address, lambda: hog.sendall(flood))
    assert max(waits) < 1.0, f"/health took {max(waits) * 1000:.0f} ms beside the flood"
    # More than MAX_WAITING requests waiting at once: the server drops the connection.
    assert outcome and isinstance(outcome[0], ConnectionError), outcome
    assert chat_answers(url)


def test_a_client_that_never_reads_its_replies_is_paused_and_holds_no_one_else(
    server: tuple[str, tuple[str, int]],
) -> None:
    # 90 requests at once (fewer than MAX_WAITING), none of their replies read: each asks for
    # a model with a 60 kB name, and its 404 names it back, so the 5.4 MB of replies overflow
    # the kernel's buffers (4 MB at most) and the server's, and the hog is left with a reply
    # half written. The old server kept the admission turn for that reply: no other request
    # was admitted until the hog hung up.
    url, address = server
    asks = f"GET /v1/models/{'m' * 60_000} HTTP/1.1\r\nhost: x\r\n\r\n".encode() * (MAX_WAITING - 10)
    if len(asks) < send_buffer_max() + 1_000_000:  # (here about 3.5 MB were needed)
        pytest.skip("this kernel buffers more for a TCP sender than 90 replies can fill")
    hog = non_reader(address)
    try:
        hog.sendall(asks)
        time.sleep(0.5)
        waits = [health_s(address) for _ in range(5)]
        answered = chat_answers(url)
        # The server reads no more from it (what it sends waits in TCP's buffers), and does
        # not drop it either: 10 MB more cannot be sent.
        hog.settimeout(1.0)
        with pytest.raises(TimeoutError):
            hog.sendall(HEALTH * (10_000_000 // len(HEALTH)))
    finally:
        hog.close()
    assert max(waits) < 1.0, f"/health took {max(waits) * 1000:.0f} ms beside the non-reader"
    assert answered


ENDLESS = {
    "a header line that never ends": (b"x-long: ", b"a" * 1024),
    "header lines without end": (b"", b"x-many: 1\r\n" * 100),
}


@pytest.mark.parametrize("case", list(ENDLESS))
def test_an_endless_head_is_cut_at_the_limit_and_holds_no_one_else(
    server: tuple[str, tuple[str, int]], case: str
) -> None:
    # The old server copied the whole header so far at each piece: beside one such client,
    # /health took 2 to 7.5 s, until the head deadline (10 s) closed it.
    _, address = server
    opening, piece = ENDLESS[case]
    hog = socket.create_connection(address)

    def send() -> None:
        # Endless until the server cuts it off, or for 8 s (the head deadline, 10 s, is later)
        give_up = time.monotonic() + 8
        hog.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n" + opening)
        while time.monotonic() < give_up:
            hog.sendall(piece)

    waits, outcome = beside(hog, address, send)
    assert max(waits) < 1.0, f"/health took {max(waits) * 1000:.0f} ms beside the endless head"
    # Cut off: past MAX_HEAD_BYTES the 431, then up to 1 MiB is dropped, then the connection.
    assert outcome and isinstance(outcome[0], ConnectionError), outcome


# ── Every kind at once, for a while (opt-in: make test-load) ─────────────────


def rss_mb(pid: int) -> float:
    """The resident memory of a process, in MB (Linux's /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def hog_loop(address: tuple[str, int], stop: threading.Event, opening: bytes, piece: bytes) -> None:
    """Connect, send `opening` then `piece` over and over until the server drops the
    connection; again, until `stop`. Reads nothing."""
    while not stop.is_set():
        hog = non_reader(address)
        try:
            hog.sendall(opening)
            while not stop.is_set():
                hog.sendall(piece)
        except OSError:
            pass
        finally:
            hog.close()


@pytest.mark.load
def test_hostile_clients_of_every_kind_at_once_hold_no_one_else(server: tuple[str, tuple[str, int]]) -> None:
    # For 10 s: floods of pipelined GETs (reconnecting each time they are cut off), endless
    # heads of both kinds, and a non-reader with a reply stuck half written, while a live
    # client streams chats and asks for /health. Every /health within 1 s, every stream whole,
    # and the server's memory does not grow with what the hogs send (hundreds of MB).
    url, address = server
    api = openai.OpenAI(base_url=url, api_key="not-needed", max_retries=0, timeout=10)
    pid = int(httpx.get(url.removesuffix("/v1") + "/health", timeout=10).json()["pid"])
    before = rss_mb(pid)
    stop = threading.Event()
    hogs = [
        (b"", HEALTH * 1000),
        (b"GET /health HTTP/1.1\r\nhost: x\r\nx-long: ", b"a" * 1024),
        (b"GET /health HTTP/1.1\r\nhost: x\r\n", b"x-many: 1\r\n" * 100),
    ]
    threads = [threading.Thread(target=hog_loop, args=(address, stop, *h), daemon=True) for h in hogs]
    stuck = non_reader(address)
    stuck.sendall(f"GET /v1/models/{'m' * 60_000} HTTP/1.1\r\nhost: x\r\n\r\n".encode() * (MAX_WAITING - 10))
    for t in threads:
        t.start()
    waits, streams = [], 0
    try:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            waits.append(health_s(address))
            chunks = api.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8, stream=True
            )
            assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 8
            streams += 1
        grew = rss_mb(pid) - before
    finally:
        stop.set()
        stuck.close()
        for t in threads:
            t.join(timeout=10)
    assert max(waits) < 1.0, f"/health took {max(waits) * 1000:.0f} ms beside the hogs"
    assert streams > 5
    assert grew < 100, f"the server grew by {grew:.0f} MB"
