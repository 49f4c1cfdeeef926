"""The course page's commands, typed literally where the page says, in 03-labs/ of a fresh clone
(issue 20): `cd lessons/06-prefix-caching`, `source .venv/bin/activate`, a key in `03-labs/.env`,
`bash ../02-three-local-servers/serve_llamacpp.sh`, `make fw-check` in the lesson's folder.

03-labs/ holds links to the kit's lessons/, .venv and .env (committed in git), so the lab book's
folder is the kit's, whichever way a path reaches it. The commands come from a checked-in list
(tests/course_commands.py), checked against the page itself when the course's text is there.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from course_commands import COMMANDS, LABS, LESSON, SEED, SENTENCES, PageCommand

from felab.course.lessons import discover
from felab.mock_server.launch import practice_server
from felab.paths import KIT_ROOT, LAB_ENV_FILE

LINKS = {
    "lessons": "../lessons",
    ".venv": "../.venv",
    ".env": "../.env",
    ".env.example": "../.env.example",
    "results": "../results",  # what the twin's commands name (issue 29)
    "data": "../data",
    "felab": "../felab",  # `python3 -m felab` there, without the kit's environment, says what to do
}


def seed_file() -> Path | None:
    """The course page's text: shared/seeds/ beside the kit (../shared), or one folder further
    up (a worktree of the kit), or $COURSE_SEEDS_DIR."""
    places = [os.environ.get("COURSE_SEEDS_DIR", ""), KIT_ROOT.parent / "shared" / "seeds"]
    places.append(KIT_ROOT.parent.parent / "shared" / "seeds")
    return next((Path(p) / SEED for p in places if p and (Path(p) / SEED).is_file()), None)


# ── the links, in git and on disk ─────────────────────────────────────────────


def test_03_labs_links_to_the_kits_lessons_venv_and_env() -> None:
    if not (KIT_ROOT / ".git").exists():
        pytest.skip("not a git checkout: what git commits cannot be checked")
    labs = KIT_ROOT / "03-labs"
    for name, target in LINKS.items():
        assert (labs / name).is_symlink() and os.readlink(labs / name) == target, name
    tracked = subprocess.run(
        ["git", "ls-files", "-s", "03-labs"], cwd=KIT_ROOT, capture_output=True, text=True, check=True
    ).stdout
    for name in LINKS:  # committed as links (mode 120000), so a clone has them
        assert re.search(rf"^120000 \w+ 0\t03-labs/{re.escape(name)}$", tracked, re.M), name

    def ignored(path: str) -> bool:
        out = subprocess.run(["git", "check-ignore", "--no-index", "-q", path], cwd=KIT_ROOT)
        return out.returncode == 0

    assert ignored(".env") and ignored(".venv/") and ignored("results/")  # the learner's own
    assert not ignored("03-labs/.env") and not ignored("03-labs/.venv")  # the links to them


def test_the_lessons_are_found_once() -> None:
    names = [lesson.name for lesson in discover()]
    assert len(names) == len(set(names)) and "06-prefix-caching" in names


def test_a_file_in_place_of_the_env_link_is_read_too(tmp_path: Path) -> None:
    """An editor that saves by replacing the link leaves 03-labs/.env a file of its own: the
    key the learner put there still counts (the kit's .env wins where both set a value)."""
    assert LAB_ENV_FILE == KIT_ROOT / "03-labs" / ".env" and LAB_ENV_FILE.is_symlink()
    code = (
        "import os, pathlib; from felab import paths\n"
        "paths.ENV_FILE = pathlib.Path(os.environ['KIT_ENV'])\n"
        "paths.LAB_ENV_FILE = pathlib.Path(os.environ['LAB_ENV'])\n"
        "paths.load_env(); print(os.environ.get('FIREWORKS_API_KEY'), os.environ.get('FELAB_MOCK_URL'))"
    )
    kit_env, lab_env = tmp_path / "kit.env", tmp_path / "lab.env"
    kit_env.write_text("FIREWORKS_API_KEY=\nFELAB_MOCK_URL=http://127.0.0.1:9/v1\n")  # as make starts it
    lab_env.write_text("FIREWORKS_API_KEY=fw-in-03-labs\nFELAB_MOCK_URL=http://127.0.0.1:7/v1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FELAB_", "FIREWORKS_"))}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "KIT_ENV": str(kit_env), "LAB_ENV": str(lab_env)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["fw-in-03-labs", "http://127.0.0.1:9/v1"]


# ── the list, against the page ────────────────────────────────────────────────

PAGE_COMMAND = re.compile(r"^(?:python|bash|make|cd|source|pkill) ")
INLINE = re.compile(
    r"\b(make [a-z][a-z-]*(?: &)?|cd lessons/[\w-]+|source \.venv/bin/activate|pkill -f [\w.]+)"
)


def page_commands(text: str) -> set[str]:
    """The page's commands: its command lines (a `# comment` after two spaces cut off), and the
    commands it names inside sentences. The code listed under "Code in this step" is not advice."""
    text = text.split("\nCode in this step", 1)[0]
    found = set()
    for line in text.splitlines():
        line = re.split(r"\s{2,}#", line.strip(), maxsplit=1)[0].strip()
        if PAGE_COMMAND.match(line):
            found.add(" ".join(line.split()))
    found.update(" ".join(m.split()) for m in INLINE.findall(text))
    return {c.rstrip(".,:") for c in found}


def test_the_list_holds_the_pages_commands_and_only_those() -> None:
    seed = seed_file()
    if seed is None:
        pytest.skip(
            f"the course's text ({SEED}) is not beside the kit (../shared/seeds): the list is not re-checked"
        )
    text = seed.read_text(encoding="utf-8")
    flat = " ".join(text.split())
    listed = {c.command for c in COMMANDS}
    missing_from_page = [c for c in listed - set(SENTENCES) if c not in flat]
    assert not missing_from_page, f"listed in tests/course_commands.py, not on the page: {missing_from_page}"
    unlisted = sorted(page_commands(text) - listed)
    assert not unlisted, f"on the page, not in tests/course_commands.py: {unlisted}"


def test_the_page_scan_would_notice_a_new_command() -> None:
    page = "Run it\n\npython new_bench.py --fast     # a comment\nThen make newtarget from here.\n"
    assert page_commands(page) == {"python new_bench.py --fast", "make newtarget"}


# ── the page's commands, typed where it says, in a fresh clone ───────────────


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of the kit (what is committed), its .venv this test's environment (as
    `make setup` would have made it), its own felab first on the path."""
    if not (KIT_ROOT / ".git").exists():
        pytest.skip("not a git checkout: there is nothing to clone")
    kit = tmp_path_factory.mktemp("fresh") / "kit"
    subprocess.run(["git", "clone", "-q", str(KIT_ROOT), str(kit)], check=True, timeout=120)
    (kit / ".venv").symlink_to(Path(sys.prefix))
    stamp = kit / ".venv" / ".installed"
    if not stamp.exists():
        pytest.skip("this test's Python is not a .venv made by `make setup`")
    # The clone's files are newer than that install: say they are not, or make would install again.
    os.utime(kit / "pyproject.toml", (stamp.stat().st_mtime - 60,) * 2)
    return kit


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    """The practice server, and two more standing in for llama.cpp and Fireworks (cold caches each),
    reading 10 times faster than the lesson's: what is checked here is where commands work, not speed."""
    fast = ("--prefill-tps", "25000")
    with (
        practice_server(*fast) as mock,
        practice_server(*fast) as llamacpp,
        practice_server(*fast) as fireworks,
    ):
        yield {"mock": mock, "llamacpp": llamacpp, "fireworks": fireworks}


def learner_env(clone: Path, servers: dict[str, str]) -> dict[str, str]:
    """A learner's terminal: none of this machine's kit variables, no key exported, no make."""
    drop = ("FELAB_", "FIREWORKS_", "VIRTUAL_ENV", "MAKE", "MFLAGS", "PYTHON")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PATH"] = os.pathsep.join(
        p for p in env["PATH"].split(os.pathsep) if p != str(Path(sys.executable).parent)
    )
    env["PYTHONPATH"] = str(clone)  # the clone's felab, not the one this .venv was installed from
    for name, url in servers.items():
        env[f"FELAB_{name.upper()}_URL"] = url
    env["FELAB_FIREWORKS_MODEL"] = "felab-practice"  # what the practice server serves
    env["LLAMA_SERVER"] = "/bin/true"  # resolve only: no llama.cpp here
    return env


def typed(cmd: PageCommand) -> str:
    """The bash lines that type `cmd` where the page says, as a learner arrives there."""
    arrive = ["cd 03-labs", "source .venv/bin/activate"]
    if cmd.folder == LESSON:
        arrive.append("cd lessons/06-prefix-caching")
    words = shlex.split(cmd.command.rstrip(" &"))
    if cmd.how == "dry":
        line = shlex.join(["make", "-n", *words[1:]])
    elif cmd.how == "resolve":
        script, args = words[1], words[2:]
        probe = "--dry-run" if "serve_" in script else "--help"
        line = f"test -f {script} && bash -n {script} && {shlex.join(['bash', script, *args, probe])}"
    else:
        line = cmd.command
    return "\n".join(["set -e", *arrive, line])


def type_in(clone: Path, env: dict[str, str], lines: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", lines], cwd=clone, env=env, capture_output=True, text=True, timeout=180
    )


@pytest.mark.timeout(600)  # the whole walk: about 20 commands, each a fresh Python
def test_every_page_command_works_where_the_page_says(clone: Path, servers: dict[str, str]) -> None:
    env = learner_env(clone, servers)
    setup = type_in(clone, env, "cd 03-labs\nmake setup")  # Day 1 (its .venv is there: .env only)
    assert setup.returncode == 0, setup.stderr
    before = type_in(clone, env, "cd 03-labs\nmake check")
    assert "FIREWORKS_API_KEY is NOT set" in before.stdout, before.stdout + before.stderr
    # `make setup` started the kit's .env from .env.example: the link in 03-labs leads to a file, so
    # `cp` (which refuses to write through a link to nothing) and editors write through it
    assert (clone / ".env").read_text() == (clone / ".env.example").read_text()
    copied = type_in(clone, env, "cd 03-labs\ncp .env.example .env")
    assert copied.returncode == 0, copied.stderr
    # "Put your key in the .env file in 03-labs": one file with the kit's .env
    key = type_in(clone, env, "cd 03-labs\nprintf 'FIREWORKS_API_KEY=fw-put-in-03-labs\\n' > .env")
    assert key.returncode == 0 and (clone / ".env").read_text() == "FIREWORKS_API_KEY=fw-put-in-03-labs\n"

    failed = []
    outputs = {}
    for cmd in COMMANDS:
        if cmd.how.startswith("skip"):
            continue
        started = time.monotonic()
        out = type_in(clone, env, typed(cmd))
        print(f"{time.monotonic() - started:6.1f} s  {cmd.folder}$ {cmd.command}")
        outputs[(cmd.folder, cmd.command)] = out.stdout
        if out.returncode != 0 or "Traceback" in out.stderr:
            failed.append(
                f"{cmd.folder}$ {cmd.command}  ->  exit {out.returncode}\n"
                f"{out.stdout[-800:]}{out.stderr[-800:]}"
            )
    assert not failed, "\n\n".join(failed)

    assert "FIREWORKS_API_KEY is set" in outputs[(LABS, "make check")]
    usage = outputs[(LESSON, "python prefix_bench.py --target fireworks --usage")]
    assert re.search(r"usage: prompt_tokens=\d+\s+cached_tokens=\d+", usage), usage
    rows = (clone / "results" / "06-prefix.jsonl").read_text().splitlines()  # the clone's own results/
    for order in ("stable-first", "variable-first"):
        assert any(f'"order": "{order}"' in r and '"target": "llamacpp"' in r for r in rows)
    assert (
        "4096 tokens per seat"
        in outputs[(LESSON, "bash ../02-three-local-servers/serve_llamacpp.sh Q4_K_M 16384 4")]
    )


def test_the_activated_python_is_the_kits_and_the_lessons_paths_resolve(
    clone: Path, servers: dict[str, str]
) -> None:
    """`..` in a file path is physical: from 03-labs/lessons/06-prefix-caching, ../02-... and
    ../../.venv are the kit's (a shell's `cd ..` is logical, and lands in 03-labs/: also the kit's)."""
    env = learner_env(clone, servers)
    out = type_in(
        clone,
        env,
        "cd 03-labs && source .venv/bin/activate && cd lessons/06-prefix-caching\n"
        'python -c "import felab; print(felab.__file__)"\n'
        "../../.venv/bin/python -c 'import sys; print(sys.prefix)'\n"
        "ls ../02-three-local-servers/serve_llamacpp.sh\n"
        "cd ../.. && pwd",
    )
    assert out.returncode == 0, out.stderr
    felab_file, prefix, serve, back = out.stdout.split()
    assert Path(felab_file).resolve() == (clone / "felab" / "__init__.py").resolve()
    assert Path(prefix).resolve() == Path(sys.prefix).resolve()
    assert serve == "../02-three-local-servers/serve_llamacpp.sh" and back == str(clone / "03-labs")


def test_advice_printed_in_the_lesson_folder_through_03_labs_works_there(
    clone: Path, servers: dict[str, str]
) -> None:
    """The kit writes commands for the learner's folder: through the link too, they work as printed."""
    env = learner_env(clone, servers)
    env["FELAB_LLAMACPP_URL"] = (
        "http://127.0.0.1:9/v1"  # nothing listens: the message names the start command
    )
    out = type_in(
        clone,
        env,
        "cd 03-labs && source .venv/bin/activate && cd lessons/06-prefix-caching\n"
        "python prefix_bench.py --target llamacpp --quick || true",
    )
    said = " ".join(out.stderr.split())
    starts = [c for c in re.findall(r"`([^`]+)`", said) if "serve_llamacpp.sh" in c]
    assert starts, said
    words = shlex.split(starts[0])
    words = [w for w in words if not re.match(r"^[A-Z_]+=", w)]
    check = type_in(
        clone,
        env,
        "cd 03-labs && cd lessons/06-prefix-caching\n" + shlex.join([*words, "--dry-run"]),
    )
    assert check.returncode == 0, check.stderr


def test_lint_reads_each_file_once() -> None:
    """`make lint` names felab, lessons and tests: the link 03-labs/lessons adds no second copy."""
    out = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--show-files", "felab", "lessons", "tests"],
        cwd=KIT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    files = [Path(line).resolve() for line in out.stdout.splitlines() if line.endswith(".py")]
    assert files and len(files) == len(set(files))
    assert not [f for f in out.stdout.splitlines() if "03-labs" in f]
