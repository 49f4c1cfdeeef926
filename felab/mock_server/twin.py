"""Which twin a practice server is: the profile it was started with, said wherever the kit asks.

A practice server started with `--profile FILE` is a twin of the server that profile was
measured on. Everything the kit does with it must keep that: its runs are recorded as the
twin's (not as the plain practice server's), and every command a message gives to restart
it keeps `--profile`. So the server says which twin it is, in the places the kit already
reads:

    GET /v1/models   each model's `felab_twin` (OpenAI's model object lets a server add fields)
    GET /health      `twin`: the same, or null for the plain practice server

    {"name": "lesson-mac", "path": "/home/me/felab/data/profiles/lesson-mac.toml",
     "engine": "llama.cpp (the lesson's example Mac)", "model": "Llama 3.1 8B ..."}

`name` is the file's name without `.toml`; `engine` and `model` are what the profile's
`[profile]` table says it was measured on. `reported()` reads that back from a page, and
`Twin.profile_flag()` is the `--profile` a message's restart command keeps, written for the
learner's folder.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click

from felab.mock_server.profile import PROFILE_PATH, ProfileError, learner_folder, load

FIELD = "felab_twin"
"""The field of each model in GET /v1/models that names the twin (absent: the plain practice server)."""


@dataclass(frozen=True)
class Twin:
    """A profile a practice server serves: its name, its file, and what it was measured on."""

    name: str
    path: str
    engine: str | None = None
    model: str | None = None

    def card(self) -> dict[str, Any]:
        """As the server reports it (JSON)."""
        return asdict(self)

    def described(self) -> str:
        """`the twin from profile lesson-mac, of llama.cpp (the lesson's example Mac)`, for a message."""
        of = f", of {self.engine}" if self.engine else ""
        return f"the twin from profile {self.name}{of}"

    def path_here(self) -> str:
        """The profile's file, written for the learner's folder (`data/profiles/lesson-mac.toml`)."""
        return os.path.relpath(self.path, learner_folder())

    def profile_flag(self) -> str:
        """`--profile data/profiles/lesson-mac.toml`: the file, written for the learner's folder."""
        return f"--profile {self.path_here()}"


def of_profile(path: Path) -> Twin:
    """The twin a profile file makes (its `[profile]` table read; a file that cannot be read is
    the server's to refuse first, so this only names what it can)."""
    try:
        about = load(path).get("profile")
    except ProfileError:
        about = None
    about = about if isinstance(about, dict) else {}
    text = {k: v for k, v in about.items() if isinstance(v, str)}
    return Twin(path.stem, str(path.resolve()), text.get("engine"), text.get("model"))


def from_context(ctx: click.Context) -> Twin | None:
    """The twin of the profile a command was given (`--profile`, kept by profile.py), or None."""
    path = ctx.meta.get(PROFILE_PATH)
    return of_profile(path) if isinstance(path, Path) else None


def reported(card: Any) -> Twin | None:
    """The twin a server reported (a model object of GET /v1/models, or /health's `twin`), or None
    for the plain practice server, another engine, or a report that is not one."""
    if not isinstance(card, dict):
        return None
    if FIELD in card:
        card = card[FIELD]
    if (
        not isinstance(card, dict)
        or not isinstance(card.get("name"), str)
        or not isinstance(card.get("path"), str)
    ):
        return None
    text = {k: card.get(k) if isinstance(card.get(k), str) else None for k in ("engine", "model")}
    return Twin(card["name"], card["path"], text["engine"], text["model"])


def named(twin: Twin | None) -> str:
    """How a message names a practice server: its twin, or the plain one."""
    return twin.described() if twin else "the plain practice server (no profile)"
