"""The command line: `python -m felab replay` and `python -m felab agent-trace` (click).

This module only wires flags to the drivers: read the flags (sweep.py), work out the
block size (trace.py), run each configuration in virtual time (virtual.py) or real time
(realtime.py), record each row (felab.results, key `replay`), print the tables
(report.py) and, for a sweep, draw the picture (plot.py).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import json
import lzma
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import click

from felab.errors import FelabError
from felab.make_vars import refuse_unread
from felab.mock_server.config import DEFAULTS, Settings
from felab.mock_server.flags import SettingType
from felab.mock_server.profile import UNFLAGGED, profile_option
from felab.mock_server.twin import from_context
from felab.paths import from_here, learner_folder, results_dir
from felab.prices import PRICES, Price, price_for
from felab.replay import agent, parallel, report, trace
from felab.replay.sweep import KNOBS, Knob, configurations, default_text, recorded
from felab.replay.tally import summary
from felab.results import record
from felab.targets import TARGETS, Target

PRICED = ("fireworks", "accounts/fireworks/models/gpt-oss-120b")
"""Whose prices the cost columns use unless --price-in/--price-cached say otherwise."""

FROM_TRACE = "block_tokens"
"""The one setting whose replay default is not the server's: the block size the trace's hash ids
were made with, worked out from its first lines (trace.block_tokens)."""


def knob_options(f: Any) -> Any:
    """One option per setting that shapes the model, written from its declaration (config.py)."""
    for knob in reversed(KNOBS):
        trace_default = knob.field == FROM_TRACE
        default = None if trace_default else default_text(knob)
        shown: bool | str = "worked out from the trace; 512 for Mooncake's" if trace_default else True
        help_ = f"{knob.help}; comma-separated values sweep it"
        metavar = SettingType(knob.declared).name + ",..."
        option = click.option(
            knob.flag, knob.field, default=default, show_default=shown, metavar=metavar, help=help_
        )
        f = option(f)
    return f


def the_price(price_in: float | None, price_cached: float | None) -> tuple[Price, str]:
    """The prices the cost columns use (felab/prices.py's, or the flags'), and whose they are."""
    priced = Target(PRICED[0], "", PRICED[1], "", True)  # only its name and model: the key of PRICES
    flags = argparse.Namespace(price_in=price_in, price_cached=price_cached)
    price = price_for(priced, flags) or PRICES[PRICED]
    return price, f"gpt-oss-120b on Fireworks, {price.source}"


def run_virtual(
    path: Path,
    limit: int | None,
    speed: float,
    price: Price,
    s: Settings,
    data: bytes | None = None,
    progress: bool = True,
    remember: bool = False,
) -> dict[str, Any]:
    """One configuration in virtual time, as its row (`data`: the trace's bytes, on a Dask worker;
    `remember`: a sweep, whose process keeps the parsed trace for its next configuration).

    Module-level, its first four arguments bound with functools.partial: a sweep hands it to
    worker processes (parallel.py)."""
    from felab.replay import virtual

    requests = trace.requests(path, limit, data, progress, remember)
    tally, loads, wall = virtual.replay(path, requests, s, speed)
    head = {"mode": "virtual time", "target": "virtual", "model": s.model}
    capacity = s.replicas * s.prefill_tps
    return {**head, **recorded(s), **summary(tally, loads, price, wall, capacity)}


def own_server(name: str | None, base_url: str | None) -> bool:
    """Whether a real-time replay starts its own practice server (`--target mock`, no --base-url),
    whose settings are the replay's, or sends to one started elsewhere, as it was started."""
    return name == "mock" and not base_url


@contextlib.contextmanager
def live_target(name: str, base_url: str | None, model: str | None, s: Settings) -> Iterator[Any]:
    """The target to send to: a throw-away practice server with these settings for `--target mock`
    without --base-url, else the one named (as it was started)."""
    from felab.connect import resolve
    from felab.mock_server.launch import practice_server
    from felab.replay.realtime import server_flags

    if own_server(name, base_url):
        with practice_server(*server_flags(s)) as url:
            yield resolve(argparse.Namespace(target=name, base_url=url, model=model)), True
        return
    yield resolve(argparse.Namespace(target=name, base_url=base_url, model=model)), False


def run_live(
    path: Path, limit: int | None, s: Settings, speed: float, price: Price, live: dict
) -> dict[str, Any]:
    from felab.replay import realtime

    with live_target(live["target"], live["base_url"], live["model"], s) as (target, own):
        sender = realtime.Sender(target, s.block_tokens, live["max_tokens"], own)
        tally, wall = realtime.replay(path, trace.read_trace(path, limit), sender, speed, live["workers"])
    if tally.failed and not tally.requests:
        longest = report.longest_failure(tally.first_error, tally.failed_prompt_max or 0, tally.longest_error)
        raise FelabError(f"Every request of the replay failed; the first: {tally.first_error}{longest}")
    settings = recorded(s) if own else dict.fromkeys(recorded(s))
    head = {"mode": "real time", "target": target.name, "model": target.model, "base_url": target.base_url}
    capacity = s.replicas * s.prefill_tps if own else None  # known only for a server started here
    return {**head, **settings, **summary(tally, None, price, wall, capacity)}


def guard_paid(name: str | None, limit: int | None) -> None:
    """A paid target bills every token: a whole trace only when asked for, by --limit."""
    if name and TARGETS[name].paid and limit is None:
        raise FelabError(
            f"Replaying a whole trace on {name} bills every prompt token (the kit's trace is 145 million, "
            f"about $22 at gpt-oss-120b's list price). Choose how many requests with --limit, e.g. "
            f"`python -m felab replay --target {name} --limit 50 --speed 10`."
        )


def check_live(ctx: click.Context, name: str | None, base_url: str | None, configs: list) -> None:
    """In real time against a server started elsewhere, the model's flags cannot apply."""
    if not name and base_url:
        raise click.UsageError("--base-url is for real time: add --target (mock, llamacpp, ...) too.")
    if name and (ctx.params.get("jobs") or ctx.params.get("scheduler")):
        raise click.UsageError(
            "--jobs and --scheduler are for virtual time (no --target): a real-time replay measures "
            "wall-clock time, so its configurations run one after another."
        )
    own = own_server(name, base_url)
    if name and not own and len(configs) > 1:
        raise click.UsageError(
            "a sweep needs the virtual mode (no --target) or `--target mock` without --base-url, "
            "which starts a practice server per configuration; a server started elsewhere runs as it "
            "was started."
        )
    given = typed(ctx)
    if name and not own and given:
        click.echo(
            f"note: {', '.join(given)} describe the model; the server at the target runs as it was started.",
            err=True,
        )


def typed(ctx: click.Context) -> list[str]:
    """The model's flags typed on the command line (not a default, not a profile's)."""
    return [
        k.flag for k in KNOBS if ctx.get_parameter_source(k.field) == click.core.ParameterSource.COMMANDLINE
    ]


def check_cache_size(ctx: click.Context, configs: list[Settings]) -> None:
    """--cache-blocks sizes the block cache, which a seat-prefix replica does not have: refused
    there, rather than swept to the same figures."""
    if "--cache-blocks" in typed(ctx) and any(s.cache_mode == "seat-prefix" for s in configs):
        twin = from_context(ctx)
        whose = f"profile {twin.name}'s, as llama.cpp" if twin else "llama.cpp's"
        raise click.UsageError(
            f"--cache-blocks sizes the block cache; with --cache-mode seat-prefix ({whose}) each seat "
            f"keeps its last prompt instead, so it changes nothing. Sweep --seats instead, or leave "
            f"--cache-blocks out."
        )


def picture(rows: list[dict[str, Any]], swept: list[Knob]) -> str:
    """Draw the sweep, or the one configuration; the line that says where the picture is (or why
    there is none)."""
    if importlib.util.find_spec("matplotlib") is None:
        return f"(no picture: `{from_here('make replay')}` installs what draws it)"
    from felab.replay.plot import draw, draw_one, x_knob

    if not swept:
        return f"picture: {draw_one(rows[0], results_dir() / 'replay.png')}"
    name = "replay-" + x_knob(swept).flag.removeprefix("--") + ".png"
    return f"picture: {draw(rows, swept, results_dir() / name)}"


@click.command("replay", context_settings={"max_content_width": 110})
@click.argument(
    "trace_path", metavar="[TRACE]", required=False, type=click.Path(path_type=Path, dir_okay=False)
)
@click.option("--limit", type=click.IntRange(min=1), help="replay only the first N requests")
@knob_options
@click.option(
    "--speed",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="play the trace S times faster (both modes: arrivals come S times closer)",
)
@click.option("--target", type=click.Choice(list(TARGETS)), help="real time: send the trace to this server")
@click.option("--base-url", help="real time: the server's URL, ending in /v1 [default: the target's]")
@click.option("--model", help="real time: model id [default: the target's, or the one the server serves]")
@click.option(
    "--max-tokens", type=click.IntRange(min=1), help="real time: cap each reply [default: the trace's]"
)
@click.option(
    "--workers",
    default=256,
    show_default=True,
    type=click.IntRange(min=1),
    help="real time: requests in flight at most",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    help="virtual-time sweeps: run this many configurations at once, each in its own process "
    "[default: one per core]",
)
@click.option(
    "--scheduler",
    metavar="tcp://HOST:PORT",
    help="virtual-time sweeps: run the configurations on this Dask cluster (`make cluster` installs "
    "Dask; see docs/replay.md)",
)
@click.option("--price-in", type=float, metavar="USD", help="list price of input tokens, USD per 1M")
@click.option("--price-cached", type=float, metavar="USD", help="price of cached input tokens, USD per 1M")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per configuration, for a program")
@profile_option(skip=(FROM_TRACE,), note=" (the block size stays the trace's)")
@click.pass_context
def replay_command(ctx: click.Context, trace_path: Path | None, limit: int | None, **flags: Any) -> None:
    """Replay a production trace through the practice server's model, or send it to a server.

    \b
    TRACE is Mooncake's JSON-lines format (timestamp in ms, input_length, output_length,
    hash_ids; optional session_id), plain, .xz or .gz; default: the kit's Mooncake trace,
    one hour of a chat service (data/traces/). Without --target, every request is booked
    in the practice server's own model (the same code that serves live requests) on a
    virtual clock: an hour in seconds. With --target, each request is sent at its time
    (see docs/replay.md). Every configuration is recorded in results/replay.jsonl.

    \b
    Examples:
      python -m felab replay
      python -m felab replay --cache-blocks 1000,10000,50000,unlimited
      python -m felab replay --replicas 1,8,18,64 --route random,prefix
      python -m felab replay results/agent-trace.jsonl --replicas 18 --route random,affinity
      python -m felab replay --limit 100 --speed 20 --prefill-tps 100000 --target mock
      python -m felab replay --profile data/profiles/lesson-mac.toml --replicas 1,18
    """
    refuse_unread(ctx)  # `make replay REPLICAS=8`: a make variable this target would drop
    path = trace.MOONCAKE if trace_path is None else learner_folder() / trace_path  # as typed there
    guard_paid(flags["target"], limit)
    if flags[FROM_TRACE] is None:
        flags[FROM_TRACE] = str(trace.block_tokens(path, limit))
    base = replace(DEFAULTS, **ctx.meta.get(UNFLAGGED, {}))  # a --profile's settings replay has no flag for
    configs, swept = configurations({k.field: flags[k.field] for k in KNOBS}, base)
    check_live(ctx, flags["target"], flags["base_url"], configs)
    check_cache_size(ctx, configs)
    price, whose = the_price(flags["price_in"], flags["price_cached"])
    twin = from_context(ctx)  # the row names its profile, as a live twin's rows do (results.py)
    profiled = {"profile": twin.name, "profile_engine": twin.engine} if twin else {}
    rows = []
    for s, got in zip(configs, run_configs(path, limit, configs, swept, price, flags), strict=True):
        head = {"trace": path.name, "block_tokens": s.block_tokens, "speed": flags["speed"], **profiled}
        row = {**head, **got, "prices": whose}
        record("replay", row)
        rows.append(row)
        if flags["as_json"]:
            click.echo(json.dumps(row))
    if not flags["as_json"]:
        counted = report.requests_words(rows[0], failures=len(rows) == 1)  # a sweep's differ: the table
        click.echo(f"{path.name}: {counted} · " + report.settings_line(rows[0], swept))
        click.echo(f"prices: ${price.input:g} per 1M input tokens, ${price.cached:g} cached ({whose})\n")
        click.echo(report.tables(rows, swept))
        for line in (report.overload_note(rows), report.failed_note(rows), picture(rows, swept)):
            if line:
                click.echo("\n" + line)


def run_configs(
    path: Path, limit: int | None, configs: list[Settings], swept: list[Knob], price: Price, flags: dict
) -> Iterator[dict[str, Any]]:
    """Every configuration's row, in order, each as soon as it is done: in real time one after
    another; in virtual time serially, in --jobs processes or on the --scheduler's Dask cluster
    (parallel.py)."""
    if flags["target"]:
        live = {k: flags[k] for k in ("target", "base_url", "model", "max_tokens", "workers")}
        own = own_server(flags["target"], flags["base_url"])
        for s in configs:
            config = describe(s, swept) if own else "the server as it was started"
            click.echo(f"  replaying {path.name} on {flags['target']}: {config} ...", err=True)
            yield run_live(path, limit, s, flags["speed"], price, live)
        return
    jobs = min(flags["jobs"] or parallel.cores(), len(configs))
    scheduler = flags["scheduler"]
    serial = jobs == 1 and not scheduler
    if len(configs) > 1 and not serial:
        where = f"on the Dask cluster at {scheduler}" if scheduler else f"in {jobs} processes (--jobs {jobs})"
        click.echo(f"  replaying {path.name}: {len(configs)} configurations {where} ...", err=True)

    finished = []

    def tell(event: str, s: Settings) -> None:
        if len(configs) > 1 and event == "start":
            click.echo(f"  replaying {path.name}: {describe(s, swept)}", err=True)
        elif len(configs) > 1:
            finished.append(s)
            click.echo(f"  done {len(finished)} of {len(configs)}: {describe(s, swept)}", err=True)

    sweep = len(configs) > 1  # then each process keeps the parsed trace for its next configuration
    run_one = functools.partial(
        run_virtual, path, limit, flags["speed"], price, progress=serial, remember=sweep
    )
    yield from parallel.run_all(run_one, configs, jobs, scheduler, path, tell)


def describe(s: Settings, swept: list[Knob]) -> str:
    """A configuration in a few words, for the progress line."""
    fields = recorded(s)
    cells = {k.column: report.knob_cell(k, fields) for k in report.config_knobs(swept)}
    return ", ".join(f"{column} {'n/a' if cell is None else cell}" for column, cell in cells.items())


def open_for_writing(path: Path) -> IO[str]:
    """A text file to write, compressed with xz if its name ends in .xz (…jsonl.xz.part too)."""
    if ".xz" in path.suffixes:
        return lzma.open(path, "wt", encoding="utf-8")
    return path.open("w", encoding="utf-8")


@click.command("agent-trace")
@click.argument("out", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--sessions",
    default=agent.AgentShape.sessions,
    show_default=True,
    type=click.IntRange(min=1),
    help="agent sessions in the trace",
)
@click.option(
    "--rate",
    default=agent.AgentShape.rate,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="sessions starting per second, on average",
)
@click.option(
    "--turns",
    default=agent.AgentShape.turns,
    show_default=True,
    type=click.IntRange(min=1),
    help="turns per session, on average",
)
@click.option(
    "--idle-share",
    default=agent.AgentShape.idle_share,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="share of turns that come after an idle spell",
)
@click.option(
    "--idle-s",
    default=agent.AgentShape.idle_s,
    show_default=True,
    type=click.FloatRange(min=0),
    help="an idle spell's length on average, seconds",
)
@click.option(
    "--block-tokens",
    default=DEFAULTS.block_tokens,
    show_default=True,
    type=click.IntRange(min=16),
    help="tokens per block of the hash ids",
)
@click.option(
    "--seed", default=agent.AgentShape.seed, show_default=True, help="the same seed writes the same trace"
)
def agent_trace_command(out: Path | None, **shape: Any) -> None:
    """Write a trace of lesson 06's agent: one shared opening, turns whose history grows, idle spells.

    \b
    Mooncake's format with a session_id on every line, so `--route affinity` has
    something to route by. OUT defaults to results/agent-trace.jsonl (.xz compresses).
    Replay it with `python -m felab replay OUT`.

    \b
    Examples:
      python -m felab agent-trace
      python -m felab agent-trace results/agent-big.jsonl.xz --sessions 20000 --rate 5
    """
    out = out or results_dir() / "agent-trace.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")  # renamed when whole: an interrupted run leaves no half trace
    try:
        with open_for_writing(part) as f:
            totals = agent.write(agent.AgentShape(**shape), f)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    part.replace(out)
    click.echo(
        f"wrote {out}: {totals.requests:,} requests in {shape['sessions']:,} sessions over "
        f"{totals.span_s / 60:.0f} min; {totals.prompt_tokens:,} prompt tokens, "
        f"{100 * totals.repeated_tokens / totals.prompt_tokens:.1f}% of them in blocks an earlier prompt had "
        f"(the most a cache could reuse)"
    )
    click.echo(f"replay it: python -m felab replay {trace.shown(out)}")
