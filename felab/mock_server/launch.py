"""Start a throw-away practice server for `make demo`, `make smoke` and the tests.

It runs as a real separate process on a free loopback port, exactly as a
learner's `make mock` does, and is stopped when the `with` block ends, also
when the block fails or is interrupted (Ctrl+C, or pytest-timeout's signal,
which raises inside the block). It runs in a process group of its own, which
is what is stopped; a server the block could not stop (a second interruption
while it waits) is stopped when Python exits (`atexit`).

SIGTERM (`kill PID`, `timeout`) and SIGHUP (a closed terminal) would end this
process at once, by default, with no `finally` and no `atexit`: the server,
in its own session, would live on, an orphan. So while a server runs, they
end this process as Ctrl+C does, by an exception (`SystemExit` with the
shell's status for the signal, 143 or 129), and every `finally` runs. Only a
signal left at its default is taken (under `nohup`, SIGHUP stays ignored).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openai

from felab.errors import FelabError
from felab.paths import from_here


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_flags(proc: subprocess.Popen) -> list[str]:
    """The flags a practice server was started with (what follows `-m felab.mock_server`)."""
    args = [str(a) for a in proc.args] if isinstance(proc.args, list) else []
    return args[args.index("felab.mock_server") + 1 :] if "felab.mock_server" in args else []


def log_tail(path: Path, lines: int = 8) -> str:
    """The last `lines` lines of a process's log ("" if it cannot be read)."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""


def wait_until_serving(
    base_url: str, proc: subprocess.Popen, timeout_s: float = 30.0, log: Path | None = None
) -> None:
    """Poll `GET /v1/models` until the server answers, or fail with what it printed: on the
    terminal (its stderr is this process's), or the end of `log`, where its output went."""
    api = openai.OpenAI(base_url=base_url, api_key="not-needed", max_retries=0, timeout=2.0)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = "is printed above. " if log is None else f"ends its log ({log}):\n{log_tail(log)}\n"
            raise FelabError(
                f"the practice server exited at start (status {proc.returncode}); its own error {said}"
                f"Run it by hand, with the same flags, to see it again: "
                f"`{from_here('.venv/bin/python')} -m felab.mock_server {shlex.join(server_flags(proc))}`."
            )
        try:
            api.models.list()
            return
        except openai.APIConnectionError:
            time.sleep(0.05)
    raise FelabError(f"the practice server did not answer at {base_url} within {timeout_s:.0f} s.")


RUNNING: set[subprocess.Popen] = set()
"""Servers started here and not yet stopped."""


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Stop `proc`'s process group: SIGTERM, then SIGKILL after `grace_s`; wait for it either way."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:  # already gone (and reaped: its id may be another's now)
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)  # its own group (start_new_session): the server and anything it started
        try:
            proc.wait(timeout=grace_s)
            break
        except subprocess.TimeoutExpired:
            continue
    RUNNING.discard(proc)


ABANDONED_GRACE_S = 1.0
"""How long a server whose user stopped (Ctrl+C) may take to end the streams it has under way
before it is killed: nobody reads them. (On SIGTERM the practice server ends them gracefully, as
uvicorn does: a replay's throw-away server behind a queue of long prompts took 10 s.)"""


@atexit.register
def _stop_the_rest() -> None:
    for proc in list(RUNNING):
        stop(proc, grace_s=2.0)


STOPPING = (signal.SIGTERM, signal.SIGHUP)
"""The signals that stop a command, besides Ctrl+C: `kill PID` and `timeout`; a closed terminal."""


def _exit_by(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # the shell's status for "ended by this signal"


@contextlib.contextmanager
def stopped_as_by_ctrl_c() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise SystemExit, so `finally` blocks run (those left
    at their default only; handlers can be set from the main thread alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [sig for sig in STOPPING if signal.getsignal(sig) == signal.SIG_DFL]
    for sig in taken:
        signal.signal(sig, _exit_by)
    try:
        yield
    finally:
        for sig in taken:
            signal.signal(sig, signal.SIG_DFL)


@contextlib.contextmanager
def practice_server(*flags: str) -> Iterator[str]:
    """Run `python -m felab.mock_server` on a free port; yield its base URL (…/v1)."""
    port = free_port()
    cmd = [sys.executable, "-m", "felab.mock_server", "--port", str(port), *flags]
    with stopped_as_by_ctrl_c():
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)
        RUNNING.add(proc)
        base_url = f"http://127.0.0.1:{port}/v1"
        try:
            wait_until_serving(base_url, proc)
            yield base_url
        except BaseException:  # Ctrl+C: its streams under way are abandoned, not waited for
            stop(proc, grace_s=ABANDONED_GRACE_S)
            raise
        finally:
            stop(proc)  # gone already if stopped above
