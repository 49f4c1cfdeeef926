"""Where the kit lives on disk, and the one place that loads `.env`.

Learners run scripts from a lesson folder, the kit root or anywhere else, so
every path the kit uses is anchored at the kit root (the folder that holds
`felab/`), never at the current working directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import dotenv_values

KIT_ROOT: Path = Path(__file__).resolve().parent.parent
"""The kit's root folder: README.md, Makefile, lessons/ and .env live here."""

ENV_FILE: Path = Path(os.environ.get("FELAB_ENV_FILE") or KIT_ROOT / ".env")
"""The kit's `.env`, or the file `$FELAB_ENV_FILE` names (the tests name one that does not exist,
so a learner's own .env never reaches a script they run)."""

LAB_ENV_FILE: Path = KIT_ROOT / "03-labs" / ".env"
"""The `.env` the course names ("the .env file in 03-labs"): a link to ENV_FILE, committed, so
both names are one file. Should an editor replace the link with a file of its own, that file is
read too: its values fill those ENV_FILE leaves out or empty (ENV_FILE's win where both set one),
unless $FELAB_ENV_FILE names the one file to read."""


def load_env() -> None:
    """Load `<kit root>/.env` into the environment (and `03-labs/.env` if it is no longer a link
    to it, see LAB_ENV_FILE).

    Called wherever a setting is read, so it runs many times: each call reads the file again
    and adds only variables that are not set yet. A variable already set, by the shell or by
    an earlier call, is kept (python-dotenv's `override=False`), so
    `FIREWORKS_API_KEY=... python prefix_bench.py` works as a learner expects, and a value
    changed in `.env` is seen by the next command, not by a process already running.
    """
    values = dotenv_values(ENV_FILE) if ENV_FILE.is_file() else {}
    replaced = LAB_ENV_FILE.is_file() and not LAB_ENV_FILE.is_symlink()  # an editor replaced the link
    if replaced and not os.environ.get("FELAB_ENV_FILE"):  # a file named on purpose is the only one
        for name, value in dotenv_values(LAB_ENV_FILE).items():
            if value and not values.get(name):  # fills what the kit's file leaves empty (`KEY=`)
                values[name] = value
    for name, value in values.items():
        if value is not None and name not in os.environ:  # what load_dotenv(override=False) does
            os.environ[name] = value


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


MAKE_TARGET = "FELAB_MAKE_TARGET"
"""Set by the Makefile for a target whose advice differs when typed through make (its flags go in
ARGS, or the target runs the next step itself): a target-specific `export`, which its
prerequisites' recipes see too."""


def make_target() -> str | None:
    """The make target the learner typed, where the Makefile says (`replay`, `bundle-serve`); else None."""
    return os.environ.get(MAKE_TARGET) or None


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
