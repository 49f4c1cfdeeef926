"""Where the kit lives on disk, and the one place that loads `.env`.

Learners run scripts from a lesson folder, the kit root or anywhere else, so
every path the kit uses is anchored at the kit root (the folder that holds
`felab/`), never at the current working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import load_dotenv

KIT_ROOT: Path = Path(__file__).resolve().parent.parent
"""The kit's root folder: README.md, Makefile, lessons/ and .env live here."""

ENV_FILE: Path = Path(os.environ.get("FELAB_ENV_FILE") or KIT_ROOT / ".env")
"""The kit's `.env`, or the file `$FELAB_ENV_FILE` names (the tests name one that does not exist,
so a learner's own .env never reaches a script they run)."""


def load_env() -> None:
    """Load `<kit root>/.env` into the environment, once.

    Variables already set in the shell win over the file (python-dotenv's
    `override=False`), so `FIREWORKS_API_KEY=... python prefix_bench.py` works
    as a learner expects.
    """
    load_dotenv(ENV_FILE, override=False)


def results_dir() -> Path:
    """Where runs are recorded: `results/` at the kit root, or `$FELAB_RESULTS_DIR`."""
    load_env()
    override = os.environ.get("FELAB_RESULTS_DIR")
    return Path(override).expanduser() if override else KIT_ROOT / "results"


def learner_folder() -> Path:
    """The folder the learner typed the command in.

    A make target runs in the kit folder even when it was typed elsewhere
    (`make -C ../.. check`, or `make check` in 03-labs/), so the Makefile passes
    the learner's folder on as FELAB_CALLER_DIR; a script run directly uses its
    working folder.
    """
    named = os.environ.get("FELAB_CALLER_DIR", "")
    if named and Path(named).is_dir():
        return Path(named).resolve()
    return Path.cwd().resolve()


KIT_PATHS = ("lessons/", ".venv/")
"""Words of a kit-root command that are paths inside the kit, rewritten by `from_here()`."""

MAKE_FORWARDED = ("03-labs",)
"""Folders whose Makefile forwards every target to the kit's: `make check` works there as it is."""


def from_here(command: str) -> str:
    """Rewrite a command written for the kit root so it works from the learner's folder.

    `make check` becomes `make -C ../.. check` in a lesson folder, and
    `bash lessons/02-.../serve_llamacpp.sh` becomes `bash ../02-.../serve_llamacpp.sh`.
    """
    here = learner_folder()
    if here == KIT_ROOT:
        return command
    root = os.path.relpath(KIT_ROOT, here)
    words = command.split(" ")
    if words[0] == "make":
        if here in (KIT_ROOT / name for name in MAKE_FORWARDED):
            return command
        return " ".join(["make", "-C", root, *words[1:]])
    return " ".join(os.path.relpath(KIT_ROOT / w, here) if w.startswith(KIT_PATHS) else w for w in words)
