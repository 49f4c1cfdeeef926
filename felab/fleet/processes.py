"""The fleet's processes: each started in a session of its own, and stopped by its PID only.

A fleet is a handful of processes (N practice servers and a router) that must all stop
together, whatever stops the fleet: Ctrl+C in its terminal, SIGTERM or SIGHUP (the terminal
closed), or `make fleet-stop` from another one. Two rules make that safe:

- Each process starts in a new session (`start_new_session`, up.py's `start`), so its PID is
  also its process group's id: stopping the group stops it and anything it started, and
  nothing else.
- `make fleet-stop` reads the PIDs from the state file the fleet wrote (`results/fleet.json`)
  and stops a PID only if it is still the process the fleet started: its command line is
  compared first, since a PID is reused once its process is gone.

This module reads and writes that file and stops what it lists, and needs nothing of the kit but
where results/ is: a lesson's run reads the file too, to record the fleet it went through
(felab/results.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from felab.paths import results_dir


@dataclass(frozen=True)
class Started:
    """One process of the fleet, as the state file records it."""

    role: str  # "router", "worker 1", ..., or "fleet" (the process that started and watches them)
    pid: int
    url: str
    command: list[str]
    shown: str = ""
    """Its command line as `ps` showed it once it ran (`command_of`): what `is_ours` compares."""

    def seen(self) -> Started:
        """This process, with its command line as `ps` shows it now."""
        return replace(self, shown=command_of(self.pid) or "")


def state_file() -> Path:
    """Where a running fleet lists its processes: `results/fleet.json` (or `$FELAB_RESULTS_DIR`)."""
    return results_dir() / "fleet.json"


def write_state(processes: list[Started], extra: dict) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({**extra, "processes": [asdict(p) for p in processes]}, indent=1))
    tmp.replace(path)  # whole or not at all


def read_state() -> dict | None:
    """The running fleet's state, or None if there is none (or it cannot be read)."""
    try:
        state = json.loads(state_file().read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def clear_state(owner: int) -> None:
    """Remove the state file if the fleet whose watcher is `owner` wrote it."""
    state = read_state()
    if state is not None and state.get("owner") == owner:
        with contextlib.suppress(OSError):
            state_file().unlink()


def command_of(pid: int) -> str | None:
    """The command line of a live process, as `ps` shows it (Linux and macOS); None if it is gone."""
    try:
        out = subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def is_ours(p: Started) -> bool:
    """True if `p.pid` is still the process the fleet started: alive, with the same command line."""
    return bool(p.shown) and command_of(p.pid) == p.shown


def alive(pid: int) -> bool:
    """True while `pid` runs; a zombie (exited, its parent yet to read its status) has stopped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = subprocess.run(
            ["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    return not stat.stdout.strip().startswith("Z") and bool(stat.stdout.strip())


def stop_pids(processes: list[Started], grace_s: float = 10.0) -> list[Started]:
    """Stop each process that is still ours: SIGTERM, SIGKILL after `grace_s`; a worker or router
    with its process group (its own session: what it started too), the fleet's watcher alone
    (its group is the terminal's). The ones that were still ours."""
    ours = [p for p in processes if is_ours(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in ours:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if p.role == "fleet":
                    os.kill(p.pid, sig)
                else:
                    os.killpg(p.pid, sig)
        deadline = time.monotonic() + grace_s
        while any(alive(p.pid) for p in ours) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not any(alive(p.pid) for p in ours):
            break
    return ours


def recorded(state: dict) -> list[Started]:
    """The processes a state file lists (none if it was not written by a fleet)."""
    try:
        return [Started(**p) for p in state.get("processes", [])]
    except TypeError:
        return []


def stop_recorded() -> str:
    """`make fleet-stop`: stop the fleet the state file lists (only its processes, by PID); what was done."""
    state = read_state()
    if state is None:
        return f"no fleet is running here ({state_file()} does not exist): nothing to stop."
    listed = recorded(state)
    watcher = [p for p in listed if p.role == "fleet"]
    stop_pids(watcher, grace_s=15.0)  # it stops its own processes, and removes the file
    left = stop_pids([p for p in listed if p.role != "fleet"])  # any it could not
    with contextlib.suppress(OSError):
        state_file().unlink()
    others = len(listed) - len(watcher)
    return (
        f"fleet stopped ({others} process{'es' if others != 1 else ''}; {len(left)} of them had to be "
        f"stopped here, by pid)."
    )
