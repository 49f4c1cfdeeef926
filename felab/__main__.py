"""`python -m felab ...` (and the `felab` command) runs the felab command line.

Run by a Python without the kit's packages (`python3 -m felab calibrate` in a new terminal, the
kit's environment not active), it says which Python to use instead, as a lesson script does
(felab/no_kit.py), rather than end in `ModuleNotFoundError`. Only the standard library is
imported before that check.
"""

import os
import sys


def interrupted() -> None:
    """Ctrl+C wherever it lands: fw-check's exit 1 would mean "billing", so there it is 2.

    It ends with os._exit(2), not sys.exit(2): when the interrupt came through code that CPython
    ran by PyRun_* during an import, the interpreter marks it unhandled and, at exit, ends itself
    by SIGINT (status -2) even though it was caught here (seen 4 times in 30 interrupts while the
    SDKs load). fw-check's status is a promise, so nothing after this message may change it;
    it has nothing left to write or clean up."""
    if "fw-check" in sys.argv[1:]:  # an interrupted check knows nothing
        print(
            "error: interrupted: could not check what is billing on Fireworks. This is not an all-clear.",
            file=sys.stderr,
            flush=True,
        )
        os._exit(2)
    print("\ninterrupted.", file=sys.stderr)
    sys.exit(130)


def without_kit(exc: ModuleNotFoundError) -> None:
    """The kit's packages are missing from this Python: no_kit.py's paragraph, written for the
    folder the learner is in (`python -m felab calibrate` becomes `.venv/bin/python -m felab
    calibrate`, or `make setup` first), and exit status 2, as a lesson script's guard does."""
    from pathlib import Path

    from felab.no_kit import EXIT_ERROR, KIT_ROOT, advice

    argv = ["-m", "felab", *sys.argv[1:]]
    said = advice(KIT_ROOT, Path.cwd().resolve(), argv, sys.executable, sys.prefix, exc.name or "click")
    print(f"error: {said}", file=sys.stderr)
    sys.exit(EXIT_ERROR)


def main() -> None:
    """The command line, with Ctrl+C handled here, even while it starts (the SDKs take a moment to
    load): click's own handling (standalone mode) would print "Aborted!" and exit 1."""
    try:
        try:  # the kit's packages (click first): a Python without them gets no_kit.py's advice
            import click

            from felab.cli import cli
        except ModuleNotFoundError as exc:
            without_kit(exc)

        try:
            code = cli.main(standalone_mode=False)
        except click.Abort:  # Ctrl+C as click reports it
            raise KeyboardInterrupt from None
        except click.ClickException as exc:  # a usage error: click's message and status (2)
            exc.show()
            code = exc.exit_code
    except KeyboardInterrupt:
        interrupted()
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
