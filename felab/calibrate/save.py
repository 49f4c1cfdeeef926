"""Where calibrate's profile goes, and how it gets there whole.

`--out FILE` may name a new file, or a profile the kit wrote before (calibrating again
replaces it); anything else is refused before a request is sent: an existing file that
is not a profile (`--out .env` would have replaced the file holding FIREWORKS_API_KEY),
a folder, a symbolic link (the rename would replace the link, not what it points to, and
either is a surprise), a device (`/dev/full`) or any other special file.

The profile is written as a database writes a file it must never leave half-done: into a
temporary file in the same folder (a rename is atomic only within one file system), flushed
and `fsync`ed to the disk, then renamed over the name; the folder is synced too, so the new
name survives a power cut. Any failure (a full disk, a folder one cannot write) removes the
temporary file and raises `ProfileNotWritten`, which carries the profile's text: calibrate
prints it, so two minutes of measurements are never lost to a full disk.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from felab.errors import FelabError
from felab.mock_server.profile import MAX_PROFILE_BYTES, ProfileError, parse

INSTEAD = "results/profiles/NAME.toml"
"""The kind of --out name to give instead (results/ is the kit's own folder, not in git)."""


class ProfileNotWritten(FelabError):
    """The profile could not be written; `text` is the whole profile, for the terminal."""

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.text = text


def kind_of(mode: int) -> str:
    """A file that is not a regular one, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file (a pipe or a socket)"


def out_problem(path: Path) -> str | None:
    """Why calibrate must not write its profile to `path`, or None: a new name, or a profile."""
    try:
        mode = path.lstat().st_mode  # lstat: a link is looked at, not followed
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = exc.strerror or exc
        return f"--out {path} cannot be looked at ({why}). Give another file name, such as {INSTEAD}."
    if not stat.S_ISREG(mode):
        return (
            f"--out {path} is {kind_of(stat.S_IFMT(mode))}: calibrate writes its profile only to a regular "
            f"file, a new one or a profile it wrote before. Give a file name, such as {INSTEAD}."
        )
    if path.stat().st_size > MAX_PROFILE_BYTES or not is_profile(path):  # (over: no profile, not read)
        return (
            f"--out {path} already exists and is not a felab profile (it has no [profile] table with a "
            f"schema), so calibrate will not replace it. Give a new file name, such as {INSTEAD}, or "
            f"move that file away first."
        )
    return None


def is_profile(path: Path) -> bool:
    """Whether `path` holds a profile the kit wrote (TOML with a [profile] schema; cut short or not)."""
    try:
        parse(path)
    except ProfileError as exc:
        return "newer felab" in str(exc)  # a later kit's profile is a profile too
    return True


def check_out(path: Path | None) -> None:
    """Refuse an --out that must not be written (before any request is sent)."""
    problem = out_problem(path) if path is not None else None
    if problem:
        raise FelabError(problem)


def refuse_out(path: Path, text: str) -> None:
    """At writing time: a path that must not be written is refused, the profile kept for the terminal."""
    problem = out_problem(path)
    if problem:
        raise ProfileNotWritten(f"{problem} The whole profile is printed above: nothing is lost.", text)


def write_whole(path: Path, text: str) -> Path:
    """Write `text` to `path` whole or not at all (the module's docstring); `path` is checked again
    just before the rename, as something may have appeared there during the measurement."""
    tmp: Path | None = None
    try:
        refuse_out(path, text)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        tmp = Path(name)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        refuse_out(path, text)
        os.replace(tmp, path)
        tmp = None
        sync_folder(path.parent)
    except OSError as exc:
        raise ProfileNotWritten(
            f"the profile could not be written to {path} ({exc.strerror or exc}): a full disk, or a "
            f"folder you cannot write. Nothing is lost: the whole profile is printed above. Copy it "
            f"into a file (from `[profile]` to its last line), or free some space and calibrate again.",
            text,
        ) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return path


def sync_folder(folder: Path) -> None:
    """fsync the folder, so the rename is on the disk too (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
