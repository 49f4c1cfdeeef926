"""Fixtures for the real-engine tests: the tiny model, the engines, their servers.

Tests marked `engines` run real llama.cpp and MLX against the tiny model
(`make test-engines`); each skips with a one-line reason when its engine is not
installed. The unmarked tests here check the lesson scripts without any engine
(their --help, --dry-run and "not installed" messages) and run in `make test`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from felab.paths import KIT_ROOT

LESSON02 = KIT_ROOT / "lessons" / "02-three-local-servers"
LESSON06 = KIT_ROOT / "lessons" / "06-prefix-caching"
PREFIX_BENCH = LESSON06 / "prefix_bench.py"
VENV_BIN = Path(sys.executable).parent


def script_env(**extra: str) -> dict[str, str]:
    """This test's environment, with the kit's Python (and its mlx_lm.*) first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def run_bash(
    script: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args],
        cwd=cwd or script.parent,
        env=env or script_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ── engines: found, or the test skips with one line ───────────────────────────
def find_llama_server() -> str | None:
    """LLAMA_SERVER, else llama-server on PATH, else <kit>/.tools/bin/llama-server."""
    named = os.environ.get("LLAMA_SERVER")
    if named:
        return named if os.access(named, os.X_OK) else None
    on_path = shutil.which("llama-server")
    if on_path:
        return on_path
    built = KIT_ROOT / ".tools" / "bin" / "llama-server"
    return str(built) if os.access(built, os.X_OK) else None


@pytest.fixture(scope="session")
def llama_server() -> str:
    found = find_llama_server()
    if not found:
        pytest.skip(
            "llama-server not installed (make llama-server, brew install llama.cpp, or set LLAMA_SERVER)"
        )
    return found


@pytest.fixture(scope="session")
def mlx_ready() -> None:
    if not (VENV_BIN / "mlx_lm.generate").exists() and not shutil.which("mlx_lm.generate"):
        pytest.skip("mlx_lm not installed (make engines installs mlx[cpu] and mlx-lm)")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, made once per session: DIR/hf and DIR/tiny-model.gguf."""
    for module in ("gguf", "tokenizers", "safetensors", "numpy"):
        pytest.importorskip(
            module, reason=f"{module} not installed (make engines installs the engines extra)"
        )
    from felab.tiny_model.build import make_tiny_model

    out = tmp_path_factory.mktemp("tiny-model")
    make_tiny_model(out)
    return out


# ── a lesson server script, run as a learner does ─────────────────────────────
@contextmanager
def serving(
    script: Path, *args: str, env: dict[str, str], ready: str, timeout: float = 120
) -> Iterator[list[str]]:
    """Run a serve_*.sh in the background until it prints `ready`; yield its output lines so far.

    The script runs in its own process group, and the whole group is stopped at the end.
    """
    proc = subprocess.Popen(
        ["bash", str(script), *args],
        cwd=script.parent,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                if proc.poll() is not None:
                    raise AssertionError(
                        f"{script.name} exited ({proc.returncode}) early:\n" + "".join(lines)
                    )
                continue
            lines.append(line)
            if ready in line:
                break
        else:
            raise AssertionError(
                f"{script.name} did not say {ready!r} within {timeout} s:\n" + "".join(lines)
            )
        # keep reading in the background so the server never blocks on a full pipe
        import threading

        threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
        yield lines
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()


def prefix_bench(
    base_url: str, target: str, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run lesson 06's prefix_bench.py from its folder against one server."""
    return subprocess.run(
        [sys.executable, str(PREFIX_BENCH), "--target", target, "--base-url", base_url, *args],
        cwd=LESSON06,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def last_record(results_dir: Path) -> dict:
    """The last line prefix_bench.py appended to results/06-prefix.jsonl."""
    lines = (results_dir / "06-prefix.jsonl").read_text().splitlines()
    return json.loads(lines[-1])
