"""`--scheduler ADDR`: check the address, make sure a Dask scheduler answers there, and watch its workers.

    client = connect("tcp://host:8786", timeout_s=10)   # a FelabError, never a hang, if it is not one
    futures = [Watched(f, client, address) for f in client_futures]  # .result() notices lost workers

Dask's own client trusts whatever answers: pointed at an HTTP server (the scheduler's dashboard
on port 8787, say) it waits for a greeting that never comes, or reads the first 8 bytes of a
reply as the length of a message ("Unable to allocate 3.07 EiB"). So before Dask connects, this
module asks three questions, each answered with one message that says what to do:

1. **Is it an address?** Dask's is `tcp://HOST:PORT` (`tls://` with TLS), as `dask scheduler`
   prints it at start-up ("Scheduler at: tcp://..."); `HOST:PORT` means tcp. A web address
   (`http://...`) or a bare name (`foo`) is refused before anything is sent.
2. **Does something listen there?** One TCP connection, a few seconds at most.
3. **Does it speak first, as a Dask scheduler does?** On a new connection both ends of Dask's
   protocol send their handshake at once: 8 bytes giving the length of a message, then the
   message. A scheduler's greeting arrives in milliseconds; a web server says nothing until it
   is asked (then `HTTP/1.1 ...`), and other servers greet with text (`SSH-2.0-...`). Silence
   for `GREETING_S`, or a greeting of the wrong shape, is "not a Dask scheduler".

Once the sweep runs, a worker can die (killed, out of memory, its machine gone). Dask then
re-runs its tasks elsewhere; with no worker left it would wait for ever. `Watched` waits for
one configuration's row while checking that the cluster still has a worker, and names the
workers it lost if none is left for `LOST_S`.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any
from urllib.parse import urlsplit

from felab.errors import FelabError

GREETING_S = 3.0
"""How long a Dask scheduler may take to send its handshake on a new connection (it takes ms)."""
GREETING_MAX_BYTES = 2**26
"""A handshake is a small message (a few hundred bytes): a length prefix above 64 MiB is not one."""
LOST_S = 10.0
"""How long a sweep waits with no worker in the cluster before it stops and says which it lost."""
POLL_S = 1.0
"""How often a waiting sweep checks that the cluster still has workers."""

START = (
    "Start one on the machine that coordinates with `.venv/bin/dask scheduler` (it listens on "
    "port 8786) and a worker on each machine with `.venv/bin/dask worker tcp://HOST:8786`, each in "
    "the kit's folder after `make cluster`; see docs/replay.md."
)


def checked(address: str) -> tuple[str, str | None, int]:
    """(the address as Dask takes it, its host, its port) for `tcp://HOST:PORT`, `tls://...` or
    `HOST:PORT`; a FelabError that says what Dask's addresses look like for anything else."""
    text = address.strip()
    scheme, _, rest = text.rpartition("://")
    scheme = scheme.lower() or "tcp"
    if scheme in ("http", "https", "ws", "wss"):
        raise FelabError(
            f"--scheduler {address} is a web address; a Dask scheduler's address is tcp://HOST:PORT "
            f"(port 8786 by default; the web page on port 8787 is its dashboard, not the scheduler). "
            f"Run again with --scheduler tcp://HOST:8786, as `dask scheduler` printed it "
            f'("Scheduler at: tcp://...").'
        )
    if scheme not in ("tcp", "tls"):
        raise FelabError(
            f"--scheduler {address}: a Dask scheduler's address is tcp://HOST:PORT (or tls://HOST:PORT "
            f"with TLS), not {scheme}://. Run again with --scheduler tcp://HOST:8786, as `dask scheduler` "
            f'printed it ("Scheduler at: tcp://...").'
        )
    try:
        parts = urlsplit(f"{scheme}://{rest}")
        port = parts.port
    except ValueError:
        port, parts = None, None
    if parts is None or port is None or not parts.hostname or parts.path not in ("", "/"):
        raise FelabError(
            f"--scheduler {address} is not a Dask scheduler's address: give its host and port, as "
            f"tcp://HOST:PORT (port 8786 by default), e.g. --scheduler tcp://127.0.0.1:8786 for one on "
            f'this machine; `dask scheduler` prints it as it starts ("Scheduler at: tcp://...").'
        )
    return f"{scheme}://{rest.rstrip('/')}", parts.hostname, port


def not_a_scheduler(address: str, why: str) -> FelabError:
    return FelabError(
        f"Something answers at {address}, but it is not a Dask scheduler ({why}). Give the "
        f'scheduler\'s own address, as `dask scheduler` printed it ("Scheduler at: tcp://HOST:8786"; '
        f"port 8787 is its dashboard, a web page). {START}"
    )


def unreachable(address: str, why: object) -> FelabError:
    return FelabError(f"Could not reach a Dask scheduler at {address} ({why}). {START}")


def greeting(address: str, host: str, port: int, timeout_s: float) -> None:
    """Return if what listens at host:port greets as a Dask scheduler does; a FelabError if not."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except socket.gaierror as exc:
        raise unreachable(address, f"no host named {host}: {exc.strerror}") from None
    except OSError as exc:
        raise unreachable(address, exc.strerror or exc) from None
    with sock:
        sock.settimeout(GREETING_S)
        first = b""
        try:
            while len(first) < 8:  # the length prefix of Dask's handshake (it may come in pieces)
                piece = sock.recv(8 - len(first))
                if not piece:
                    break
                first += piece
        except TimeoutError:
            if not first:
                raise not_a_scheduler(
                    address, f"it said nothing for {GREETING_S:g} s{web_server(sock, host)}"
                ) from None
        except OSError as exc:
            raise not_a_scheduler(address, f"it dropped the connection: {exc.strerror or exc}") from None
    if not first:
        raise not_a_scheduler(address, "it closed the connection at once")
    if len(first) < 8 or not 0 < struct.unpack("<Q", first)[0] <= GREETING_MAX_BYTES:
        shown = first.decode("ascii", "replace").strip()
        raise not_a_scheduler(address, f"it greeted with {shown!r}, not Dask's handshake")


def web_server(sock: socket.socket, host: str) -> str:
    """', and it answers HTTP: a web server' if asking it for a page gets an HTTP reply (else '')."""
    try:
        sock.sendall(f"HEAD / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
        reply = sock.recv(5)
    except OSError:
        return ""
    return ", and it answers HTTP: a web server" if reply.startswith(b"HTTP/") else ""


def connect(address: str, timeout_s: float) -> Any:
    """A dask.distributed Client connected to the scheduler at `address`, with at least one worker.

    Every way it can fail is one FelabError: a malformed or web address, nothing listening, a
    server that is not a Dask scheduler (checked before Dask connects, so it cannot hang), a
    scheduler with no worker for `timeout_s`."""
    from distributed import Client

    address, host, port = checked(address)
    if address.startswith("tcp://") and host is not None:
        greeting(address, host, port, timeout_s)  # tls: Dask's handshake is inside TLS
    try:
        client = Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise unreachable(address, exc) from None
    except Exception as exc:  # noqa: BLE001  (what Dask raises when the other end is not Dask)
        raise not_a_scheduler(address, f"{type(exc).__name__}: {exc}") from None
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except TimeoutError:
        client.close()
        raise FelabError(
            f"The Dask scheduler at {address} has no workers. Start one on each machine, in the "
            f"kit's folder: `.venv/bin/dask worker {address}` (after `make cluster`)."
        ) from None
    return client


def workers(client: Any) -> dict[str, str]:
    """The cluster's workers now: address -> name (Dask's `--name`, else its address)."""
    found = client.scheduler_info().get("workers", {})
    return {addr: str(info.get("name", addr)) for addr, info in found.items()}


class Watched:
    """A cluster future whose `result()` stops, with the lost workers named, when no worker is left."""

    def __init__(self, future: Any, client: Any, address: str, seen: dict[str, str]) -> None:
        """`seen`: the workers seen so far (shared by a sweep's futures, kept up to date here)."""
        self.future, self.client, self.address, self.seen = future, client, address, seen

    def result(self) -> Any:
        from distributed.scheduler import KilledWorker

        alone_since: float | None = None
        while True:
            try:
                return self.future.result(timeout=POLL_S)
            except TimeoutError:  # distributed's TimeoutError is the built-in one
                pass
            except KilledWorker as exc:
                last = getattr(exc.last_worker, "address", exc.last_worker)
                raise self.lost(f"each worker that ran one configuration died, the last {last}") from None
            except Exception as exc:  # noqa: BLE001  (the trace's bytes died with the workers: "cancelled")
                if self.gone():
                    raise self.lost(f"{type(exc).__name__}: {exc}") from None
                raise
            now_there = workers(self.client)
            self.seen.update(now_there)
            if now_there:
                alone_since = None
                continue
            alone_since = alone_since or time.monotonic()
            if time.monotonic() - alone_since >= LOST_S:
                raise self.lost(f"no worker has been left for {LOST_S:g} s")

    def done(self) -> bool:
        """Whether its configuration has finished (parallel.collect asks, to say so as it happens)."""
        return bool(self.future.done())

    def gone(self) -> list[str]:
        """The addresses of the workers seen in this sweep that the cluster no longer has."""
        return sorted(set(self.seen) - set(workers(self.client)))

    def lost(self, why: str) -> FelabError:
        gone = self.gone()
        named = (self.seen[a] if self.seen[a] == a else f"{self.seen[a]} ({a})" for a in gone)
        names = ", ".join(sorted(named))  # by name: worker-a before worker-b, whatever their ports
        return FelabError(
            f"The Dask cluster at {self.address} lost its workers: {names or 'none named'} ({why}). "
            f"The rows finished so far are recorded. Start workers again on each machine, in the "
            f"kit's folder (`.venv/bin/dask worker {self.address}`), and run the sweep again; a worker "
            f"that dies on its own may be out of memory."
        )
