"""`felab calibrate`: measure a real server once, and make the practice server behave like it.

Read in this order:

    prompts.py   the probe text: prompts of a chosen size that share nothing, or share an opening
    probes.py    the measurements, each a few streamed requests (stream_once), bounded and counted
    fit.py       least squares, closed form: the timing terms from the measurements
    profile.py   the fitted settings and how they were found, written as a TOML profile
    save.py      where the profile goes (--out) and how: whole or not at all, never over a non-profile
    check.py     the report card: held-out work on the real server and on its twin
    plot.py      the report card's picture: TTFT against prompt length, measured and predicted
    command.py   `python -m felab calibrate` (click)

Reading a profile is the practice server's own business (felab/mock_server/profile.py):
a profile is a set of its settings' defaults.
"""
