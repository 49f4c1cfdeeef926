"""A lesson script run by a Python that lacks the kit: say which Python has it, and stop.

A lesson script imports felab inside a tiny guard, before anything else of the kit:

    try:  # the kit's library: in a Python without it, felab/no_kit.py says which Python has it
        from felab import resolve
    except ModuleNotFoundError:
        import pathlib
        import runpy

        runpy.run_path(str(pathlib.Path(__file__).parents[2] / "felab" / "no_kit.py"), run_name="__main__")

`python -m felab ...` run by such a Python gets the same paragraph (felab/__main__.py imports
`advice()` from here before anything that needs a package; 03-labs/ links `felab` so the
command is found there too).

This file is run by its path, not imported (felab cannot be imported there), so it uses the
standard library only. It works out the exact next command from where the learner is: the
kit's Python (`../../.venv/bin/python prefix_bench.py ...`), or `make setup` first when the
kit's environment does not exist yet.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parent.parent
EXIT_ERROR = 2  # as felab.errors.EXIT_ERROR


def kit_python(kit: Path) -> Path:
    """The kit's own Python, in the `.venv` that `make setup` creates."""
    return kit / ".venv" / "bin" / "python"


def advice(kit: Path, here: Path, argv: list[str], executable: str, prefix: str, missing: str) -> str:
    """The paragraph for a script run as `argv` in `here` by the Python `executable` (whose
    environment is `prefix`, sys.prefix), which lacks the module `missing`."""
    python = kit_python(kit)
    rel_python = os.path.relpath(python, here)
    rerun = shlex.join([rel_python, *argv])
    this = f"this Python ({executable}) has no {missing}"
    if not python.exists():
        forwards = here in (kit, kit / "03-labs")  # 03-labs/Makefile passes `make setup` on to the kit's
        setup = "make setup" if forwards else f"make -C {shlex.quote(os.path.relpath(kit, here))} setup"
        return (
            f"{this}: the kit's own environment (.venv in the kit folder) does not exist yet. "
            f"Create it with `{setup}` (once, about a minute), then run `{rerun}`."
        )
    if Path(prefix).resolve() == (kit / ".venv").resolve():  # the kit's Python, its install gone wrong
        reinstall = shlex.join([rel_python, "-m", "pip", "install", "-e", os.path.relpath(kit, here)])
        return (
            f"{this}, though it is the kit's own: its install is incomplete. Install the kit into it "
            f"again with `{reinstall}`, then run `{rerun}`."
        )
    active = os.environ.get("VIRTUAL_ENV")
    which = f"another environment is active ({active})" if active else "the kit's environment is not active"
    activate = os.path.relpath(kit / ".venv" / "bin" / "activate", here)
    return (
        f"{this}: {which}. Run it with the kit's Python: `{rerun}`; or activate the kit's "
        f"environment for this terminal with `source {activate}`, then run it again."
    )


def main() -> None:
    exc = sys.exc_info()[1]  # run from the guard's except block: the ModuleNotFoundError
    missing = getattr(exc, "name", None) or "felab"
    # runpy put this file's path in sys.argv[0]: the script is the module whose import failed
    failed = exc.__traceback__.tb_frame.f_globals.get("__file__") if exc and exc.__traceback__ else None
    here = Path.cwd().resolve()
    argv = [os.path.relpath(failed, here) if failed else "<the script>", *sys.argv[1:]]
    print(f"error: {advice(KIT_ROOT, here, argv, sys.executable, sys.prefix, missing)}", file=sys.stderr)
    sys.exit(EXIT_ERROR)


if __name__ == "__main__":
    main()
