"""The floor for `make bench`: a server that does nothing but keep a 50 ms schedule.

    python -m felab.bench.floor PORT

A raw HTTP/1.1 server on the standard library's asyncio (no uvicorn, no Starlette,
no parsing of the body, no model): it reads a request's head, notes its arrival,
reads the body (Content-Length bytes), sleeps until FLOOR_TTFT_S after the arrival
(precisely: a timer to PRECISE_S before the deadline, then passes of the event loop until
it, which costs CPU but nothing here competes for it), and writes one SSE
chunk with text, in the practice server's chat shape, with the prediction in
`x-felab-predicted-ttft-ms`. A `GET` gets an empty JSON object (the bench's client
warms its connections with `GET /health`).

Whatever TTFT error the bench's client measures here is the machine's: the kernel,
the event loop, the client itself. The practice server's error, measured in the same
run by the same client, is compared with it (docs/benchmarks.md, "The floor").
"""

from __future__ import annotations

import asyncio
import sys

FLOOR_TTFT_S = 0.050
PRECISE_S = 0.002
EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": null}]}\n\n'
STREAM = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    + f"x-felab-predicted-ttft-ms: {FLOOR_TTFT_S * 1000:.3f}\r\n\r\n".encode()
    + f"{len(EVENT):x}\r\n".encode()
    + EVENT
    + b"\r\n0\r\n\r\n"
)
EMPTY = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer requests on one keep-alive connection until the client closes it."""
    clock = asyncio.get_running_loop().time
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            deadline = clock() + FLOOR_TTFT_S  # arrived: its head is read
            length = next(
                (
                    int(line[15:])
                    for line in head.lower().split(b"\r\n")
                    if line.startswith(b"content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            if head.startswith(b"GET"):
                writer.write(EMPTY)
                continue
            await asyncio.sleep(deadline - clock() - PRECISE_S)
            while clock() < deadline:
                await asyncio.sleep(0)
            writer.write(STREAM)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(connection, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
