"""A router's gRPC probe, answered in HTTP/2: "use HTTP/1.1", and nothing logged.

sglang-router checks each worker for gRPC (HTTP/2 with prior knowledge, as SGLang's and then
as vLLM's: two connections) while it checks `GET /health` (sgl-model-gateway,
`detect_connection.rs`). Such a connection opens with HTTP/2's preface, `PRI * HTTP/2.0`,
which no HTTP/1.1 request starts with: uvicorn's parser rejected it and logged
"Invalid HTTP request received." for each probe, twice per worker at every router's start.

The practice server speaks HTTP/1.1 only, and says so in HTTP/2's own frames (RFC 9113): its
preface (an empty SETTINGS frame), then GOAWAY with HTTP_1_1_REQUIRED, and it closes the
connection. The probe fails at once and cleanly, and the router keeps to HTTP.
"""

from __future__ import annotations

from typing import Any

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
"""What an HTTP/2 client sends first on a connection with prior knowledge (RFC 9113, 3.4)."""

H2_REFUSAL = (
    b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # SETTINGS, empty: a server's preface (RFC 9113, 3.4)
    b"\x00\x00\x08\x07\x00\x00\x00\x00\x00"  # GOAWAY, 8 bytes, on the connection (stream 0):
    b"\x00\x00\x00\x00\x00\x00\x00\x0d"  # no stream processed; HTTP_1_1_REQUIRED (0xd, 7)
)


class RefusesHttp2:
    """A mixin for the server's HTTP protocol (connections.timely_http puts it first): a
    connection whose first bytes are HTTP/2's preface gets `H2_REFUSAL` and is closed; any
    other goes on to HTTP/1.1 untouched."""

    transport: Any
    spoke: bool = False  # per connection, once its first bytes came

    def data_received(self, data: bytes) -> None:
        if not self.spoke:
            self.spoke = True  # only a connection's first bytes can be a preface
            if data.startswith(H2_PREFACE[:14]):  # "PRI * HTTP/2.0": the rest may come later
                self.transport.write(H2_REFUSAL)
                self.transport.close()
                return
        super().data_received(data)  # type: ignore[misc]
