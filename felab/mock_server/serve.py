"""`python -m felab.mock_server`: the practice server's command line (flags, then uvicorn).

Every setting's flag is written from its one declaration in config.py (flags.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from felab.mock_server.config import DEFAULT_PORT, DEFAULTS, HEALTH_NAME, Settings
from felab.mock_server.faults import HideStreamCuts
from felab.mock_server.flags import server_options, to_settings, twin_help_option
from felab.mock_server.profile import (
    PROFILE_PATH,
    absent_tokenizer,
    profile_option,
    read_settings,
    warnings_of,
)
from felab.mock_server.tokens import TokenizerError, counter_for
from felab.mock_server.twin import Twin, from_context, learner_folder, named, reported

D = DEFAULTS


def port_is_free(host: str, port: int) -> bool:
    """Whether a server could listen on host:port now.

    Nothing may answer a connection there, and a bind must succeed with
    SO_REUSEADDR, as uvicorn binds: connections still closing from a server
    stopped a moment ago (TIME_WAIT, after Ctrl+C mid-stream) do not hold it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        if probe.connect_ex((host, port)) == 0:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def health_at(host: str, port: int) -> dict[str, Any]:
    """The practice server's GET /health on host:port, or {} if none answers there as one."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2.0) as reply:
            health = json.loads(reply.read())
    except (OSError, ValueError):
        return {}
    return health if isinstance(health, dict) and health.get("server") == HEALTH_NAME else {}


def practice_server_pid(host: str, port: int) -> int | None:
    """The process id of the practice server on host:port (its `GET /health` says), or None."""
    pid = health_at(host, port).get("pid")
    return pid if isinstance(pid, int) else None


def port_in_use(host: str, port: int, twin: Twin | None = None) -> str:
    """What holds host:port, and the command that stops only that (never a kill by name).

    A practice server there that is not the one asked for (the plain one while a twin was asked
    for, another twin, a twin while the plain one was asked for) is named as such, with the
    command that serves the one asked for on a free port. A worker of `make fleet` is named as
    one: stopping it stops the whole fleet."""
    health = health_at(host, port)
    pid, role = health.get("pid"), health.get("fleet_role")
    holder = reported(health.get("twin")) if health else None
    if isinstance(role, str):
        return (
            f"port {port} on {host} is in use: {role} of a fleet started with `make fleet` listens there "
            f"(process {pid}), and stopping it stops the whole fleet. `make fleet-stop` stops the fleet; "
            f"or serve this one on a free port: {elsewhere(host, twin)}."
        )
    if health and (holder.path if holder else None) != (twin.path if twin else None):
        return (
            f"port {port} on {host} is in use: a practice server already runs there (process {pid}), "
            f"but it is {named(holder)}, not {named(twin)} you asked for. Stop it first (Ctrl+C in its "
            f"terminal, or `kill {pid}`), then start this one again; or serve this one on a free port: "
            f"{elsewhere(host, twin)}."
        )
    if health:
        return (
            f"port {port} on {host} is in use: a practice server already runs there (process {pid}). "
            f"Use that one as it is, or stop it first (Ctrl+C in its terminal, or `kill {pid}`), "
            f"then start this one again."
        )
    return (
        f"port {port} on {host} is in use by another program, not a practice server: "
        f"`lsof -nP -iTCP:{port} -sTCP:LISTEN` names it (the PID column). Stop it, or start the "
        f"practice server on a free port: {elsewhere(host, twin)}."
    )


def elsewhere(host: str, twin: Twin | None) -> str:
    """The command that serves the server asked for on a free port, as the learner started it:
    `make mock PORT=N` when `make mock` started this one (the Makefile says so in
    FELAB_MAKE_TARGET; every folder of the kit forwards `make mock`), else this Python's command;
    and the address to give the scripts."""
    import os
    import sys

    from felab.mock_server.launch import free_port

    other = free_port()
    if os.environ.get("FELAB_MAKE_TARGET") == "mock":
        profile = f"PROFILE={twin.path_here()} " if twin else ""
        command = f"make mock {profile}PORT={other}"
    else:
        flags = f"{twin.profile_flag()} " if twin else ""
        python = os.path.relpath(sys.executable, learner_folder())  # the Python that runs this server
        command = f"{python} -m felab.mock_server {flags}--port {other}"
    return f"`{command}`, and pass `--base-url http://{host}:{other}/v1` to the lesson scripts"


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--host", default="127.0.0.1", show_default=True, help="address to listen on")
@click.option("--port", default=DEFAULT_PORT, show_default=True, help="port to listen on")
@profile_option()  # --profile FILE: a calibrated twin's settings as these flags' defaults
@server_options  # one flag per setting, written from its declaration in config.py
@twin_help_option  # --help-twin: the calibrated twin's settings, which --help leaves out
def main(host: str, port: int, **values: Any) -> None:
    """The practice server: an OpenAI-compatible server with a prefix cache, offline.

    \b
    Examples:
      python -m felab.mock_server
      python -m felab.mock_server --port 9000 --prefill-tps 1050
      python -m felab.mock_server --profile data/profiles/lesson-mac.toml
      python -m felab.mock_server --replicas 18 --route affinity --cache-ttl 60
      python -m felab.mock_server --fail-rate 0.1 --fail-types 429,cut --seed 7
      curl -X POST http://127.0.0.1:8765/admin/reset     # empty its cache
      curl http://127.0.0.1:8765/metrics                 # counters, with vLLM's names
    """
    import uvicorn

    from felab.mock_server.app import create_app
    from felab.mock_server.connections import QuietStop, uvicorn_config

    settings = to_settings(values)  # a bad flag is named first, whatever holds the port
    twin = from_context(click.get_current_context())  # --profile's twin, or None (twin.py)
    counts_tokens(settings, click.get_current_context().meta.get(PROFILE_PATH))
    if not port_is_free(host, port):
        raise click.ClickException(port_in_use(host, port, twin))
    serving = f"{twin.described()} · " if twin else ""
    print(
        "\n".join(banner(host, port, settings, click.get_current_context().meta.get(PROFILE_PATH), serving)),
        flush=True,
    )
    config = uvicorn_config(create_app(settings, twin), host, port, settings)  # with connections.py's limits
    logging.getLogger("uvicorn.error").addFilter(HideStreamCuts())  # after Config has set up logging
    logging.getLogger("uvicorn.error").addFilter(QuietStop())
    try:
        hung_up_too(uvicorn.Server(config)).run()
    except KeyboardInterrupt:  # uvicorn raises Ctrl+C again once it has stopped: the way to stop it
        print("practice server stopped (Ctrl+C)", flush=True)


def counts_tokens(settings: Settings, profile: object) -> None:
    """Read the tokenizer now: a file that is not one stops the start, in the profile's words
    where the tokenizer is the profile's (`profile`: its path, or None)."""
    try:
        counter_for(settings)
    except TokenizerError as exc:
        said = None
        if isinstance(profile, Path):  # (a --tokenizer typed beside it wins: then its own words)
            kept = read_settings(profile)
            said = absent_tokenizer(profile, kept) if kept.get("tokenizer") == settings.tokenizer else None
        raise click.ClickException(said or str(exc)) from None


def hung_up_too(server: Any) -> Any:
    """The uvicorn server, stopped by SIGHUP (its terminal closed) as by Ctrl+C and SIGTERM: the
    streams under way end and the port is let go, where SIGHUP's default ends the process at once.
    (uvicorn catches SIGINT and SIGTERM itself; SIGHUP is taken only where it is at its default, so
    `nohup make mock` keeps serving.)"""
    catch = server.capture_signals

    @contextlib.contextmanager
    def capture_signals() -> Iterator[None]:
        taken = threading.current_thread() is threading.main_thread()
        taken = taken and signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
        if taken:
            signal.signal(signal.SIGHUP, server.handle_exit)
        try:
            with catch():
                yield
        finally:
            if taken:
                signal.signal(signal.SIGHUP, signal.SIG_DFL)

    server.capture_signals = capture_signals
    return server


def banner(
    host: str, port: int, settings: Settings, profile: Path | None = None, serving: str = ""
) -> list[str]:
    """What the server says as it starts: where it listens, which twin it is (`serving`: twin.py)
    and what it models, then, for a twin, the doubts calibrate wrote into its profile (`[fit]
    warnings`): numbers from a doubtful fit must not pass for a good one's."""
    lines = [
        f"practice server listening on http://{host}:{port}/v1 · {serving}{describe(settings)} · "
        f"Ctrl+C stops it"
    ]
    if profile is not None:
        said = f"WARNING (from the profile {profile.name}, when it was made)"
        lines += [f"{said}: {warning}" for warning in warnings_of(profile)]
    return lines


def describe(s: Settings) -> str:
    """The settings a learner should know about, in one line."""
    words = [f"model {s.model}", f"prefill {s.prefill_tps:g} tok/s", f"decode {s.decode_tps:g} tok/s"]
    if s.block_tokens != D.block_tokens:
        words.append(f"{s.block_tokens}-token cache blocks")
    if s.replicas > 1:
        words.append(f"{s.replicas} replicas, route {s.route}")
    if s.seats is not None:  # llama.cpp's split: the learner should see each seat's context
        seats = f"{s.seats} seat{'s' if s.seats > 1 else ''}"
        words.append(f"{seats} of {s.context_tokens // s.seats:,} tokens ({s.cache_mode} cache)")
    if s.cache_ttl_s:
        words.append(f"cache TTL {s.cache_ttl_s:g} s")
    if s.tokenizer is not None or s.chars_per_token != D.chars_per_token:
        words.append(f"tokens counted with {counter_for(s).name}")
    if s.fail_rate:
        words.append(f"failing {s.fail_rate:.0%} ({', '.join(s.fail_types)}, seed {s.seed})")
    return " · ".join(words)
