"""`felab calibrate`: measure a real server once, and make the practice server behave like it.

Read in this order:

    prompts.py   the probe text: prompts of a chosen size that share nothing, or share an opening;
                 varied text (prose, code, numbers, another script), calibrate's or held out
    probes.py    the measurements, each a few streamed requests (stream_once), bounded and counted;
                 a reply with no text counted and sent again
    counting.py  how the engine counts tokens: its tokenizer file, or characters fitted on varied text
    figures.py   each reply's figures checked as they arrive: the first lie stops calibrate
    fit.py       one weighted least squares over the cost terms' basis sums (mock_server/terms/)
    evidence.py  how far the fit can be trusted: a busy machine, values no engine has, a fit that misses
    profile.py   the fitted settings and how they were found, written as a TOML profile
    save.py      where the profile goes (--out) and how: whole or not at all, never over a non-profile
    check.py     the report card: held-out work on the real server and on its twin
    plot.py      the report card's picture: TTFT against prompt length, measured and predicted
    command.py   `python -m felab calibrate` (click)

Reading a profile is the practice server's own business (felab/mock_server/profile.py):
a profile is a set of its settings' defaults.
"""
