"""The suite needs nothing of the learner's machine, and leaves nothing behind on it.

No learner's variable (FELAB_*, FIREWORKS_*, or their .env) reaches a test or a process it
starts (tests/conftest.py); a practice server a test started is stopped however the test
ends, even by pytest-timeout (felab/mock_server/launch.py). That no test needs port 8765 is
checked by running the suite while a learner's `make mock` holds it: see docs/architecture.md.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import KIT, run_make


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


def test_no_learners_variable_reaches_a_test_or_its_subprocesses(tmp_path: Path) -> None:
    kept = {"FELAB_RESULTS_DIR", "FELAB_ENV_FILE"}  # set by conftest: this test's folder, and no .env
    assert {k for k in os.environ if k.startswith(("FELAB_", "FIREWORKS_"))} == kept
    assert not Path(os.environ["FELAB_ENV_FILE"]).exists()
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; from felab import paths; print(sorted(os.environ), paths.ENV_FILE)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    names, env_file = child.stdout.rsplit(" ", 1)
    assert "FIREWORKS_" not in names and env_file.strip() == os.environ["FELAB_ENV_FILE"]


INNER_TEST = """
import time
from felab.mock_server.launch import practice_server
from felab.mock_server.serve import practice_server_pid

def test_hangs():
    with practice_server() as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with open({pid_file!r}, "w") as f:
            f.write(str(practice_server_pid("127.0.0.1", port)))
        time.sleep(60)  # pytest-timeout stops this test after 3 s
"""


def test_a_timed_out_test_leaves_no_practice_server(tmp_path: Path) -> None:
    # As `make test` runs: pytest-timeout's signal method (pyproject.toml), here with 3 s.
    pid_file = tmp_path / "pid"
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER_TEST.format(pid_file=str(pid_file))))
    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "--timeout", "3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert inner.returncode == 1 and "Timeout" in inner.stdout, inner.stdout + inner.stderr
    pid = int(pid_file.read_text())
    assert gone_within(pid, 5.0), f"the practice server (process {pid}) outlived its test"


def test_a_server_left_open_is_stopped_when_python_exits(tmp_path: Path) -> None:
    # The last resort: a `with` block that never ran its end (here: entered by hand, then exit).
    script = """
import sys
from felab.mock_server.launch import practice_server
from felab.mock_server.serve import practice_server_pid
block = practice_server()  # kept: a block dropped unreferenced would be closed at once
url = block.__enter__()
print(practice_server_pid("127.0.0.1", int(url.rsplit(":", 1)[1].split("/")[0])), flush=True)
sys.exit(0)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=90, cwd=KIT)
    assert out.returncode == 0, out.stderr
    assert gone_within(int(out.stdout.strip()), 5.0)


def test_pytest_timeout_uses_the_signal_method() -> None:
    # The thread method ends the process with os._exit: no `finally`, no atexit, servers left running.
    text = (KIT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'timeout_method = "signal"' in text


# ── make, run by a test, builds nothing in the checkout ──────────────────────


def test_through_make_command_no_target_installs_or_builds_a_venv() -> None:
    # `make -n` prints what make would run: with the stand-in .venv (conftest.make_command), each
    # target that installs on first use (the kit, or an extra) runs only its own command.
    for target in ("demo", "check", "replay", "numbers", "bundle", "fw-check", "calibrate", "engines",
                   "cluster", "test-load", "lint"):  # fmt: skip
        out = run_make(KIT, "-n", "--no-print-directory", target)
        assert out.returncode == 0, out.stderr
        assert "pip install" not in out.stdout and "-m venv" not in out.stdout, (target, out.stdout)


def make_literals(path: Path) -> list[int]:
    """The lines where a file writes a command line beginning with `make` (a list or tuple literal)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.List, ast.Tuple))
        and node.elts
        and isinstance(node.elts[0], ast.Constant)
        and node.elts[0].value == "make"
    ]


def test_every_test_that_runs_make_runs_it_through_make_command() -> None:
    # conftest.make_command adds PY=, VENV= and STAMP=; test_course_text.py types `make -n` in a
    # fresh clone of its own (never this checkout), as the course page's learner does.
    allowed = {"conftest.py", "test_course_text.py"}
    found = {
        str(path.relative_to(KIT)): lines
        for path in sorted((KIT / "tests").rglob("*.py"))
        if path.name not in allowed and (lines := make_literals(path))
    }
    assert not found, f"run make through conftest.make_command / run_make: {found}"
    assert make_literals(KIT / "tests" / "conftest.py")  # the scan sees a make command at all


def test_make_test_starts_no_cluster() -> None:
    # A test that starts a Dask LocalCluster is marked `load` (make test-load), which make test leaves out.
    unmarked = []
    for path in sorted((KIT / "tests").rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                marks = {ast.unparse(d) for d in node.decorator_list}
                calls = {
                    getattr(c.func, "attr", getattr(c.func, "id", ""))
                    for c in ast.walk(node)
                    if isinstance(c, ast.Call)
                }
                if "LocalCluster" in calls and "pytest.mark.load" not in marks:
                    unmarked.append(f"{path.name}::{node.name}")
    assert not unmarked, f"mark these @pytest.mark.load: {unmarked}"
    pyproject = (KIT / "pyproject.toml").read_text(encoding="utf-8")
    assert "-m 'not engines and not load and not routers'" in pyproject  # make test's pytest leaves them out
    makefile = (KIT / "Makefile").read_text(encoding="utf-8")
    assert "-m pytest -m load tests\n" in makefile  # make test-load runs every load test, wherever it is
