"""The felab command line: the work behind the Makefile's front door.

    felab check        which servers are up, and whether the Fireworks key is set
    felab demo         lesson 06 on a fresh practice server, both orders, one table
    felab smoke        every lesson script against a fresh practice server, quick mode
    felab numbers      your numbers: the latest cold run per lesson, target and order
    felab fw-check     anything on Fireworks that is still billing (exit 0 none, 1 some, 2 unknown)
    felab bundle       the lesson pages as an offline site (`bundle build`, `bundle serve`)
    felab new-lesson   a new lesson folder that already runs
    felab replay       a production trace through the practice server's model (felab/replay/)
    felab agent-trace  a trace of lesson 06's agent, for `felab replay`
    felab tiny-model   the offline tiny model for the real engines (felab/tiny_model/)
    felab calibrate    measure a server and write a profile the practice server can run (felab/calibrate/)
    felab fleet        practice servers, each a process, behind a real router (felab/fleet/)

`make help` lists the Make targets that call these (tests/test_docs_match_code.py keeps this
list whole). A FelabError ends any of them with its one paragraph and exit status 2; Ctrl+C
says what the run recorded.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any, cast

import click
import openai

from felab.connect import model_ids, url_source, with_scheme
from felab.course.lessons import LESSONS_DIR, discover
from felab.engine_families.family import port_of
from felab.errors import (
    EXIT_ERROR,
    FelabError,
    WatchedOutput,
    debug_exit,
    fail,
    output_lost_message,
    silence_stdout,
    what_was_recorded,
)
from felab.guarded import ReplyStopped, guarded_client, stopped_by
from felab.mock_server.launch import practice_server
from felab.paths import KIT_ROOT, from_here, load_env, make_target
from felab.results import iter_records, results_path
from felab.tables import table
from felab.targets import LOOPBACK, TARGETS, configured_model, default_url, key_status, start_command

PREFIX_BENCH = LESSONS_DIR / "06-prefix-caching" / "prefix_bench.py"


RECORDS_HERE = {"replay"}
"""Commands that record rows in this process (this_run.RECORDED knows them): Ctrl+C says which."""


class FelabGroup(click.Group):
    """Turns a FelabError, or output that cannot be written, into its one-paragraph message and
    exit status 2."""

    def invoke(self, ctx: click.Context) -> object:
        inner = sys.stdout  # watched, so output that cannot be written is told as such (errors.py)
        output = WatchedOutput(inner) if inner is not None else None
        if output is not None:
            sys.stdout = output
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # here, not at exit, where a failure could only be a warning
            return result
        except FelabError as exc:
            if os.environ.get("FELAB_DEBUG"):
                debug_exit(exc)  # the traceback, keys redacted; still exit status 2
            fail(exc.message)
            ctx.exit(EXIT_ERROR)
        except (KeyboardInterrupt, click.Abort):
            if ctx.invoked_subcommand == "fw-check":  # exit 1 would mean "billing": it means unknown
                fail("interrupted: could not check what is billing on Fireworks. This is not an all-clear.")
                ctx.exit(EXIT_ERROR)
            if ctx.invoked_subcommand in RECORDS_HERE:  # says what it recorded, as a lesson's Ctrl+C does
                click.echo(f"\ninterrupted: {what_was_recorded()}", err=True)
            else:  # demo and smoke record in the lesson scripts they run, which say so themselves
                click.echo("\ninterrupted.", err=True)
            ctx.exit(130)
        except OSError as exc:
            if output is None or exc is not output.error:
                raise
            silence_stdout()
            recorded = f" {what_was_recorded()}" if ctx.invoked_subcommand in RECORDS_HERE else ""
            fail(output_lost_message(exc) + recorded)
            ctx.exit(EXIT_ERROR)
        finally:
            if sys.stdout is output:
                sys.stdout = inner


def require_extra(module: str, make_target: str) -> None:
    """Stop with a clear message when an optional part of the kit is not installed yet.

    Each extra (pyproject.toml) installs on first use of its make target, so that is the advice.
    """
    if importlib.util.find_spec(module) is None:
        raise FelabError(
            f"this command needs {module}, which is not installed in this environment. Run "
            f"`{from_here('make ' + make_target)}` instead: it installs it into the kit's .venv once."
        )


@click.group(cls=FelabGroup, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """felab: the inference-engineering lab kit."""


@cli.command()
def check() -> None:
    """Show which local servers are up (URL and model) and whether FIREWORKS_API_KEY is set.

    The URL and model are the ones a lesson script would use: FELAB_<TARGET>_URL and
    FELAB_<TARGET>_MODEL (shell or .env) where set. Never prints the key itself.
    """
    load_env()
    rows, notes = [], []
    for name, spec in TARGETS.items():
        url, model = default_url(name), configured_model(name)
        if spec.paid:
            state, problem = key_status(spec.key_env or "")
            rows.append({"target": name, "url": url, "status": state, "model": model})
            notes += [f"note: {problem}"] if problem else []
            continue
        try:
            url = with_scheme(url, url_source(name))  # as a script would read it
        except FelabError as exc:
            rows.append({"target": name, "url": url, "status": "address without http://", "model": model})
            notes.append(f"note: {exc.message}")
            continue
        try:
            status, model_shown = probe(name, url, model)
        except ReplyStopped as exc:  # a limit of the kit's: one row, and the message under the table
            status, model_shown = "up, but its answer was not readable (see below)", model or "?"
            notes.append(f"note: {exc.message}")
        except NotOpenAI as exc:  # something answers there, but not the server the target expects
            status, model_shown = "something else answers: not an OpenAI-compatible server (see below)", "-"
            notes.append(f"note: {exc.message}")
        rows.append({"target": name, "url": url, "status": status, "model": model_shown})
    click.echo(table(rows))
    for note in notes:
        click.echo(f"\n{note}")


def probe(name: str, url: str, model: str | None) -> tuple[str, str]:
    """Whether the server at `url` is up, and the model a script would ask it for. Its answer is
    read within the kit's limits (felab/guarded.py): one that passes them is a ReplyStopped. A
    server that answers `GET /v1/models` with anything but JSON (a web page, a file) is some other
    program, not the OpenAI-compatible server the target expects: a NotOpenAI that says what to do."""
    http = cast(Any, guarded_client(f"the {name} server at {url}", 2.0))  # as connect.client()'s
    api = openai.OpenAI(base_url=url, api_key="not-needed", max_retries=0, timeout=2.0, http_client=http)
    try:
        reply = api.models.with_raw_response.list()  # as sent: a page that is no list is seen as one
    except openai.APIStatusError as exc:
        if exc.status_code == 404 or "json" not in exc.response.headers.get("content-type", ""):
            raise not_openai_server(name, url, exc.status_code, exc.response.headers) from None
        return f"up (HTTP {exc.status_code} on /v1/models)", model or "?"  # an LLM server's refusal (a key)
    except openai.OpenAIError as exc:
        if (stopped := stopped_by(exc)) is not None:
            raise stopped from exc
        return f"down (start: {start_command(name, url)})", model or "asked from the server"
    try:
        ids = model_ids(json.loads(reply.text))
    except ValueError:  # not JSON at all
        ids = None
    if ids is None:
        raise not_openai_server(name, url, reply.status_code, reply.headers)
    if model is None:
        return "up", ", ".join(ids[:3]) or "no model"
    if ids and model not in ids and model != TARGETS[name].model:  # a FELAB_<TARGET>_MODEL it does not serve
        return f"up, but it serves {', '.join(ids[:3])}", model
    return "up", model


class NotOpenAI(FelabError):
    """A program answers at a target's address, but not as an OpenAI-compatible server."""


def not_openai_server(name: str, url: str, status: int, headers: Mapping[str, str]) -> NotOpenAI:
    """What answered at `url` (its `Server` header, its status and the kind of page), that it is
    not the server target `name` expects, and what to do: free the port for it, or start it on a
    free port and point the target there; for an address on another machine, check it."""
    server = headers.get("server")
    who = f"a program that calls itself `{server}`" if server else "a program that does not name itself"
    kind = headers.get("content-type", "").split(";")[0].strip() or "no content type"
    expected = "the practice server" if name == "mock" else f"a {name} server"
    said = (
        f"{who} answers at {url}, but it is not the OpenAI-compatible server the {name} target expects "
        f"({expected}): GET /v1/models gave HTTP {status} and a reply of {kind}, not OpenAI's list of models "
        f"(JSON). "
    )
    variable = url_source(name)
    port = port_of(url)
    if not LOOPBACK.match(url) or port is None:
        return NotOpenAI(said + f"Check the address: {variable} (in .env or the shell) names {url}.")
    other = free_port_after(port)
    moved = url.replace(f":{port}", f":{other}", 1)
    here = start_command(name, url)
    return NotOpenAI(
        said
        + (f"Stop that program, then start {expected} on port {port}: `{here}`. " if here else "")
        + f"Or leave it, and start {expected} on a free port, `{start_command(name, moved)}`, with "
        f"{variable}={moved} in .env (or the shell)."
    )


def free_port_after(port: int) -> int:
    """The first port above `port` that nothing listens on at 127.0.0.1 now (bound as the servers
    bind, SO_REUSEADDR: a port whose last connections are still closing is free)."""
    for candidate in range(port + 1, min(port + 200, 65536)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return candidate
    return port + 1


def _run_script(script: str, *args: str, env: dict[str, str] | None = None) -> int:
    """Run a lesson script as a learner would, its output going to this terminal."""
    return subprocess.call([sys.executable, script, *args], cwd=os.path.dirname(script), env=env)


@cli.command()
def demo() -> None:
    """Lesson 06 on a fresh practice server: opening first, then time first; one table."""
    before = sum(1 for _ in iter_records("06-prefix"))  # a row at a time: any file size
    with practice_server() as url:
        for order in ("stable-first", "variable-first"):
            click.echo(f"\n$ python prefix_bench.py --target mock --order {order}")
            code = _run_script(str(PREFIX_BENCH), "--target", "mock", "--base-url", url, "--order", order)
            if code:
                raise FelabError(f"prefix_bench.py --order {order} failed (exit {code}); see above.")
    rows = list(itertools.islice(iter_records("06-prefix"), before, None))
    columns = ("target", "order", "first_ms", "rest_p50_ms", "speedup_x", "cache_hit_pct")
    click.echo(f"\nLesson 06 on the practice server (recorded in {results_path('06-prefix')}):\n")
    click.echo(table([{k: r.get(k) for k in columns} for r in rows]))


@cli.command()
def smoke() -> None:
    """Run every lesson's scripts against a fresh practice server in quick mode.

    Results go to a temporary folder, not to your results/.
    """
    lessons = discover()
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp, practice_server() as url:
        env = {**os.environ, "FELAB_RESULTS_DIR": tmp}
        for lesson in lessons:
            for script in lesson.scripts():
                click.echo(f"  running {lesson.name}/{script.name} --quick ...", err=True)
                t0 = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, str(script), "--target", "mock", "--base-url", url, "--quick"],
                    cwd=lesson.path,
                    env=env,
                    capture_output=True,
                    text=True,
                )
                ok = proc.returncode == 0
                failed += not ok
                rows.append(
                    {
                        "lesson": lesson.name,
                        "script": script.name,
                        "result": "ok" if ok else f"FAILED (exit {proc.returncode})",
                        "seconds": round(time.perf_counter() - t0, 1),
                    }
                )
                if not ok:
                    click.echo(
                        f"--- {lesson.name}/{script.name} output ---\n{proc.stdout}{proc.stderr}", err=True
                    )
    click.echo(table(rows) if rows else f"no lesson scripts found under {LESSONS_DIR.relative_to(KIT_ROOT)}/")
    if failed:
        raise FelabError(f"{failed} lesson script(s) failed against the practice server; output above.")


@cli.command("fw-check")
def fw_check() -> None:
    """List anything on Fireworks that is still billing, with the command that stops it.

    Reads every deployment of your account (FIREWORKS_ACCOUNT_ID, else the one
    account FIREWORKS_API_KEY belongs to), following every page, and the
    fine-tuning (SFT, RFT, DPO) and batch-inference jobs. Billing means: a
    deployment not being deleted with running, desired or minimum replicas
    above 0, or a job that has not finished. Scaled-to-zero deployments are
    shown apart, as not billing. Never prints the key.

    \b
    Exit status:
      0  nothing is billing (one line says so)
      1  something is billing: listed, each with the command that stops it
      2  could not check (no key, key refused, network error, server error,
         a redirect, a reply too large or too slow, a reply it did not
         understand): says why, never an empty list
    (`make fw-check` itself exits 2 for both 1 and 2, as make does for any
    failed command; its last line says "Error 1" or "Error 2".)

    It cannot see reserved capacity (billed whether used or not; there is no
    API to list it) or anything billed to another account: for those, read
    the billing page of your Fireworks dashboard.

    \b
    Examples:
      make fw-check
      FIREWORKS_ACCOUNT_ID=my-account python -m felab fw-check
    """
    require_extra("fireworks", "fw-check")
    from felab.fireworks.billing import CouldNotCheck, check, emit  # the fireworks SDK: only when this runs

    try:
        text, status = check()
    except CouldNotCheck as exc:
        if exc.shown:  # what bills among what could be read, then the error
            emit(exc.shown)
        raise
    emit(text)  # output it cannot write is "could not check" (exit 2), never exit 1
    sys.exit(status)


@cli.group()
def bundle() -> None:
    """The course bundle: the lesson pages as an offline site (see docs/bundle.md)."""


@bundle.command("build")
def bundle_build() -> None:
    """Build the lesson pages into build/bundle/, your numbers filled from results/.

    Warnings are errors: a broken link or a missing include stops the build.
    Run it again after a run to fill in the new numbers.
    """
    require_extra("mkdocs", "bundle")
    from felab.course import bundle as b  # MkDocs loads only for this command

    site = b.build()
    click.echo(f"built the course pages: {site / 'index.html'}")
    if make_target() == "bundle-serve":  # this build is its first step: the serving comes next
        click.echo("serving them next, at the address below (typed numbers are kept per address).")
        return
    click.echo(
        f"open them with `{from_here('make bundle-serve')}` (typed numbers are kept per address, "
        f"so use that one)."
    )


@bundle.command("serve")
@click.option("--port", default=8770, show_default=True, help="port on 127.0.0.1 (numbers are per address)")
def bundle_serve(port: int) -> None:
    """Serve build/bundle/ on 127.0.0.1 until Ctrl+C."""
    from felab.course.bundle import SITE
    from felab.course.serve import served

    with served(KIT_ROOT / SITE, port) as url:
        click.echo(f"the course pages: {url}  (Ctrl+C stops)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            click.echo("stopped.")


@cli.command()
@click.option("--csv", "fmt", flag_value="csv", help="one CSV table, for a spreadsheet")
@click.option("--json", "fmt", flag_value="json", help="JSON, for a program")
def numbers(fmt: str | None) -> None:
    """Your numbers: the latest cold run per lesson, target and order, ready to copy.

    Reads everything under results/ (or $FELAB_RESULTS_DIR). In the default
    view it also draws each call's TTFT to results/<key>-ttft.png.
    """
    from felab.course import numbers as nb  # matplotlib loads only for this command

    found = nb.collect()
    if fmt == "csv":
        click.echo(nb.as_csv(found), nl=False)
        return
    if fmt == "json":
        click.echo(nb.as_json(found))
        return
    if not found:
        click.echo(
            f"nothing recorded yet under {nb.results_dir()}: run a lesson first "
            f"(`{from_here('make demo')}` does)."
        )
        for line in nb.not_lesson_lines(found):  # a trace there is no run (felab agent-trace)
            click.echo(f"  {line}")
        return
    click.echo(nb.as_text(found))
    for key, rows in found.items():
        if importlib.util.find_spec("matplotlib") is None:
            click.echo(f"(no TTFT picture: `{from_here('make numbers')}` installs what draws it)")
            break
        picture = nb.plot_ttft(key, rows)
        if picture:
            click.echo(f"picture: {picture}")


@cli.command("new-lesson")
@click.argument("number")
@click.argument("name")
def new_lesson(number: str, name: str) -> None:
    """Create lessons/NUMBER-NAME/: a README in the house sections, a runnable script, its
    course page (page.md) and its numbers (numbers.toml).

    \b
    Example:
      make new-lesson N=07 NAME=batching
    """
    from felab.course.new_lesson import create_lesson

    folder = create_lesson(number, name)
    files = ", ".join(sorted(p.name for p in folder.iterdir()))
    click.echo(f"created {folder.relative_to(KIT_ROOT)}/ ({files})")
    click.echo(
        f"`{from_here('make smoke')}` now runs it against the practice server, and "
        f"`{from_here('make bundle')}` builds its page."
    )


# Commands that live beside what they make.
from felab.tiny_model.build import tiny_model_command  # noqa: E402  (light: numpy and friends load on use)

cli.add_command(tiny_model_command)

from felab.replay.command import agent_trace_command, replay_command  # noqa: E402  (click only; drivers load on use)

cli.add_command(replay_command)
cli.add_command(agent_trace_command)

from felab.calibrate.command import calibrate_command  # noqa: E402

cli.add_command(calibrate_command)

from felab.fleet.command import fleet_command  # noqa: E402

cli.add_command(fleet_command)
