"""Trace replay: production traffic through the practice server's model, or to any server.

    python -m felab replay [TRACE]        # or: make replay TRACE=...
    python -m felab agent-trace [OUT]     # a trace of lesson 06's agent, with sessions

Read it in this order; each file holds one idea:

    trace.py     Mooncake's format: reading a trace in chunks, checking each line, its block size
    sweep.py     the flags: a list in a flag sweeps it, each combination one `Settings`
    virtual.py   virtual time: the booking core (mock_server/booking.py) on a clock that jumps
    collections_paused.py  the garbage collector scanning less often while it does
    synth.py     text for a trace that has none: equal hash ids become equal text blocks
    realtime.py  real time: each request sent at its time through felab's own client
    workers.py   its worker threads, which Ctrl+C does not wait for
    tally.py     what a replay adds up, and the summary row (pure: no printing)
    report.py    the rows as tables
    plot.py      a sweep's picture: hit rate and TTFT p95 against the swept value
    agent.py     lesson 06's agent as a trace: one opening, growing history, idle spells
    parallel.py  a sweep's configurations: serially, in --jobs processes, or on a Dask cluster
    command.py   the command line (click), wiring the rest

See docs/replay.md; make bench's replay phase is felab/bench/replay.py.
"""
