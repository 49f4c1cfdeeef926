"""Errors a learner can meet, each turned into one short paragraph that says what to do next.

The rule of the kit: code deep inside raises a `FelabError` carrying the
finished message; only the edge (`run()` for lesson scripts, the felab CLI)
prints it and exits non-zero. No learner sees a traceback unless they ask for
one with `FELAB_DEBUG=1`.

Every message here is also listed on the troubleshooting page (docs/troubleshooting.md).
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, TextIO

from felab import this_run
from felab.redact import redact

EXIT_ERROR = 2
"""Exit status of a run stopped by a FelabError (bad input or an unreachable server)."""


class FelabError(Exception):
    """An error with a message written for the learner: what happened and the fix."""

    def __init__(self, message: str) -> None:
        message = redact(message)  # a server's words can carry a key: never in a message
        super().__init__(message)
        self.message = message


def fail(message: str) -> None:
    """Print a learner-facing error paragraph to stderr, unwrapped so commands stay whole.

    If stderr itself cannot be written (closed, a full disk), there is nowhere left to say
    it: the exit status still does.
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):  # closed, or None
        print(f"error: {redact(message)}", file=sys.stderr, flush=True)


class WatchedOutput:
    """`sys.stdout` while a lesson runs: the same stream, keeping the error its last write met.

    A print that fails (`> /dev/full`, a pipe closed early by `| head`) raises an OSError like
    any other, from wherever the lesson printed; this is how `run()` knows it came from the
    output and not from elsewhere (a socket fails with EPIPE too).
    """

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.error: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.inner.write(text)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        try:
            self.inner.flush()
        except OSError as exc:
            self.error = exc
            raise

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding...: the stream's own
        return getattr(self.inner, name)


def silence_stdout() -> None:
    """Send the rest of this process's standard output to /dev/null, once writing it has failed:
    else Python's own flush at exit fails again, with "Exception ignored" and exit status 120."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


def output_lost_message(exc: OSError) -> str:
    """What a learner is told when the output could not be written."""
    return (
        f"this run's output could not be written ({exc.strerror or exc}): it went to a full disk "
        f"(`> /dev/full`), or into a pipe closed before the end (`| head`). Run it again with its "
        f"output on the terminal, or into a file on a disk with space."
    )


def debug_exit(exc: BaseException) -> NoReturn:
    """FELAB_DEBUG=1: print the whole traceback, keys redacted, and exit as without it (status 2).

    Letting the exception escape would exit 1, which `make fw-check` documents as "billing".
    """
    print(redact("".join(traceback.format_exception(exc))), file=sys.stderr, end="")
    sys.exit(EXIT_ERROR)


def run(main: Callable[[], object]) -> None:
    """Run a lesson's `main()` and turn a FelabError, Ctrl+C or lost output into a clear exit.

    Use it as the last line of a lesson script: `if __name__ == "__main__": run(main)`.
    Rows recorded before the error stay recorded (`record()` writes each one
    whole as soon as it is called), and the exit says which, or that there were none.
    """
    inner = sys.stdout
    output = WatchedOutput(inner) if inner is not None else None
    if output is not None:
        sys.stdout = output  # a stream in all but name
    try:
        main()
        sys.stdout.flush()  # here, not at exit, where a failure could only be a warning and status 120
    except FelabError as exc:
        if os.environ.get("FELAB_DEBUG"):
            debug_exit(exc)
        fail(exc.message)
        if recorded():
            print(f"note: {what_was_recorded()}", file=sys.stderr)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        print(f"\ninterrupted: {what_was_recorded()}", file=sys.stderr)
        sys.exit(130)
    except OSError as exc:
        if output is None or exc is not output.error:
            raise
        silence_stdout()
        fail(f"{output_lost_message(exc)} {what_was_recorded()}")
        sys.exit(EXIT_ERROR)
    finally:
        if sys.stdout is output:
            sys.stdout = inner


def recorded() -> list[str]:
    """The results files this run wrote rows to, each once, as paths from the learner's folder."""
    from felab.paths import learner_folder

    here = learner_folder()
    return list(dict.fromkeys(os.path.relpath(path, here) for path in this_run.RECORDED))


def what_was_recorded() -> str:
    """The truth about this run's records, for a run that stopped before its end."""
    files = recorded()
    if not files:
        return (
            "this run recorded nothing (a result is recorded when its measurement is complete: a "
            "lesson's run, a replay's configuration), so nothing of it is in results/. Run it again for "
            "its numbers."
        )
    rows = f"{len(this_run.RECORDED)} row" + ("s" if len(this_run.RECORDED) > 1 else "")
    return f"this run recorded {rows} before it stopped, kept in {', '.join(files)}."
