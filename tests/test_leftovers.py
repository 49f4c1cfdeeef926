"""The last learner leftovers of issue 32, each ending in what a learner expects: the warm-run note
names the server's own port, the replay's advice fits `make replay`, `make bundle-serve`'s build
does not tell the learner to run what is already running, and the first `make demo` says it is
installing. (`serve_llamacpp.sh --dry-run` without the binary: tests/engines/test_scripts.py;
`n/a` aligned: tests/test_replay_report.py.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import KIT, make_command, run_felab, run_make
from test_replay import session_trace

from felab.engine_families import practice
from felab.targets import NO_KEY, Target


def test_the_warm_run_note_on_another_port_restarts_that_port() -> None:
    moved = practice.forget_cache(Target("mock", "http://127.0.0.1:9123/v1", "m", NO_KEY, False))
    assert "http://127.0.0.1:9123/admin/reset" in moved and "--port 9123" in moved
    assert "make mock`" not in moved  # that would start one on 8765, not empty this one
    usual = practice.forget_cache(Target("mock", "http://127.0.0.1:8765/v1", "m", NO_KEY, False))
    assert "make mock`" in usual and "--port" not in usual


def broken_trace(tmp_path: Path) -> Path:
    path = session_trace(tmp_path, sessions=1, turns=3)
    path.write_text(path.read_text() + "broken\n")
    return path


def test_a_bad_lines_advice_is_a_flag_for_felab_replay(tmp_path: Path) -> None:
    out = run_felab("replay", str(broken_trace(tmp_path)))
    assert out.returncode == 2 and "add `--limit 3`" in out.stderr and "ARGS" not in out.stderr


def test_a_bad_lines_advice_goes_in_args_for_make_replay(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FELAB_MAKE_TARGET", "replay")  # what the Makefile's replay target exports
    monkeypatch.setenv("FELAB_CALLER_DIR", str(KIT))
    path = broken_trace(tmp_path)
    out = run_felab("replay", str(path))
    said = " ".join(out.stderr.split())
    assert out.returncode == 2
    assert f'`make replay TRACE={os.path.relpath(path, KIT)} ARGS="--limit 3"`' in said, said


def printed_env(target: str) -> list[str]:
    """What FELAB_MAKE_TARGET is in the recipes `make TARGET` runs (its prerequisites' too): with a
    PY that prints it and then does nothing, so nothing is built or served."""
    argv, env = make_command(KIT, "-s", "--no-print-directory", target)
    argv = [a for a in argv if not a.startswith("PY=")] + ["PY=printenv FELAB_MAKE_TARGET; true"]
    out = subprocess.run(argv, cwd=KIT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_the_makefile_tells_replay_and_bundle_serve_which_target_was_typed() -> None:
    assert printed_env("replay") == ["replay"]
    assert printed_env("bundle-serve") == ["bundle-serve", "bundle-serve"]  # the build, then the server
    assert printed_env("bundle") == []  # a build typed on its own: the usual advice


def test_bundle_serves_build_says_the_pages_are_served_next(tmp_path: Path) -> None:
    # A copy of the kit (the build writes build/ under the kit it runs from, not this checkout).
    kit = tmp_path / "kit"
    kit.mkdir()
    shutil.copy(KIT / "mkdocs.yml", kit)
    for folder in ("felab", "course", "docs", "lessons"):
        shutil.copytree(KIT / folder, kit / folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(kit), "FELAB_MAKE_TARGET": "bundle-serve"}
    env["FELAB_CALLER_DIR"] = str(kit)
    out = subprocess.run(
        [sys.executable, "-m", "felab", "bundle", "build"],
        cwd=kit, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "serving them next" in out.stdout and "make bundle-serve" not in out.stdout


def test_the_first_make_demo_says_it_is_installing_and_how_long_it_took(tmp_path: Path) -> None:
    # `make -n`: what make would run for a kit not installed yet (a .venv of nothing, in tmp_path).
    argv, env = make_command(KIT, "-n", "--no-print-directory", "demo")
    argv = [a for a in argv if not a.startswith(("VENV=", "STAMP=", "PY="))]
    argv += [f"VENV={tmp_path / 'venv'}", f"STAMP={tmp_path / 'venv' / '.installed'}"]
    out = subprocess.run(argv, cwd=KIT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    said = out.stdout
    assert "installing the kit into" in said and "about 35 s" in said
    assert "installed in" in said and "date +%s" in said  # measured, not assumed
    assert said.index("installing the kit into") < said.index("-m venv")
    assert run_make(KIT, "-n", "demo").stdout.count("installing") == 0  # installed: nothing said
