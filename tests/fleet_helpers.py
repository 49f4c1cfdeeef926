"""Starting `python -m felab fleet` as a learner does, and checking its processes by PID."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

from felab.paths import KIT_ROOT


def free_range(count: int) -> int:
    """A first port P with P..P+count-1 all free on 127.0.0.1 right now, below the ports the
    system hands out to outgoing connections (Linux: 32768 and up), which another test's client
    could take between this check and the fleet's bind."""
    for _ in range(200):
        base = random.randrange(10_000, 32_000)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def fleet(*args: str) -> subprocess.Popen[str]:
    """`python -m felab fleet ARGS` from the kit folder, in a session of its own (as a terminal
    runs it), its output to read."""
    return subprocess.Popen(
        [sys.executable, "-m", "felab", "fleet", *args],
        cwd=KIT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_up(proc: subprocess.Popen[str], timeout_s: float = 60) -> str:
    """The fleet's output up to its last announced line (it prints it all at once when up)."""
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the fleet exited ({proc.wait()}):\n{''.join(lines)}")
        lines.append(line)
        if "stops every process of this fleet" in line:
            return "".join(lines)
    raise AssertionError("the fleet was not up in time:\n" + "".join(lines))


def state(results: Path) -> dict:
    return json.loads((results / "fleet.json").read_text())


def pids(results: Path) -> list[int]:
    return [p["pid"] for p in state(results)["processes"]]


def running(pid: int) -> bool:
    """True while `pid` runs (a zombie has stopped: exited, its status not yet read)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return bool(stat.stdout.strip()) and not stat.stdout.strip().startswith("Z")


def all_gone(listed: list[int], timeout_s: float = 20) -> list[int]:
    """The PIDs still running after `timeout_s` (none, when the fleet stopped them all)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(running(p) for p in listed):
        time.sleep(0.1)
    return [p for p in listed if running(p)]
