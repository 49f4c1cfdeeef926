"""Variables typed on make's command line that the target does not read: refused, not dropped.

`make fleet N=4 ROUTER=sglang` takes its settings as make variables, so a learner types
`make replay REPLICAS=8` the same way. make passes a variable no recipe reads to nothing,
and the replay ran one replica without a word. For a target whose flags go in ARGS, the
Makefile hands felab what it reads and the names of the other variables typed:

    replay: export FELAB_MAKE_READS := TRACE PROFILE ARGS
    replay: export FELAB_MAKE_UNREAD = <the other command-line variables' names>

and the command refuses them before it does anything, saying what was meant: the flag of
that name in ARGS (`--replicas 8`) when the command has one, the variable it reads that is
spelled nearly so (`PROFLE=` → `PROFILE=`), else where the flags are listed. The values come
from the environment, where make puts every variable typed on its command line; they reach
the suggestion quoted for a shell (shlex), never run.

`make mock` and `make fleet` take no ARGS: a variable spelled nearly as one they read is
named (`make mock PROFIL=...` had started the plain server, `PROT=8830` one on 8765), and a
flag of the command they run is shown on that command. The practice server imports nothing of
felab outside mock_server, so for `make mock` the Makefile runs this module first, and only
when a variable it does not read was typed (`python -m felab.make_vars`).
"""

from __future__ import annotations

import difflib
import os
import shlex

import click

READS = "FELAB_MAKE_READS"
UNREAD = "FELAB_MAKE_UNREAD"


def refuse_unread(ctx: click.Context, runs: str | None = None) -> None:
    """A UsageError naming each variable typed on make's command line that this target would drop.
    `runs`: for a target with no ARGS (mock, fleet), the command it runs, where its flags go."""
    names = os.environ.get(UNREAD, "").split()
    if not names:
        return
    reads = os.environ.get(READS, "").split()
    flags = {opt for p in ctx.command.params for opt in p.opts}
    given = words_of(os.environ.get("ARGS", ""))
    args = list(given)
    meant, other = [], []
    for name in names:
        flag = "--" + name.lower().replace("_", "-")
        close = difflib.get_close_matches(name, reads, n=1, cutoff=0.7)
        if flag in flags and "ARGS" in reads:
            args += [flag, os.environ.get(name, "VALUE")]
        elif close:
            meant.append(f"Did you mean {close[0]}= for {name}=?")
        elif flag in flags and runs:
            value = shlex.quote(os.environ.get(name, "VALUE"))
            other.append(f"{flag} is a flag of the command it runs: `{runs} {flag} {value}`.")
        else:
            other.append(f"There is no flag {flag} either.")
    target = ctx.info_name
    read = ", ".join(f"{r}=" for r in reads)
    words = [f"make {target} reads {read} only, and would drop {', '.join(names)}."]
    words += meant + other
    if len(args) > len(given):
        words.append(f"Flags go in ARGS: make {target} ARGS={shlex.quote(shlex.join(args))}")
    if "ARGS" in reads:
        words.append(f"(make {target} ARGS=--help lists the flags.)")
    else:
        words.append("(make help lists what each target reads.)")
    raise click.UsageError(" ".join(words))


def words_of(text: str) -> list[str]:
    """ARGS as the shell split it (as typed, if its quotes do not close)."""
    try:
        return shlex.split(text)
    except ValueError:
        return [text] if text else []


def refuse_for_mock() -> int:
    """`make mock` with a variable it does not read (run by the Makefile only then: the practice
    server imports nothing of felab outside mock_server, so the check is a step before it)."""
    from felab.errors import EXIT_ERROR
    from felab.mock_server.serve import main
    from felab.paths import from_here

    try:
        refuse_unread(
            click.Context(main, info_name="mock"), from_here(".venv/bin/python -m felab.mock_server")
        )
    except click.UsageError as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    raise SystemExit(refuse_for_mock())
