"""Finding the lessons: every folder `lessons/NN-slug/` is one, in number order.

A lesson's *runnable scripts* are its `*.py` files that take the kit's target
flags (they call `lesson_parser` or `add_target_args`). `make smoke` runs each of them against
the practice server with `--quick`, so a new lesson needs no registration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from felab.paths import KIT_ROOT

LESSONS_DIR = KIT_ROOT / "lessons"
TARGET_FLAGS = re.compile(r"\b(lesson_parser|add_target_args)\(")
_FOLDER = re.compile(r"^(\d{2})-[a-z0-9]+(?:-[a-z0-9]+)*$")


@dataclass(frozen=True)
class Lesson:
    number: str
    """The two digits of its folder's name (`06`)."""
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    def scripts(self) -> list[Path]:
        """The lesson's Python scripts that talk to a target, by name."""
        return sorted(p for p in self.path.glob("*.py") if TARGET_FLAGS.search(p.read_text(encoding="utf-8")))


def discover(root: Path = LESSONS_DIR) -> list[Lesson]:
    """All lessons under `root`, in course order."""
    found = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        match = _FOLDER.match(folder.name)
        if folder.is_dir() and match:
            found.append(Lesson(match.group(1), folder))
    return found
