"""`python -m felab ...` (and the `felab` command) runs the felab command line."""

import sys


def main() -> None:
    """The command line, with Ctrl+C handled even while it starts (the SDKs take a moment to load)."""
    try:
        from felab.cli import cli

        cli()
    except KeyboardInterrupt:
        if "fw-check" in sys.argv[1:]:  # exit 1 would mean "billing": an interrupted check knows nothing
            print(
                "error: interrupted: could not check what is billing on Fireworks. This is not an all-clear.",
                file=sys.stderr,
            )
            sys.exit(2)
        print("\ninterrupted.", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
