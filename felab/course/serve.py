"""Serving the built site on 127.0.0.1: Starlette's StaticFiles under uvicorn, the site's files only.

`make bundle-serve` serves build/bundle/ on port 8770, always the same: the browser keeps
typed numbers per address. What a request can reach, and how long it may take:

    files      a file of the site, or a folder's index.html; a folder without one is a 404,
               never a listing (StaticFiles lists nothing)
    no way out a path that leaves the site (`/../../etc/passwd`), holds a NUL byte
               (`/..%00/x`), or passes a symlink anywhere on the way is a 404, with
               nothing on stderr (`SiteFiles.lookup_path`)
    time       a connection gets TIMEOUT_S for its request line and headers, however
               slowly it sends them, and is closed after as long idle, a new one that
               sends nothing too (the practice server's uvicorn protocol, connections.py)

`served(site, port)` runs it in a thread and yields its URL; a port already taken
(most often an earlier `make bundle-serve`) is a FelabError saying so, with the command
for another port written for the learner's folder.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from felab.errors import FelabError
from felab.mock_server.connections import timely_http
from felab.paths import from_here

TIMEOUT_S = 10.0
"""A connection must send its whole request head within this, and is closed after this long idle."""


class SiteFiles(StaticFiles):
    """StaticFiles that follows no symlink at all, and answers a NUL byte with a 404.

    Starlette's own check (`follow_symlink=False`) keeps the resolved path inside the site,
    so a symlink to a file elsewhere in the site would still be served; here any symlink on
    the way is a 404, as a path that leaves the site is.
    """

    def lookup_path(self, path: str) -> tuple[str, os.stat_result | None]:
        if "\x00" in path:  # os.stat would raise ValueError (older Starlette: a 500 and a traceback)
            return "", None
        full_path, found = super().lookup_path(path)
        straight = os.path.normpath(os.path.join(os.path.realpath(str(self.directory)), path))
        if found is None or full_path != straight:  # outside the site, or a symlink on the way
            return "", None
        return full_path, found


def site_app(site: Path) -> Starlette:
    """The ASGI app: `site`'s files, `index.html` for a folder, the site's 404.html for the rest.

    Mounted in a Starlette app, whose middleware turns StaticFiles' HTTPException (404, 405)
    into a plain reply instead of an error in the log.
    """
    return Starlette(routes=[Mount("/", app=SiteFiles(directory=site, html=True, follow_symlink=False))])


def listen(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` (0: a free one), bound as uvicorn binds."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port still closing is free
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise FelabError(
            f"could not serve the bundle on 127.0.0.1:{port} ({exc.strerror}): most often an earlier "
            f"`make bundle-serve` still runs (Ctrl+C in its terminal stops it; or use it, it serves the "
            f"same pages). To serve on another port instead: "
            f"`{from_here('.venv/bin/python')} -m felab bundle serve --port {port + 1}` (numbers you "
            f"typed are kept per address, so they will not show there)."
        ) from None
    sock.listen(128)
    return sock


@contextlib.contextmanager
def served(site: Path, port: int = 0, timeout_s: float = TIMEOUT_S) -> Iterator[str]:
    """Serve `site` on 127.0.0.1 (a free port when `port` is 0) in a thread; yield its URL."""
    if not (site / "index.html").is_file():
        raise FelabError(f"there is no built bundle in {site}: run `{from_here('make bundle')}` first.")
    sock = listen(port)
    config = uvicorn.Config(
        site_app(site),
        log_level="error",  # a client's malformed or slow request is not worth a line; a crash is
        access_log=False,
        lifespan="off",
        server_header=False,
        http=timely_http(timeout_s),
        timeout_keep_alive=max(1, round(timeout_s)),
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise FelabError(
                    f"the bundle server stopped at start on 127.0.0.1:{port} (its own error is printed "
                    f"above): run `{from_here('make bundle-serve')}` again."
                )
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
