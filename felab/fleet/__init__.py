"""A practice fleet: N practice servers, each a process of its own, behind a real router.

In reading order:

    routers.py    the routers the kit can start (sglang-router, vllm-router): binary, flags, readiness
    processes.py  a process in a session of its own, stopped by its PID; the state file `fleet-stop` reads
    up.py         `make fleet`: the checks, the workers, the router, the URL and the table, then wait
    stats.py      `make fleet-stats`: each worker's /metrics, its requests and prefix-cache hit rate
    check.py      `make fleet-check`: one workload through sglang-router and through the modelled route
    command.py    `felab fleet` (click): start, `stop`, `stats`, `check`
"""
