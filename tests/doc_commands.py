"""Check the commands the docs show: every make target exists, every script path exists,
every flag a script is shown with is one its `--help` lists.

Convention (stated in the lab book): every fenced shell block starts in the kit's root
folder; `cd` lines inside a block move it. `A && B` is two commands; `# ...` is a comment;
leading `VAR=value` assignments are skipped.
"""

from __future__ import annotations

import functools
import itertools
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from felab.paths import KIT_ROOT

FENCE = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.S | re.M)
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Commands of other programs the docs may show; the kit cannot check them.
EXTERNAL = {
    "source",
    "curl",
    "kill",  # by the pid a message names; never pkill (it stops every server of that name)
    "export",
    "ollama",
    "vllm",
    "brew",
    "pip",
    "apt-get",
    "git",
    "cp",
    "cat",
    "ls",
    "time",
    "mlx_lm.generate",
    "mlx_lm.server",
    "mlx_lm.cache_prompt",
    "llama-server",
}


def documented_files(root: Path = KIT_ROOT) -> list[Path]:
    """README.md, every lesson README and every lab-book page."""
    return [root / "README.md", *sorted(root.glob("lessons/*/README.md")), *sorted(root.glob("03-labs/*.md"))]


@dataclass(frozen=True)
class Command:
    doc: Path
    words: tuple[str, ...]
    cwd: Path

    def __str__(self) -> str:
        where = self.doc.relative_to(KIT_ROOT) if self.doc.is_relative_to(KIT_ROOT) else self.doc
        return f"{where}: `{' '.join(self.words)}`"


def commands(doc: Path, root: Path = KIT_ROOT) -> Iterator[Command]:
    """Every command in the doc's fenced shell blocks, with the folder it runs in."""
    for block in FENCE.findall(doc.read_text(encoding="utf-8")):
        cwd = root
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                while words and ASSIGNMENT.match(words[0]):
                    words = words[1:]
                if not words:
                    continue
                yield Command(doc, tuple(words), cwd)
                if words[0] == "cd" and len(words) > 1:
                    cwd = (cwd / words[1]).resolve()


@functools.cache
def make_targets(folder: Path) -> frozenset[str]:
    """The targets `make` knows in `folder`: a Makefile that forwards every target (`%:`, as
    03-labs/Makefile does) knows the kit's."""
    text = (folder / "Makefile").read_text(encoding="utf-8")
    if re.search(r"^%:", text, re.M):
        return make_targets(KIT_ROOT)
    return frozenset(re.findall(r"^([a-zA-Z0-9_-]+):", text, re.M))


@functools.cache
def help_text(*argv: str, cwd: Path = KIT_ROOT) -> str:
    out = subprocess.run([*argv, "--help"], cwd=cwd, capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


def options_part(help_out: str) -> str:
    """The part of a --help that defines options: argparse's and click's usage line and their
    options section, without the description between them (which may quote other commands)."""
    lines = help_out.splitlines()
    if not lines or not lines[0].lower().startswith("usage:"):
        return help_out  # a shell script's own help text: all of it is about its options
    synopsis = list(itertools.takewhile(str.strip, lines))
    start = next(
        (i for i, line in enumerate(lines) if re.match(r"^(options|optional arguments):", line, re.I)),
        len(lines),
    )
    return "\n".join(synopsis + lines[start:])


def _flags_problems(cmd: Command, help_out: str, args: list[str]) -> list[str]:
    help_out = options_part(help_out)
    problems = []
    for i, word in enumerate(args):
        if not word.startswith("--"):
            continue
        flag = word.split("=", 1)[0]
        if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_out):
            problems.append(f"{cmd}: {flag} is not in its --help")
            continue
        choices = re.search(rf"{re.escape(flag)} \{{([^}}]*)\}}", help_out)
        if choices and i + 1 < len(args) and args[i + 1] not in choices.group(1).split(","):
            problems.append(f"{cmd}: {args[i + 1]!r} is not a choice of {flag}")
    return problems


def check(cmd: Command) -> list[str]:
    """What is wrong with one command; an empty list if nothing."""
    head, *args = cmd.words
    if head == "felab":  # the console script is `python -m felab`
        head, args = "python", ["-m", "felab", *args]
    if head == "cd":
        return [] if cmd.cwd.joinpath(args[0]).is_dir() else [f"{cmd}: no folder {args[0]}"]
    if head == "make":
        folder = cmd.cwd
        if "-C" in args:
            at = args.index("-C")
            folder = (cmd.cwd / args[at + 1]).resolve()
            args = args[:at] + args[at + 2 :]
        wanted = [a for a in args if not a.startswith("-") and "=" not in a]
        return [f"{cmd}: no make target {t!r}" for t in wanted if t not in make_targets(folder)]
    if head in ("python", "python3"):
        if args[:2] == ["-m", "felab"]:
            sub = args[2] if len(args) > 2 else None
            listing = help_text(sys.executable, "-m", "felab")
            if sub and not re.search(rf"^\s+{re.escape(sub)}\s", listing, re.M):
                return [f"{cmd}: felab has no command {sub!r}"]
            if not sub:
                return []
            return _flags_problems(cmd, help_text(sys.executable, "-m", "felab", sub), args[3:])
        if args[:1] == ["-m"]:
            return _flags_problems(cmd, help_text(sys.executable, "-m", args[1]), args[2:])
        script = cmd.cwd / args[0]
        if not script.is_file():
            return [f"{cmd}: no script {args[0]} in {cmd.cwd.relative_to(KIT_ROOT.parent)}"]
        return _flags_problems(cmd, help_text(sys.executable, str(script), cwd=script.parent), args[1:])
    if head == "bash":
        script = cmd.cwd / args[0]
        if not script.is_file():
            return [f"{cmd}: no script {args[0]}"]
        flags = [a for a in args[1:] if a.startswith("--")]
        return _flags_problems(cmd, help_text("bash", str(script), cwd=script.parent), flags) if flags else []
    if head in EXTERNAL:
        return []
    return [f"{cmd}: unknown command {head!r}; teach tests/doc_commands.py how to check it"]
