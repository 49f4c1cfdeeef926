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

ENV_FILE: Path = KIT_ROOT / ".env"


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


def from_here(command: str) -> str:
    """Rewrite a command written for the kit root so it works from the current folder.

    `make check` becomes `make -C ../.. check` in a lesson folder, and
    `bash lessons/02-.../serve_llamacpp.sh` becomes `bash ../02-.../serve_llamacpp.sh`.
    """
    here = Path.cwd().resolve()
    if here == KIT_ROOT:
        return command
    root = os.path.relpath(KIT_ROOT, here)
    words = command.split(" ")
    if words[0] == "make":
        return " ".join(["make", "-C", root, *words[1:]])
    return " ".join(os.path.relpath(KIT_ROOT / w, here) if w.startswith("lessons/") else w for w in words)
