"""The lesson server scripts without any engine: help, the commands they build, and their
message when the engine is missing. Fast and offline, so they run in `make test`.

Ollama cannot run on this kind of machine (no package here), so its script is also run
against a stand-in `ollama` that serves /api/version and records `pull`.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import LESSON02, LESSON06, free_port, run_bash, serving

SCRIPTS = [
    LESSON02 / "serve_llamacpp.sh",
    LESSON02 / "serve_mlx.sh",
    LESSON02 / "serve_ollama.sh",
    LESSON06 / "mlx_prompt_cache.sh",
]


PYTHON_ONLY: list[Path] = []  # a folder holding just `python3`, made per test by the fixture below


@pytest.fixture(autouse=True)
def python_only(tmp_path: Path) -> None:
    """This test's Python as `python3` (the scripts use it), without the kit's .venv/bin."""
    folder = tmp_path / "python-only"
    folder.mkdir()
    (folder / "python3").symlink_to(sys.executable)
    PYTHON_ONLY[:] = [folder]


def bare_env(**extra: str) -> dict[str, str]:
    """An environment where no engine is on PATH: python3 and the system's own tools."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA", "MLX_", "OLLAMA"))}
    env["PATH"] = f"{PYTHON_ONLY[0]}:/usr/bin:/bin"
    env.update(extra)
    return env


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help(script: Path) -> None:
    r = run_bash(script, "--help", env=bare_env())
    assert r.returncode == 0
    assert r.stdout.startswith("Lesson 0")
    assert "#" not in r.stdout.splitlines()[0]


def test_llamacpp_missing_says_how_to_get_it(tmp_path: Path) -> None:
    # a copy in a kit of its own, so a llama-server built into this kit's .tools/ is not found
    lesson = tmp_path / "lessons" / "02-three-local-servers"
    lesson.mkdir(parents=True)
    for name in ("serve_llamacpp.sh", "_serve_common.sh"):  # the script and the file it sources
        shutil.copy(LESSON02 / name, lesson)
    r = run_bash(lesson / "serve_llamacpp.sh", env=bare_env())
    assert r.returncode == 127
    # make's command is written for the folder the script ran from (the lesson's)
    for how in ("brew install llama.cpp", "apt install llama.cpp", "make -C ../.. llama-server"):
        assert how in r.stderr


def test_llamacpp_command_defaults_and_seats(tmp_path: Path) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho '  -kvu, --kv-unified, -no-kvu, --no-kv-unified'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    r = run_bash(LESSON02 / "serve_llamacpp.sh", "--dry-run", env=bare_env(LLAMA_SERVER=str(fake)))
    assert r.returncode == 0, r.stderr
    assert "8192 tokens of context over 4 seats = 2048 tokens per seat" in r.stdout
    cmd = r.stdout.splitlines()[-1].split()
    assert cmd[cmd.index("-hf") + 1] == "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF:Q4_K_M"
    assert cmd[cmd.index("-c") + 1] == "8192" and cmd[cmd.index("-np") + 1] == "4"
    assert "--no-kv-unified" in cmd
    assert cmd[cmd.index("--port") + 1] == "8080"

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    r = run_bash(
        LESSON02 / "serve_llamacpp.sh",
        "--dry-run",
        "Q8_0",
        "16384",
        "4",
        env=bare_env(LLAMA_SERVER=str(fake), LLAMACPP_MODEL=str(model), LLAMACPP_PORT="9090"),
    )
    assert "4096 tokens per seat" in r.stdout
    cmd = r.stdout.splitlines()[-1].split()
    assert cmd[cmd.index("-m") + 1] == str(model) and "-hf" not in cmd
    assert cmd[cmd.index("--port") + 1] == "9090"


def test_llamacpp_rejects_bad_numbers() -> None:
    r = run_bash(LESSON02 / "serve_llamacpp.sh", "Q4_K_M", "lots", env=bare_env(LLAMA_SERVER="/bin/true"))
    assert r.returncode == 2 and "'lots' is not a whole number" in r.stderr


def kit_copy(tmp_path: Path, *files: Path) -> Path:
    """A kit of its own in tmp_path holding copies of lesson files (and no .venv), so that
    what this kit's .venv has installed does not change what the scripts find."""
    for f in files:
        lesson = tmp_path / "kit" / "lessons" / f.parent.name
        lesson.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, lesson)
    return tmp_path / "kit"


def test_mlx_missing_says_make_engines_from_here(tmp_path: Path) -> None:
    kit = kit_copy(tmp_path, LESSON02 / "serve_mlx.sh", LESSON02 / "_serve_common.sh")
    r = run_bash(kit / "lessons" / LESSON02.name / "serve_mlx.sh", env=bare_env())
    assert r.returncode == 127 and "make -C ../.. engines" in r.stderr
    r = run_bash(kit / "lessons" / LESSON02.name / "serve_mlx.sh", env=bare_env(), cwd=kit)
    assert r.returncode == 127 and "make engines" in r.stderr

    kit = kit_copy(tmp_path, LESSON06 / "mlx_prompt_cache.sh")
    r = run_bash(kit / "lessons" / LESSON06.name / "mlx_prompt_cache.sh", env=bare_env())
    assert r.returncode == 127 and "mlx_lm.generate: command not found" in r.stderr
    assert "make -C ../.. engines" in r.stderr and "bash mlx_prompt_cache.sh" in r.stderr


def another_venv(tmp_path: Path) -> Path:
    """The bin folder of another environment: MLX's commands (stand-ins that print what
    mlx_lm prints) and a python3 that does not have the kit."""
    bin_dir = tmp_path / "other-venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("mlx_lm.generate", "mlx_lm.cache_prompt"):
        (bin_dir / tool).write_text("#!/bin/sh\necho 'Prompt: 12 tokens'\n")
        (bin_dir / tool).chmod(0o755)
    bare = tmp_path / "bare-python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    (bin_dir / "python3").symlink_to(bare / "bin" / "python3")
    return bin_dir


def test_mlx_prompt_cache_uses_the_kits_python_with_another_venv_active(tmp_path: Path) -> None:
    kit = kit_copy(tmp_path, LESSON06 / "mlx_prompt_cache.sh", LESSON06 / "prefix_bench.py")
    (kit / ".venv" / "bin").mkdir(parents=True)
    kit_python = kit / ".venv" / "bin" / "python"  # the kit's Python: this test's, which has felab
    kit_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    kit_python.chmod(0o755)
    other = another_venv(tmp_path)
    env = bare_env(VIRTUAL_ENV=str(other.parent))
    env["PATH"] = f"{other}:/usr/bin:/bin"
    lesson = kit / "lessons" / LESSON06.name
    r = run_bash(lesson / "mlx_prompt_cache.sh", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert (lesson / "preamble.txt").read_text().startswith("You are the support agent")


def test_mlx_prompt_cache_without_the_kits_environment_says_make_setup(tmp_path: Path) -> None:
    kit = kit_copy(tmp_path, LESSON06 / "mlx_prompt_cache.sh", LESSON06 / "prefix_bench.py")
    other = another_venv(tmp_path)
    env = bare_env(VIRTUAL_ENV=str(other.parent))
    env["PATH"] = f"{other}:/usr/bin:/bin"
    lesson = kit / "lessons" / LESSON06.name
    r = run_bash(lesson / "mlx_prompt_cache.sh", env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    said = " ".join(r.stderr.split())
    assert "Create it with: make -C ../.. setup" in said and "bash mlx_prompt_cache.sh" in said
    assert not (lesson / "preamble.txt").exists() and not (lesson / "preamble.txt.part").exists()


def test_mlx_server_command(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mlx_lm.server").write_text("#!/bin/sh\n")
    (bin_dir / "mlx_lm.server").chmod(0o755)
    hub = tmp_path / "hub"
    env = bare_env(HF_HUB_CACHE=str(hub))
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    r = run_bash(LESSON02 / "serve_mlx.sh", "--dry-run", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1].split() == [
        "mlx_lm.server",
        "--model",
        "mlx-community/Meta-Llama-3.1-8B-Instruct-4bit",
        "--host",
        "127.0.0.1",
        "--port",
        "8081",
    ]
    assert hub.is_dir(), "GET /v1/models needs the hub cache folder to exist"


def test_ollama_missing_says_how_to_get_it() -> None:
    r = run_bash(LESSON02 / "serve_ollama.sh", env=bare_env())
    assert r.returncode == 127 and "brew install ollama" in r.stderr


def test_ollama_command(tmp_path: Path) -> None:
    r = run_bash(LESSON02 / "serve_ollama.sh", "--dry-run", env=bare_env(OLLAMA_BIN="/bin/true"))
    assert r.returncode == 0, r.stderr
    serve, pull = r.stdout.splitlines()[-2:]
    assert "OLLAMA_CONTEXT_LENGTH=8192" in serve and "OLLAMA_NUM_PARALLEL=4" in serve
    assert serve.endswith("serve") and "OLLAMA_HOST=127.0.0.1:11434" in serve
    assert pull.endswith("pull llama3.1:8b")


def test_ollama_flow_with_a_stand_in(tmp_path: Path) -> None:
    """serve in the foreground, wait for /api/version, pull the model, say it listens."""
    site = tmp_path / "site"
    (site / "api").mkdir(parents=True)
    (site / "api" / "version").write_text('{"version": "stand-in"}')
    fake = tmp_path / "ollama"
    fake.write_text(
        "#!/bin/bash\n"
        f'if [ "$1" = serve ]; then echo "env: $OLLAMA_CONTEXT_LENGTH $OLLAMA_NUM_PARALLEL"; '
        f'exec python3 -m http.server "${{OLLAMA_HOST##*:}}" --bind 127.0.0.1 --directory {site}; fi\n'
        f'if [ "$1" = pull ]; then echo "pulled $2" >> {tmp_path}/pulls; fi\n'
    )
    fake.chmod(0o755)
    port = free_port()
    env = bare_env(OLLAMA_BIN=str(fake), OLLAMA_PORT=str(port))
    with serving(
        LESSON02 / "serve_ollama.sh", "qwen3:4b", "16384", "2", env=env, ready="is listening", timeout=30
    ) as log:
        assert any("env: 16384 2" in line for line in log)
        assert any(f"http://127.0.0.1:{port}/v1 (model: qwen3:4b)" in line for line in log)
        assert (tmp_path / "pulls").read_text() == "pulled qwen3:4b\n"
        # a second run finds it already up, pulls again, and leaves it alone
        r = run_bash(LESSON02 / "serve_ollama.sh", "qwen3:4b", env=env, timeout=30)
        assert r.returncode == 0 and "already runs" in r.stdout
