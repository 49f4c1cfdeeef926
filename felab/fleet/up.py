"""`make fleet`: N practice servers, each a process on its own port, behind a real router.

    make fleet N=4 ROUTER=sglang            # sglang-router, cache_aware, in front of 4 workers
    make fleet N=4 ROUTER=vllm POLICY=round_robin
    make fleet N=4 ROUTER=none              # the kit's own fleet: one server, --replicas 4

The ports are one range from PORT (8780): the router on PORT, worker i on PORT+i, and the
router's own Prometheus page on PORT+N+1 (each router would take 29000 otherwise, which a second
fleet would then find taken). Everything is checked before anything starts: N, the router and
its policy, the profile, the whole port range. The fleet then prints the one URL to point any
lesson script at (`--base-url`) and a table of its workers, and waits; Ctrl+C, SIGTERM, SIGHUP
or `make fleet-stop` stops every process it started (processes.py).

Readiness is measured, not assumed: a worker is up when it answers `GET /v1/models`; the router
when it lists the workers' model and (sglang-router, which registers its workers one by one in
the background) knows all N of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from felab.errors import FelabError
from felab.fleet.processes import (
    Started,
    clear_state,
    is_ours,
    read_state,
    recorded,
    state_file,
    write_state,
)
from felab.fleet.routers import ROUTERS, Router
from felab.mock_server import launch
from felab.mock_server.config import FLEET_ROLE_ENV, MAX_REPLICAS, MODEL_ID, ROUTES
from felab.mock_server.twin import of_profile
from felab.paths import from_here, learner_folder, results_dir
from felab.tables import table

DEFAULT_PORT = 8780
MAX_WORKERS = 32
"""Each worker is a Python process of its own (about 40 MB and a share of the cores): past a
few dozen a laptop spends its time switching between them. More replicas: ROUTER=none."""

ROUTE_FOR_POLICY = {"cache_aware": "sglang-cache-aware", "round_robin": "round-robin", "random": "random"}
"""ROUTER=none: the kit's route for each router policy (any route name of --route works too).

`cache_aware`, the default, is the kit's model of sglang-router's own rule (routes_sglang.py, which
`make fleet-check` compares with the router), so `ROUTER=none` and `ROUTER=sglang` place lesson 06's
12 calls alike: all on the replica that holds the opening. `POLICY=prefix` is the kit's other
cache-aware route, whose load filter counts work done since the start: it moves a lone session
once its replica's lead passes 8 requests' work (call 11 on 4 replicas, docs/fleet.md)."""


@dataclass
class Plan:
    """What to start, checked (`plan()`) before anything starts."""

    n: int
    router: Router | None  # None: the kit's own in-process fleet
    policy: str
    profile: Path | None
    port: int

    def ports(self) -> range:
        """Every port the fleet takes: the router (or the one server), the workers, the router's metrics."""
        return range(self.port, self.port + (self.n + 2 if self.router else 1))


@dataclass
class Fleet:
    """A fleet that is up: its URL, its processes (the Popen of each, for stopping them)."""

    url: str
    processes: list[Started] = field(default_factory=list)
    popens: list[subprocess.Popen] = field(default_factory=list)
    model: str = MODEL_ID
    started_s: float = 0.0


def named(p: Plan) -> str:
    """The fleet as a run recorded through it names it (results.py's `fleet`; `make numbers`
    shows it): `sglang-router cache_aware, 4 workers`, or `the kit's fleet sglang-cache-aware,
    4 replicas` (ROUTER=none: one server, the route its POLICY names)."""
    if p.router is None:
        return f"the kit's fleet {p.policy}, {p.n} replica{'s' if p.n != 1 else ''}"
    return f"{p.router.binary} {p.policy}, {p.n} worker{'s' if p.n != 1 else ''}"


def usage() -> str:
    return from_here("make fleet N=4 ROUTER=sglang")


def start_command(p: Plan) -> str:
    """The command that starts this fleet, as it was planned, from the kit folder (`from_here`
    writes it for the learner's; `results/fleet.json` keeps it for advice given elsewhere)."""
    words = [f"N={p.n}", f"ROUTER={p.router.name if p.router else 'none'}", f"POLICY={p.policy}"]
    words += [f"PORT={p.port}"] if p.port != DEFAULT_PORT else []
    words += [f"PROFILE={p.profile}"] if p.profile is not None else []
    return "make fleet " + " ".join(words)


def again(p: Plan) -> str:
    """The command that starts this fleet again, for the folder the learner is in."""
    return from_here(start_command(p))


def plan(n: int, router: str, policy: str | None, profile: str | None, port: int) -> Plan:
    """Check every input; one FelabError that says what to type instead, or the plan."""
    name = router.lower()
    if name != "none" and name not in ROUTERS:
        raise FelabError(
            f"no router named `{router}`: ROUTER is one of {', '.join([*ROUTERS, 'none'])} "
            f"(none: the kit's own fleet in one process). For example: {usage()}"
        )
    chosen = ROUTERS.get(name)
    high = MAX_WORKERS if chosen else MAX_REPLICAS
    if not 1 <= n <= high:
        more = " For more replicas, ROUTER=none models up to 256 in one process." if chosen else ""
        each = (
            "each worker is a process of its own" if chosen else "replicas of the kit's fleet, in one process"
        )
        raise FelabError(f"N={n} workers: N is from 1 to {high} ({each}).{more}")
    if chosen:
        policy = policy or chosen.default_policy
        if policy not in chosen.policies:
            raise FelabError(
                f"{chosen.binary} has no policy `{policy}` here: "
                f"POLICY is one of {', '.join(chosen.policies)}."
            )
    else:
        policy = ROUTE_FOR_POLICY.get(policy or "cache_aware", policy or "sglang-cache-aware")
        if policy not in ROUTES:
            choices = ", ".join(dict.fromkeys([*ROUTE_FOR_POLICY, *ROUTES]))  # (`random` is both)
            raise FelabError(f"ROUTER=none has no route `{policy}`: POLICY is one of {choices}.")
    path = None
    if profile:
        path = learner_folder() / Path(profile).expanduser()  # as typed there: make runs at the kit's root
        if not path.is_file():
            raise FelabError(
                f"no profile at {path}: PROFILE names a timing profile written by `make calibrate` "
                f"(results/profiles/*.toml), as a path from the folder you ran make in."
            )
    if not 1024 <= port <= 65535 - n - 2:
        raise FelabError(
            f"PORT={port}: choose a port from 1024 to {65535 - n - 2}, for example PORT={DEFAULT_PORT}."
        )
    return Plan(n, chosen, policy, path, port)


def check_ports(p: Plan) -> None:
    """Every port of the range free on 127.0.0.1, or one message naming the first taken one."""
    for port in p.ports():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # As the servers bind (uvicorn, the routers): a port whose last connections are still
            # closing (TIME_WAIT, a minute after a fleet stopped) is free; one listened on is not.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                last = p.ports()[-1]
                raise FelabError(
                    f"port {port} on 127.0.0.1 is taken, and this fleet needs {p.port} to {last}: another "
                    f"program, or a fleet already running (`{from_here('make fleet-stop')}` stops that one). "
                    f"Or choose another range: {from_here(f'make fleet N={p.n} PORT={p.port + 100}')}"
                ) from None


def get_json(url: str, timeout_s: float = 2.0) -> object:
    with urllib.request.urlopen(url, timeout=timeout_s) as reply:
        return json.loads(reply.read())


def router_ready(p: Plan, root: str, model: str) -> bool:
    """The router lists the model, and (sglang-router) has registered all N workers."""
    try:
        models = get_json(f"{root}/v1/models")
        if not isinstance(models, dict) or model not in [m.get("id") for m in models.get("data", [])]:
            return False
        if p.router is not None and p.router.name == "sglang":
            loads = get_json(f"{root}/get_loads")
            return isinstance(loads, dict) and len(loads.get("workers", [])) == p.n
        return True
    except (OSError, ValueError):
        return False


def log_of(role: str) -> Path:
    """Where a fleet process's output goes: results/fleet-router.log, fleet-server.log (the kit's
    fleet in one process), fleet-worker-1.log, ... (quiet while it serves: warnings only)."""
    return results_dir() / f"fleet-{role.replace(' ', '-')}.log"


def fresh_log(role: str) -> Path:
    """`log_of(role)`, emptied for this start (what a failed start prints is this start's)."""
    log = log_of(role)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    return log


FLEET_LOG = re.compile(r"fleet-(router|server|worker-[0-9]+)\.log")
"""The names `log_of` gives (any other file in results/ is the learner's, and left alone)."""


def roles(p: Plan) -> list[str]:
    """The processes this fleet starts, by role: the one server (ROUTER=none), or the router and
    each worker."""
    return ["server"] if p.router is None else ["router", *(f"worker {i}" for i in range(1, p.n + 1))]


def clear_other_logs(p: Plan) -> list[Path]:
    """Remove the logs of processes an earlier fleet had and this one has not, and return them:
    after a fleet of 4, `fleet-worker-3.log` and `-4.log` would otherwise lie beside a fleet of
    2's logs, their last lines read as this fleet's. Run once the fleet may start (no other
    fleet runs from this folder, its ports are free), before `fresh_log` empties its own."""
    ours = {log_of(role) for role in roles(p)}
    folder = results_dir()
    others = [
        path
        for path in (sorted(folder.glob("fleet-*.log")) if folder.is_dir() else [])
        if FLEET_LOG.fullmatch(path.name) and path not in ours
    ]
    for path in others:
        path.unlink(missing_ok=True)
    return others


def start(
    role: str, command: list[str], url: str, log: Path | None = None
) -> tuple[Started, subprocess.Popen]:
    """Start `command` in a session of its own (its output to `log`, or nowhere): its PID is its
    process group's, which `stop_fleet` and `make fleet-stop` stop (processes.py)."""
    out = log.open("ab") if log is not None else subprocess.DEVNULL
    try:
        env = {**os.environ, FLEET_ROLE_ENV: role}  # a worker's /health names its role (serve.py)
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]  # the child has its own copy
    launch.RUNNING.add(proc)  # stopped when Python exits, if nothing stopped it before
    return Started(role, proc.pid, url, command), proc


def worker_command(p: Plan, port: int, replicas: int = 1) -> list[str]:
    cmd = [sys.executable, "-m", "felab.mock_server", "--port", str(port)]
    if replicas > 1:
        cmd += ["--replicas", str(replicas), "--route", p.policy]
    if p.profile is not None:
        cmd += ["--profile", str(p.profile)]
    return cmd


def start_fleet(p: Plan, timeout_s: float = 30.0) -> Fleet:
    """Start the workers (all at once), wait for each, then the router; the fleet, up. On any
    failure, every process started so far is stopped before the error goes on."""
    began = time.monotonic()
    fleet = Fleet(url=f"http://127.0.0.1:{p.port}/v1")
    try:
        if p.router is None:
            started, proc = start("server", worker_command(p, p.port, p.n), fleet.url, fresh_log("server"))
            fleet.processes.append(started)
            fleet.popens.append(proc)
        else:
            binary = p.router.installed()  # before any worker starts
            for i in range(1, p.n + 1):
                url = f"http://127.0.0.1:{p.port + i}"
                log = fresh_log(f"worker-{i}")
                started, proc = start(f"worker {i}", worker_command(p, p.port + i), url, log)
                fleet.processes.append(started)
                fleet.popens.append(proc)
        for started, proc in zip(fleet.processes, fleet.popens, strict=True):
            url = started.url.removesuffix("/v1") + "/v1"
            launch.wait_until_serving(url, proc, timeout_s, log_of(started.role))
        if p.router is not None:
            workers = [s.url for s in fleet.processes]
            log = fresh_log("router")
            command = p.router.command(p.port, p.port + p.n + 1, workers, p.policy)
            started, proc = start("router", command, fleet.url, log)
            fleet.processes.insert(0, started)
            fleet.popens.insert(0, proc)
            deadline = time.monotonic() + timeout_s
            while not router_ready(p, f"http://127.0.0.1:{p.port}", fleet.model):
                if proc.poll() is not None or time.monotonic() > deadline:
                    why = "exited" if proc.poll() is not None else f"was not ready within {timeout_s:.0f} s"
                    raise FelabError(
                        f"{binary.name} {why}; the end of its log ({log}):\n{launch.log_tail(log)}\n"
                        f"Run `{from_here('make fleet-stop')}`, then try again; if it fails the same way, "
                        f"`{from_here(f'make fleet N={p.n} ROUTER=none')}` needs no router."
                    )
                time.sleep(0.05)
    except BaseException:
        stop_fleet(fleet)
        raise
    fleet.started_s = time.monotonic() - began
    return fleet


def stop_fleet(fleet: Fleet) -> None:
    """Stop every process the fleet started, by PID: the router first, so it sends nothing more,
    then the workers all told at once (each takes about a second to shut down), then each
    waited for (launch.stop: SIGKILL to one still there after its grace)."""
    if fleet.popens and fleet.processes[0].role == "router":
        launch.stop(fleet.popens[0])
    for proc in fleet.popens:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)  # its own session: the worker and what it started
    for proc in fleet.popens:
        launch.stop(proc)


def worker_table(p: Plan, fleet: Fleet) -> str:
    if p.router is None:
        server = fleet.processes[0]
        return table([{"replica": i, "served at": server.url, "pid": server.pid} for i in range(p.n)])
    return table([{"process": s.role, "url": s.url, "pid": s.pid} for s in fleet.processes])


def announce(p: Plan, fleet: Fleet) -> str:
    """What the learner reads once the fleet is up."""
    what = (
        f"{p.router.binary} ({p.policy}) in front of {p.n} practice servers"
        if p.router
        else f"one practice server with {p.n} replicas (--route {p.policy}), the kit's own fleet"
    )
    twin = f", each the twin of {p.profile}" if p.profile else ""
    return "\n".join(
        [
            f"fleet up in {fleet.started_s:.1f} s: {what}{twin}.",
            "",
            f"  URL  {fleet.url}    (model {fleet.model})",
            "",
            worker_table(p, fleet),
            "",
            "Point any lesson script at it, for example from lessons/06-prefix-caching/:",
            f"  python prefix_bench.py --base-url {fleet.url}",
            f"Where the requests went: {from_here('make fleet-stats')} (in another terminal).",
            f"Ctrl+C here, or {from_here('make fleet-stop')}, stops every process of this fleet.",
        ]
    )


class Stop(Exception):
    """SIGTERM or SIGHUP: stop the fleet as Ctrl+C does."""


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise `Stop` here (Ctrl+C raises KeyboardInterrupt); restored after."""

    def handler(signum: int, _: FrameType | None) -> None:
        ignore_stops()  # asked again while it stops (a `timeout`, a kill typed twice): the same stop
        raise Stop(signal.Signals(signum).name)

    kept = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in kept.items():
            signal.signal(sig, old)


def ignore_stops() -> None:
    """SIGTERM and SIGHUP do nothing from now on (`stopped_by_signals` puts its handlers back): the
    fleet is stopping already, and a second request in the middle of it had ended in a traceback,
    with `results/fleet.json` left behind."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def one_fleet() -> None:
    """A FelabError if a fleet started from this kit folder still runs: its state file (which
    `make fleet-stop` and `fleet-stats` read) has room for one, and a second would hide the first."""
    state = read_state() or {}
    watcher = next((q for q in recorded(state) if q.role == "fleet"), None)
    if watcher is not None and is_ours(watcher):
        raise FelabError(
            f"a fleet is already running from this kit folder (pid {watcher.pid}, {state.get('url')}); "
            f"`{from_here('make fleet-stop')}` and `{from_here('make fleet-stats')}` work on one at a "
            f"time. Use that one, or stop it first: {from_here('make fleet-stop')}"
        )


def run(p: Plan) -> int:
    """Start the fleet, announce it, and watch it until a signal or a process ends; then stop all."""
    one_fleet()
    check_ports(p)
    clear_other_logs(p)
    with stopped_by_signals():
        fleet = start_fleet(p)
        owner = os.getpid()
        try:
            watcher = Started("fleet", owner, fleet.url, [sys.executable, *sys.argv])
            extra = {
                "owner": owner,
                "url": fleet.url,
                "router": p.router.name if p.router else "none",
                "start": start_command(p),  # a cold start's advice (engine_families/practice.py)
                "fleet": named(p),  # what a run through it records (results.py)
                "twin": of_profile(p.profile).card() if p.profile else None,
            }
            write_state([q.seen() for q in (watcher, *fleet.processes)], extra)
            print(announce(p, fleet), flush=True)
            while True:
                for started, proc in zip(fleet.processes, fleet.popens, strict=True):
                    if proc.poll() is not None:
                        raise FelabError(
                            f"{started.role} (pid {started.pid}) exited with status {proc.returncode}; "
                            f"the rest of the fleet is stopped. Start it again: {again(p)}"
                        )
                time.sleep(0.25)
        except (KeyboardInterrupt, Stop):
            print("stopping the fleet ...", flush=True)
            return 0
        finally:
            ignore_stops()  # (after Ctrl+C, or a process that exited: a SIGTERM now is the same stop)
            stop_fleet(fleet)
            clear_state(owner)
            print(
                f"fleet stopped: {len(fleet.popens)} processes, by pid; {state_file().name} removed.",
                flush=True,
            )
