"""The practice server as a worker: each call a real router makes, sent as the router sends it.

The requests below are recorded byte for byte on loopback from sglang-router 0.3.2 and
vllm-router 0.1.17 in front of a server that logged what it got; each answer is checked
the way the router's source reads it (sgl-project/sglang, sgl-model-gateway/src/core/:
discover_metadata.rs, create_worker.rs, worker_manager.rs; detect_connection.rs for the
HTTP/2 probe). The server is started for real on a free port.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from felab.mock_server.launch import free_port, stop, wait_until_serving

MODEL = "felab-practice"

# ── What the routers send (recorded) ─────────────────────────────────────────

HEALTH = b"GET /health HTTP/1.1\r\naccept: */*\r\nhost: {host}\r\n\r\n"
SERVER_INFO = b"GET /server_info HTTP/1.1\r\naccept: */*\r\nhost: {host}\r\n\r\n"
MODEL_INFO = b"GET /model_info HTTP/1.1\r\naccept: */*\r\nhost: {host}\r\n\r\n"
GET_LOAD = b"GET /get_load HTTP/1.1\r\naccept: */*\r\nhost: {host}\r\n\r\n"
FLUSH_CACHE = b"POST /flush_cache HTTP/1.1\r\naccept: */*\r\nhost: {host}\r\ncontent-length: 0\r\n\r\n"
RENDER_BODY = (
    b'{"messages":[{"role":"user","content":"hello there"}],"stream":false,"max_tokens":3,'
    b'"logprobs":false,"no_stop_trim":false,"ignore_eos":false,"continue_final_message":false,'
    b'"skip_special_tokens":true,"separate_reasoning":true,"stream_reasoning":true,'
    b'"return_hidden_states":false,"include_reasoning":true}'
)
RENDER = (
    b"POST /v1/chat/completions/render HTTP/1.1\r\ncontent-type: application/json\r\naccept: */*\r\n"
    b"host: {host}\r\ncontent-length: %d\r\n\r\n" % len(RENDER_BODY)
) + RENDER_BODY
# sglang-router's gRPC probe (tonic, HTTP/2 with prior knowledge, gRPC's health check): the preface,
# SETTINGS, WINDOW_UPDATE, HEADERS and DATA, as recorded
H2_PROBE = (
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x18\x04\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00"
    b"\x04\x00\x00\xff\xff\x00\x05\x00\x00@\x00\x00\x06\x00\x00@\x00\x00\x00Y\x01\x04\x00\x00\x00\x01\x83\x86A\x8b\x08\x9d\\\x0b\x81p\xdc\x0b\xcc\x80"
    b'?\x04\xa5a\x13P:\xa6^k+"\xe8$\xe5\x92\xda\x0bb\xfb\xa6\xa0uM\xb8\x93\x96Kh-\x8cc(\xe8L\xf7\xa7):\xff'
    b"@\x82I\x7f\x86M\x835\x05\xb1\x1f_\x8b\x1du\xd0b\r&=LMedz\x89I\xea1\x18\x02\xe1iq\x7f\x00\x00\x05\x00\x00"
    b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01"
)


def start() -> tuple[int, subprocess.Popen]:
    """A practice server with 2 replicas (two ranks of /get_load), its stderr kept to read."""
    port = free_port()
    cmd = [sys.executable, "-m", "felab.mock_server", "--port", str(port), "--replicas", "2"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True, text=True
    )
    try:
        wait_until_serving(f"http://127.0.0.1:{port}/v1", proc)
    except BaseException:
        stop(proc)
        raise
    return port, proc


@pytest.fixture(scope="module")
def worker() -> Iterator[tuple[int, subprocess.Popen]]:
    port, proc = start()
    try:
        yield port, proc
    finally:
        stop(proc)


def send(port: int, raw: bytes) -> bytes:
    """Send `raw` on a new connection, as recorded (host filled in); the server's whole answer (one
    response with its Content-Length, or everything until it closes the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(raw.replace(b"{host}", b"127.0.0.1:%d" % port))
        out = b""
        while chunk := s.recv(65536):
            out += chunk
            head, sep, rest = out.partition(b"\r\n\r\n")
            length = [line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")]
            if sep and length and len(rest) >= int(length[0].split(b":")[1]):
                break
    return out


def body(reply: bytes) -> tuple[int, bytes]:
    head, _, rest = reply.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), rest


def test_discovery_names_the_model_as_the_router_reads_it(worker: tuple[int, subprocess.Popen]) -> None:
    port, _ = worker
    status, info = body(send(port, SERVER_INFO))
    assert status == 200
    labels = json.loads(info)
    # create_worker.rs: model id = served_model_name, else model_path, else "unknown"
    model_id = labels.get("served_model_name") or labels.get("model_path") or "unknown"
    assert model_id == MODEL
    # register_tokenizer.rs: a model_path (or tokenizer_path) makes the router fetch a tokenizer
    # for it from Hugging Face: none is given
    assert labels.get("model_path") is None and labels.get("tokenizer_path") is None
    status, info = body(send(port, MODEL_INFO))
    assert status == 200 and json.loads(info)["is_generation"] is True
    for older in ("/get_server_info", "/get_model_info"):  # SGLang's older names answer the same
        assert httpx.get(f"http://127.0.0.1:{port}{older}", timeout=5).status_code == 200


def test_get_load_is_one_entry_per_rank_with_the_fields_the_router_sums(
    worker: tuple[int, subprocess.Popen],
) -> None:
    port, _ = worker
    status, text = body(send(port, GET_LOAD))
    ranks = json.loads(text)
    assert status == 200 and [r["dp_rank"] for r in ranks] == [0, 1]
    for r in ranks:  # worker_manager.rs sums num_tokens as integers (as_i64)
        assert {"num_reqs", "num_waiting_reqs", "num_tokens"} <= r.keys()
        assert all(isinstance(r[k], int) for k in r)


def test_get_load_counts_a_request_in_flight(worker: tuple[int, subprocess.Popen]) -> None:
    port, _ = worker
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    request = {"model": MODEL, "messages": [{"role": "user", "content": "x " * 400}], "max_tokens": 200}
    request["stream"] = True
    with httpx.stream("POST", url, json=request, timeout=30) as r:
        lines = r.iter_lines()  # (kept: a dropped generator closes the stream, a hang-up)
        next(lines)  # its reply has begun: it is served now
        ranks = httpx.get(f"http://127.0.0.1:{port}/get_load", timeout=5).json()
    assert sum(x["num_reqs"] for x in ranks) == 1
    assert sum(x["num_tokens"] for x in ranks) >= 200  # its prompt and reply tokens
    ranks = httpx.get(f"http://127.0.0.1:{port}/get_load", timeout=5).json()
    deadline = time.monotonic() + 10  # the stream is closed: its booking ends with it
    while sum(x["num_reqs"] for x in ranks) and time.monotonic() < deadline:
        time.sleep(0.05)
        ranks = httpx.get(f"http://127.0.0.1:{port}/get_load", timeout=5).json()
    assert sum(x["num_reqs"] for x in ranks) == 0


def test_flush_cache_empties_the_prefix_cache(worker: tuple[int, subprocess.Popen]) -> None:
    port, _ = worker
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "same opening " * 100}],
        "max_tokens": 1,
    }
    request["user"] = "one-session"  # (the same replica each time)

    def cached() -> int:
        return httpx.post(url, json=request, timeout=30).json()["usage"]["prompt_tokens_details"][
            "cached_tokens"
        ]

    cached()
    assert cached() > 0
    status, _ = body(send(port, FLUSH_CACHE))
    assert status == 200  # worker_manager.rs: any 2xx is a flushed worker
    assert cached() == 0
    page = httpx.post(f"http://127.0.0.1:{port}/flush_cache", headers={"origin": "http://evil.example"})
    assert page.status_code == 403  # not from a web page, as POST /admin/reset


def test_render_gives_token_ids_equal_for_equal_text(worker: tuple[int, subprocess.Popen]) -> None:
    port, _ = worker
    status, text = body(send(port, RENDER))
    ids = json.loads(text)["token_ids"]
    assert status == 200 and ids and all(isinstance(i, int) for i in ids)
    assert json.loads(body(send(port, RENDER))[1])["token_ids"] == ids


def test_http2_probe_is_refused_in_http2_and_nothing_is_logged() -> None:
    port, proc = start()
    try:
        probe_twice(port)
    finally:
        stop(proc)
    assert proc.stderr is not None
    assert "Invalid HTTP request" not in proc.stderr.read()


def probe_twice(port: int) -> None:
    for _ in range(2):  # the router probes twice: for SGLang's gRPC, then vLLM's
        reply = send(port, H2_PROBE)
        assert reply[:9] == b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty SETTINGS frame first
        goaway = reply[9:]
        assert goaway[3] == 0x07 and int.from_bytes(goaway[13:17], "big") == 0x0D  # HTTP_1_1_REQUIRED
    assert body(send(port, HEALTH))[0] == 200  # and HTTP/1.1 on the next connection, as before
