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

from felab.paths import KIT_ROOT

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


def local_model(tmp_path: Path) -> Path:
    """A local model folder (MLX_MODEL), so the script needs no download and asks no network."""
    folder = tmp_path / "local-model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_mlx_prompt_cache_uses_the_kits_python_with_another_venv_active(tmp_path: Path) -> None:
    kit = kit_copy(tmp_path, LESSON06 / "mlx_prompt_cache.sh", LESSON06 / "prefix_bench.py")
    (kit / ".venv" / "bin").mkdir(parents=True)
    kit_python = kit / ".venv" / "bin" / "python"  # the kit's Python: this test's, which has felab
    kit_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    kit_python.chmod(0o755)
    other = another_venv(tmp_path)
    env = bare_env(VIRTUAL_ENV=str(other.parent), MLX_MODEL=str(local_model(tmp_path)))
    env["PATH"] = f"{other}:/usr/bin:/bin"
    lesson = kit / "lessons" / LESSON06.name
    r = run_bash(lesson / "mlx_prompt_cache.sh", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert (lesson / "preamble.txt").read_text().startswith("You are the support agent")


def test_mlx_prompt_cache_without_the_kits_environment_says_make_setup(tmp_path: Path) -> None:
    kit = kit_copy(tmp_path, LESSON06 / "mlx_prompt_cache.sh", LESSON06 / "prefix_bench.py")
    other = another_venv(tmp_path)
    env = bare_env(VIRTUAL_ENV=str(other.parent), MLX_MODEL=str(local_model(tmp_path)))
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


# ── issue 20: arguments checked before anything starts; offline MLX; the build's progress ──


@pytest.mark.parametrize(
    ("script", "args", "said", "advised"),
    [
        ("serve_llamacpp.sh", ["16384", "4"], "'16384' is not the quantisation", ["Q4_K_M", "16384", "4"]),
        ("serve_llamacpp.sh", ["Q4_K_M", "4"], "CTX 4 shared by 4 seats gives 1 tokens per seat", None),
        ("serve_llamacpp.sh", ["Q4_K_M", "16384", "4", "2"], "takes at most 3 values, not 4", None),
        ("serve_ollama.sh", ["8192", "4"], "'8192' is not the model", ["llama3.1:8b", "8192", "4"]),
        ("serve_ollama.sh", ["llama3.1:8b", "64"], "CTX 64 (Ollama's is per seat) gives 64 tokens", None),
    ],
)
def test_serve_scripts_check_their_arguments_before_starting_anything(
    tmp_path: Path, script: str, args: list[str], said: str, advised: list[str] | None
) -> None:
    """`serve_llamacpp.sh 16384 4` (the quantisation forgotten) once started llama-server with 4
    tokens of context. Now it stops before starting anything, and the command it names works."""
    started = tmp_path / "started"
    engine = tmp_path / "engine"  # a stand-in that notes it was started, and answers --help
    engine.write_text(f'#!/bin/sh\n[ "$1" = --help ] && exit 0\ntouch {started}\n')
    engine.chmod(0o755)
    env = bare_env(LLAMA_SERVER=str(engine), OLLAMA_BIN=str(engine))
    r = run_bash(LESSON02 / script, *args, env=env, cwd=LESSON06)
    assert r.returncode == 2 and said in r.stderr, r.stderr
    assert not started.exists() and "Traceback" not in r.stderr
    if advised:
        command = r.stderr.split("With it first: ")[1].split()
        assert command[2:] == advised
        followed = subprocess.run(
            [*command, "--dry-run"], cwd=LESSON06, env=env, capture_output=True, text=True, timeout=60
        )
        assert followed.returncode == 0, followed.stderr  # as printed, from the folder it ran in
        assert not started.exists()


def test_mlx_prompt_cache_offline_names_the_tiny_model(tmp_path: Path) -> None:
    """Offline after `make engines`, with the default hub model never downloaded: a paragraph
    naming the kit's tiny model instead of mlx_lm's download traceback; its command works."""
    kit = kit_copy(tmp_path, LESSON06 / "mlx_prompt_cache.sh", LESSON06 / "prefix_bench.py")
    (kit / ".venv" / "bin").mkdir(parents=True)
    kit_python = kit / ".venv" / "bin" / "python"
    kit_python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    kit_python.chmod(0o755)
    tools = another_venv(tmp_path)  # stand-ins for mlx_lm.generate and mlx_lm.cache_prompt
    closed = free_port()  # nothing listens there: the hub does not answer, at once
    env = bare_env(HF_HUB_CACHE=str(tmp_path / "empty-hub"), HF_ENDPOINT=f"http://127.0.0.1:{closed}")
    env["PATH"] = f"{tools}:/usr/bin:/bin"
    lesson = kit / "lessons" / LESSON06.name
    r = run_bash(lesson / "mlx_prompt_cache.sh", env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    said = r.stderr
    assert "cannot get the model mlx-community/Meta-Llama-3.1-8B-Instruct-4bit" in said
    assert "make -C ../.. tiny-model" in said  # not written yet: how to write it, from this folder
    run_line = next(line for line in said.splitlines() if "MLX_MODEL=" in line).split("then run:")[-1]
    assignment, *command = run_line.split()
    assert assignment == "MLX_MODEL=../../.tools/tiny-model/hf" and command == ["bash", "mlx_prompt_cache.sh"]

    tiny = kit / ".tools" / "tiny-model" / "hf"  # as `make tiny-model` writes it (its layout only)
    tiny.mkdir(parents=True)
    (tiny / "config.json").write_text("{}")
    again = run_bash(lesson / "mlx_prompt_cache.sh", env=env)
    assert "make -C ../.. tiny-model" not in again.stderr  # written: only the command to run
    followed = subprocess.run(
        command,
        cwd=lesson,
        env={**env, "MLX_MODEL": assignment.split("=", 1)[1]},
        capture_output=True,
        text=True,
    )
    assert followed.returncode == 0, followed.stderr
    assert f"model: {tiny}" in followed.stdout


def test_llama_server_build_shows_its_progress(tmp_path: Path) -> None:
    """`make llama-server` took 6 to 20 minutes with 4 lines of output: now a line per tenth done.
    Run with stand-ins for cmake and c++ on a copy of the script (its .tools/ in tmp_path)."""
    scripts = tmp_path / "kit" / "scripts"
    scripts.mkdir(parents=True)
    shutil.copy(KIT_ROOT / "scripts" / "build_llama_server.sh", scripts)
    src = tmp_path / "llama.cpp"
    (src / "tools" / "server").mkdir(parents=True)
    (src / "tools" / "server" / "server.cpp").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "c++").write_text("#!/bin/sh\n")
    (bin_dir / "cmake").write_text(  # configure: nothing; build: Ninja's step lines, then the binary
        "#!/bin/bash\n"
        'if [ "$1" = --build ]; then\n'
        '  for i in $(seq 1 40); do echo "[$i/40] Building CXX object step$i.o"; done\n'
        '  mkdir -p "$2/bin" && printf "#!/bin/sh\\necho version: 1\\n" > "$2/bin/llama-server"\n'
        '  chmod +x "$2/bin/llama-server"\n'
        "fi\n"
    )
    for tool in ("c++", "cmake"):
        (bin_dir / tool).chmod(0o755)
    env = bare_env(LLAMA_CPP_SRC=str(src))
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    r = run_bash(scripts / "build_llama_server.sh", env=env, cwd=tmp_path / "kit")
    assert r.returncode == 0, r.stderr
    steps = [line.split()[0] for line in r.stdout.splitlines() if "% built" in line]
    assert steps == [f"{p}%" for p in range(10, 101, 10)], r.stdout
    assert "Building CXX" not in r.stdout  # each step is in the log, not on the screen
    assert (tmp_path / "kit" / ".tools" / "llama-server-build.log").read_text().count("Building CXX") == 40
    assert (tmp_path / "kit" / ".tools" / "bin" / "llama-server").is_file()


def test_mlx_prompt_cache_online_goes_on_to_mlx(tmp_path: Path) -> None:
    """Any HTTP answer from the hub (a 404, a gated repo's 401) means online: no offline paragraph."""
    import http.server
    import threading

    hub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)  # 501 to all
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        kit = kit_copy(tmp_path, LESSON06 / "mlx_prompt_cache.sh", LESSON06 / "prefix_bench.py")
        (kit / ".venv" / "bin").mkdir(parents=True)
        (kit / ".venv" / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (kit / ".venv" / "bin" / "python").chmod(0o755)
        env = bare_env(
            HF_HUB_CACHE=str(tmp_path / "empty-hub"), HF_ENDPOINT=f"http://127.0.0.1:{hub.server_port}"
        )
        env["PATH"] = f"{another_venv(tmp_path)}:/usr/bin:/bin"
        r = run_bash(kit / "lessons" / LESSON06.name / "mlx_prompt_cache.sh", env=env)
        assert r.returncode == 0 and "cannot get the model" not in r.stderr, r.stderr
    finally:
        hub.shutdown()


def test_llamacpp_dry_run_without_the_binary_shows_the_command(tmp_path: Path) -> None:
    # A learner checking the command before installing llama.cpp: exit 0 and the command, not 127.
    lesson = tmp_path / "lessons" / "02-three-local-servers"
    lesson.mkdir(parents=True)
    for name in ("serve_llamacpp.sh", "_serve_common.sh"):  # a kit of its own: no .tools/bin here
        shutil.copy(LESSON02 / name, lesson)
    r = run_bash(lesson / "serve_llamacpp.sh", "Q4_K_M", "16384", "4", "--dry-run", env=bare_env())
    assert r.returncode == 0, r.stderr
    assert "llama-server -hf" in r.stdout and "-c 16384 -np 4" in r.stdout and "--port 8080" in r.stdout
    assert "not installed yet" in r.stderr
