"""A sweep's configurations, run one after another, on this machine's cores, or on a Dask cluster.

    for row in run_all(run_one, configs, jobs=N): ...                         # --jobs N (default: every core)
    for row in run_all(run_one, configs, scheduler="tcp://host:8786", trace_path=path): ...  # --scheduler

Each configuration of a virtual-time sweep is independent: its own model, its own pass over
the trace. So they can run at once, each in its own process; the rows come back in the
configurations' order, and each is what a serial run gives (a test compares them field by
field) but for `wall_s` and `x_real_time`. `run_one(settings, data=None)` is a module-level
function (with its other arguments bound by functools.partial), so it travels by pickle.

Where each run finds the trace:

- **This machine** (`--jobs`, concurrent.futures' ProcessPoolExecutor): each worker reads
  the file from its path, as the serial run does (after the first read it is in the page
  cache), and keeps the parsed requests for its next configuration if there are not too
  many (`trace.requests`, `remember`). Sending the parsed trace instead would pickle 12,031
  requests to every run and unpickle them there: about the cost of parsing them.
- **A cluster** (`--scheduler`, dask.distributed's Client, an Executor too): the other
  machines need not have the file. The client reads its stored bytes (compressed, as on
  disk: 200 KB for the kit's trace) and scatters them to every worker once
  (`client.scatter(data, broadcast=True)`); each run streams from those bytes (or from the
  requests its worker process kept). The trace crosses the network once per worker, never
  once per configuration.

Dask is the `cluster` extra (pyproject.toml), installed by `make cluster`; workers on other
machines need the kit installed the same way (see docs/replay.md, "More than one machine").
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from felab.errors import FelabError
from felab.mock_server.config import Settings
from felab.paths import from_here
from felab.replay import scheduler, trace

R = TypeVar("R")

CONNECT_TIMEOUT_S = 10
"""How long to wait for the Dask scheduler to answer, and for it to have a worker."""


def cores() -> int:
    """The cores this process may run on (the default for --jobs)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity call
        return os.cpu_count() or 1


def run_all(
    run_one: Callable[..., R],
    configs: Sequence[Settings],
    jobs: int = 1,
    scheduler: str | None = None,
    trace_path: Path | None = None,
    tell: Callable[[str, Settings], None] | None = None,
) -> Iterator[R]:
    """`run_one(s)` for every configuration, in their order: serially, in `jobs` processes, or on
    the Dask cluster at `scheduler` (then `trace_path` is the file its workers get once).

    Each row is yielded as soon as it and every row before it are done, so a caller can record
    and print them as they come. `tell(event, s)`: "start" as a serial run begins each
    configuration, "done" as each configuration of a parallel run finishes (as they finish).
    """
    say = tell or (lambda event, s: None)
    if scheduler:
        if trace_path is None:
            raise ValueError("a cluster run needs the trace's path, to send it to the workers")
        yield from on_cluster(run_one, configs, scheduler, trace_path, say)
        return
    if min(jobs, len(configs)) <= 1:
        for s in configs:
            say("start", s)
            yield run_one(s)
        return
    with cf.ProcessPoolExecutor(min(jobs, len(configs))) as pool:
        try:
            futures = [pool.submit(run_one, s) for s in configs]
            yield from collect(futures, configs, say)
        except BaseException:  # Ctrl+C, a bad line, or the caller stopped: start nothing more
            pool.shutdown(wait=False, cancel_futures=True)
            raise


POLL_S = 0.05
"""How often a parallel sweep looks for configurations that have finished."""


def collect(
    futures: Sequence[Any], configs: Sequence[Settings], say: Callable[[str, Settings], None]
) -> Iterator:
    """Each future's result in order (the first failure, a bad line say, stops the sweep), and
    `say("done", s)` as each configuration finishes, in whatever order they finish: a sweep whose
    first configuration is its slowest still shows the others ending. Works for the futures of
    concurrent.futures and of Dask alike (both have `done()` and `result()`)."""
    told: set[int] = set()
    for future in futures:
        while True:
            for j, other in enumerate(futures):
                if j not in told and other.done():
                    told.add(j)
                    say("done", configs[j])
            if future.done():
                break
            time.sleep(POLL_S)
        yield future.result()


def on_cluster(
    run_one: Callable[..., R],
    configs: Sequence[Settings],
    address: str,
    trace_path: Path,
    say: Callable[[str, Settings], None],
) -> Iterator[R]:
    """The sweep on an existing Dask cluster: the trace's bytes scattered to every worker once."""
    if importlib.util.find_spec("distributed") is None:
        raise FelabError(
            f"--scheduler runs the sweep on a Dask cluster, which needs Dask's `distributed` package: "
            f"the kit's cluster extra, not installed in this environment. Install it with "
            f"`{from_here('make cluster')}` (once), then run again."
        )
    stored = trace.must_exist(trace_path).read_bytes()  # as on disk: compressed, if it is
    client = scheduler.connect(
        address, CONNECT_TIMEOUT_S
    )  # a FelabError if not a Dask scheduler with a worker
    with client:
        data = client.scatter(stored, broadcast=True)  # once per worker
        seen = scheduler.workers(client)
        submitted = (client.submit(run_one, s, data=data, pure=False) for s in configs)
        futures = [scheduler.Watched(f, client, address, seen) for f in submitted]  # names lost workers
        try:
            yield from collect(futures, configs, say)
        except FelabError:
            raise
        except Exception as exc:  # noqa: BLE001  (a worker that cannot run the kit: say what to do)
            raise FelabError(
                f"A Dask worker could not run the replay ({type(exc).__name__}: {exc}). Each worker "
                f"must run in a copy of the kit at the same version, started from its folder with "
                f"`.venv/bin/dask worker {address}` after `make cluster`."
            ) from None
