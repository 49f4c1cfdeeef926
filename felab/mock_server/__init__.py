"""The practice server (target `mock`): an OpenAI-compatible server that models a real one, offline.

    python -m felab.mock_server         # or: make mock

Read it in this order; each file holds one idea:

    config.py    every setting declared once: default, help, bounds, and its check
    flags.py     the flags written from those declarations (server, replay, real-time replay)
    cache.py     the block-hash prefix cache: PrefixCache.uncached_tokens()
    tokens.py    how a prompt's tokens are counted: characters, or the engine's tokenizer
    timing.py    the timing model: what a prompt and a reply token take, by the terms/
    loop.py      the engine loop: the lesson's prefill lane (one whole prompt a step, first
                 come, first served), or with --batch-tokens steps formed from the seats
    seats.py     a replica's seats (--seats): who runs, who waits; llama.cpp's per-seat prefix
    host_cache.py  the tier behind the seats: prompts that left them, kept in host memory (--cache-ram)
    fleet.py     replicas, how a request picks one (the prefix router's cost), their counters
    booking.py   the booking core: route, seat, look up, queue, insert, count; no HTTP
    app.py       the HTTP layer: OpenAI's routes, translated to and from the core
    waits.py     waiting for a booked time: the server's clock, first tokens on time
    sse.py       how a streamed reply is written (one write per moment, one watcher)
    replies.py   what a reply says, in chat's or legacy completions' shape
    wire.py      OpenAI's request bodies (sampling fields checked) and error envelope
    intake.py    how a request comes in: arrival time, body limit and deadline, one admission at a time
    connections.py  uvicorn's protocol with the kit's limits: silent or slow connections, arrival, bad HTTP
    faults.py    failures on purpose (--fail-rate)
    metrics.py   GET /metrics, with vLLM's names, by prometheus_client
    serve.py     the command line
    launch.py    a throw-away server on a free port (make demo, make smoke, tests)

Nothing here imports the learner's library (felab/*.py at the top) or the openai SDK,
except launch.py, which waits for the server with the SDK (a test in tests/test_docs.py keeps
it so). The benchmark that measures this server is felab/bench/.
"""
