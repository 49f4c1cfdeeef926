"""`make bench`'s calibrate phase: calibrate a server, then check its twin, and print the report card.

    python -m felab.bench.calibrate            # a practice server with known settings; then llama.cpp
    python -m felab.bench.calibrate --quick    # the same at a tiny size (fewer rounds, short seats)

Two servers, each calibrated and then checked (`felab calibrate`, then `--check`):

1. A practice server started with known settings, llama.cpp-like (`KNOWN`, with both context
   terms nonzero). It is always at hand and its timing is exact, so what the fit gives back,
   printed next to what it was started with, is calibrate's own error on this machine.
2. The real llama-server the kit builds (`make llama-server`, `.tools/bin/llama-server`) with
   the tiny model (`make tiny-model`), 4 seats of 8,192 tokens, one thread, as in the runs of
   docs/runs/2026-12-01-calibrate-llamacpp.md: left out, with one line saying so, when either
   is missing.

It prints tables; it asserts nothing about timing (a shared machine's noise is what it shows).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tabulate import tabulate

from felab.calibrate import check as card
from felab.calibrate import command
from felab.connect import served_model
from felab.errors import FelabError
from felab.mock_server.launch import free_port, practice_server
from felab.mock_server.profile import read_settings
from felab.paths import KIT_ROOT
from felab.targets import NO_KEY, Target

KNOWN: dict[str, Any] = {
    "overhead_ms": 5.0,
    "prefill_tps": 30_000.0,
    "prefill_attention_ns": 20.0,
    "cached_token_us": 3.0,
    "ubatch_tokens": 512,
    "tile_tokens": 64,
    "untiled_ns": 600.0,
    "decode_tps": 2000.0,
    "decode_context_ns": 500.0,
    "seats": 4,
    "cache_mode": "seat-prefix",
    "block_tokens": 16,
    "context_tokens": 32_768,
}
"""The practice server's settings: llama.cpp with the tiny model, roughly, as measured here."""
QUICK_CONTEXT = 4 * 2_000
"""--quick: seats of 2,000 tokens, so calibrate's longest probe is about 1,900 tokens."""
LLAMA_SERVER = KIT_ROOT / ".tools" / "bin" / "llama-server"
TINY_MODEL = KIT_ROOT / ".tools" / "tiny-model" / "tiny-model.gguf"
SERVE_LLAMACPP = KIT_ROOT / "lessons" / "02-three-local-servers" / "serve_llamacpp.sh"


def load() -> str:
    """The machine's load average (1, 5, 15 minutes): the context every figure here needs."""
    with contextlib.suppress(OSError):
        return ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return "unknown"


def run(target: Target, folder: Path, rounds: int) -> Path:
    """Calibrate `target`, check its twin; the profile written."""
    profile = folder / f"{target.name}.toml"
    t0 = time.monotonic()
    command.calibrate(target, profile, max_requests=200, yes=True)
    print(f"calibrated in {time.monotonic() - t0:.0f} s (load average {load()})\n")
    settings = read_settings(profile)
    command.check(target, profile, settings, 200, True, folder / f"{target.name}-check.png", rounds)
    print(f"(load average {load()})")
    return profile


def known(quick: bool) -> dict[str, Any]:
    """The practice server's settings (--quick: short seats)."""
    return KNOWN | ({"context_tokens": QUICK_CONTEXT} if quick else {})


def known_flags(settings: dict[str, Any]) -> list[str]:
    return [f"--{k.replace('_', '-')}={v:g}" if isinstance(v, float) else f"--{k.replace('_', '-')}={v}"
            for k, v in settings.items()]  # fmt: skip


def practice_phase(folder: Path, quick: bool, rounds: int) -> None:
    """Calibrate a practice server with known settings; what it was started with against what came back."""
    print(f"== calibrate: a practice server with known settings (load average {load()}) ==")
    started = known(quick)
    with practice_server(*known_flags(started)) as url:
        target = Target("mock", url, "", NO_KEY, False)
        target = Target("mock", url, served_model(target), NO_KEY, False)
        profile = run(target, folder, rounds)
    got = read_settings(profile)
    rows = [{"setting": k, "started with": v, "calibrate found": got.get(k, "-")} for k, v in started.items()]
    print("\n" + tabulate(rows, headers="keys", disable_numparse=True) + "\n")


@contextlib.contextmanager
def llama_server() -> Iterator[str]:
    """The kit's llama-server with the tiny model (the lesson's script: 4 seats of 8,192, one thread)."""
    port = free_port()
    env = dict(os.environ, LLAMA_SERVER=str(LLAMA_SERVER), LLAMACPP_MODEL=str(TINY_MODEL))
    env |= {"LLAMACPP_PORT": str(port), "LLAMACPP_ARGS": "-t 1"}
    argv = ["bash", str(SERVE_LLAMACPP), "Q4_K_M", "32768", "4"]
    with engine_process(argv, f"http://127.0.0.1:{port}/health", "llama-server", SERVE_LLAMACPP.parent, env):
        yield f"http://127.0.0.1:{port}/v1"


@contextlib.contextmanager
def engine_process(
    argv: list[str],
    health: str,
    name: str,
    cwd: Path = KIT_ROOT,
    env: dict[str, str] | None = None,
    timeout_s: float = 120,
) -> Iterator[None]:
    """A real server in its own process group, ready once `health` answers 200, and stopped whole,
    by its group's id, when done."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: stopped whole, by its id
    )
    try:
        wait_healthy(health, proc, name, timeout_s)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def wait_healthy(url: str, proc: subprocess.Popen, name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FelabError(f"{name} stopped before it was ready (exit {proc.returncode})")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as reply:
            if reply.status == 200:
                return
        time.sleep(0.5)
    raise FelabError(f"{name} was not ready within {timeout_s:.0f} s")


def llamacpp_phase(folder: Path, rounds: int) -> None:
    """Calibrate the kit's real llama-server and check its twin, when it is built."""
    missing = [str(p.relative_to(KIT_ROOT)) for p in (LLAMA_SERVER, TINY_MODEL) if not p.exists()]
    if missing:
        print(
            f"== calibrate: llama.cpp left out: no {' or '.join(missing)} (make llama-server tiny-model) =="
        )
        return
    print(f"== calibrate: llama.cpp with the tiny model (load average {load()}) ==")
    try:
        with llama_server() as url:
            run(Target("llamacpp", url, str(TINY_MODEL), NO_KEY, False), folder, rounds)
    except FelabError as exc:
        print(f"llama.cpp left out: {exc.message}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny size: 2 rounds, seats of 2,000 tokens")
    parser.add_argument("--practice-only", action="store_true", help="leave llama.cpp out")
    args = parser.parse_args(argv)
    rounds = 2 if args.quick else card.ROUNDS
    with tempfile.TemporaryDirectory(prefix="felab-calibrate-bench-") as tmp:
        practice_phase(Path(tmp), args.quick, rounds)
        if not args.practice_only:
            llamacpp_phase(Path(tmp), rounds)


if __name__ == "__main__":
    main()
