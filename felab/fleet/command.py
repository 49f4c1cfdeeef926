"""`felab fleet` (click): a fleet behind a real router; `stop`, `stats` and `check` beside it.

    python -m felab fleet -n 4 --router sglang [--policy cache_aware] [--profile F] [--port 8780]
    python -m felab fleet stop
    python -m felab fleet stats
    python -m felab fleet check --router sglang [--json]

`make fleet`, `make fleet-stop` and `make fleet-stats` call these.
"""

from __future__ import annotations

import json

import click

from felab.fleet import processes, stats, up
from felab.make_vars import refuse_unread
from felab.paths import from_here


@click.group("fleet", invoke_without_command=True)
@click.option("-n", "--workers", "n", type=int, default=4, show_default=True, help="practice servers (1-32)")
@click.option(
    "--router", default="sglang", show_default=True, help="sglang, vllm, or none (the kit's own fleet)"
)
@click.option("--policy", default=None, help="the router's policy (default cache_aware)")
@click.option("--profile", default=None, help="a timing profile: each worker its twin")
@click.option(
    "--port", type=int, default=up.DEFAULT_PORT, show_default=True, help="the router's port; workers follow"
)
@click.pass_context
def fleet_command(
    ctx: click.Context, n: int, router: str, policy: str | None, profile: str | None, port: int
) -> None:
    """N practice servers, each its own process, behind a real router (Ctrl+C stops them all)."""
    if ctx.invoked_subcommand is not None:
        return
    # `make fleet ROUTR=none`: a variable make would drop, refused
    refuse_unread(ctx, from_here(".venv/bin/python -m felab fleet"))
    ctx.exit(up.run(up.plan(n, router, policy, profile, port)))


@fleet_command.command("stop")
def stop_command() -> None:
    """Stop the running fleet: only the processes it started, by PID."""
    click.echo(processes.stop_recorded())


@fleet_command.command("stats")
def stats_command() -> None:
    """Per worker of the running fleet: requests, prefix-cache hit rate, load."""
    click.echo(stats.report(stats.scrape_fleet()))


@fleet_command.command("check")
@click.option(
    "--router", default="sglang", show_default=True, help="the real router to check the model against"
)
@click.option("-n", "--workers", "n", type=int, default=3, show_default=True, help="practice servers (1-32)")
@click.option(
    "--workload",
    "workloads",
    multiple=True,
    default=("lesson", "trace"),
    show_default=True,
    help="lesson (sessions and a shared prompt) or trace (the kit's Mooncake slice); repeat for both",
)
@click.option("--limit", default=24, show_default=True, help="requests of the trace")
@click.option("--json", "as_json", is_flag=True, help="the rows as JSON, for a program")
def check_command(router: str, n: int, workloads: tuple[str, ...], limit: int, as_json: bool) -> None:
    """One workload through the real router and through --route sglang-cache-aware: the worker
    chosen per request, hit rate per worker, load max/mean."""
    from felab.fleet import check  # the model and the openai client: only when checking

    say = (lambda _: None) if as_json else click.echo
    rows = check.check(router, n, workloads, limit, say)
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    else:
        click.echo(check.report(rows))
