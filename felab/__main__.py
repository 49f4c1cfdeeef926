"""`python -m felab ...` runs the felab command line."""

from felab.cli import cli

cli()
