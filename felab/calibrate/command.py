"""`python -m felab calibrate` (and `make calibrate`): measure a server, write its profile; or check one.

    python -m felab calibrate --target llamacpp                       # measure, write a profile
    python -m felab calibrate --check PROFILE --target llamacpp       # the twin's report card

It says up front how many requests it will send (never more: `--max-requests`), asks
before it spends money on a paid target, prints a line per step, and ends with the
fitted settings and what each means, or with one message saying why it could not.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import os
import random
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import Any

import click
from tabulate import tabulate

from felab.calibrate import check as card
from felab.calibrate import counting, evidence
from felab.calibrate import profile as prof
from felab.calibrate.plan import SEAT_ROOM, Plan, Speed, make_plan, measure
from felab.calibrate.probes import (
    BIGGEST,
    DECODE_MAX_TOKENS,
    SMALLEST_CONTEXT,
    Prober,
    ServerFacts,
    delivery_ms,
    server_facts,
)
from felab.calibrate.save import ProfileNotWritten, check_out
from felab.connect import client, resolve, served_model
from felab.errors import FelabError
from felab.make_vars import refuse_unread
from felab.mock_server.launch import practice_server
from felab.mock_server.profile import ProfileError, absent_tokenizer, load, read_settings
from felab.paths import from_here, learner_folder
from felab.prices import price_for
from felab.redact import redact
from felab.results import busy, record
from felab.tables import table
from felab.targets import NO_KEY, TARGETS, Target

MAX_REQUESTS = 250
"""`--max-requests` by default."""
MAX_MINUTES = 10.0
"""Calibrate's time bound by default (`--max-minutes`): a server whose plan would take longer is
stopped once its speed is known, after a dozen requests."""
DURATION = (
    "about 2 minutes on a server that reads a cold 3,000-token prompt within 1 s, longer in "
    "proportion on a slower one (it says how long once it has timed its first prompts)"
)
"""How long calibrate takes, as it announces it (plan.py's docstring works it out)."""
SPARE = 1.2
"""The bound the too-slow message advises: the projection and a fifth more, so that the same
server on a busier moment is not stopped again."""


def fresh_seed() -> int:
    """A new seed for the probes' text every run: a server keeps earlier runs' prompts (llama.cpp's
    --cache-ram, vLLM's prefix cache), and a prompt it has seen is no cold probe. Within one
    --check, the real server and its twin get the same seed, so the same prompts."""
    return random.SystemRandom().randrange(2**32)


def say(line: str) -> None:
    """Print a line of calibrate's report (never a key, nor a password in an address: `redact`)."""
    click.echo(redact(line))


def connect(target_name: str, base_url: str | None, model: str | None) -> Target:
    """The target, its model asked from the server (felab.connect.resolve): a server that is down,
    or that is not OpenAI-compatible, stops here with the kit's one message for it, before anything
    is counted."""
    return resolve(argparse.Namespace(target=target_name, base_url=base_url, model=model))


def announce(
    target: Target,
    facts: ServerFacts,
    requests: int,
    tokens: int | None,
    yes: bool,
    duration: str = DURATION,
    spare: int = 0,
) -> None:
    """Say what will be sent, and how long it takes; on a paid target, ask first (or take --yes).
    `requests` holds the `spare` ones, sent only to replace replies that carry no text."""
    seats = (
        f", {facts.seats} seat{'s' if facts.seats > 1 else ''} of {facts.seat_context:,} tokens"
        if facts.seats and facts.seat_context
        else ""
    )
    say(f"target: {target.name} · {target.base_url} · model: {target.model} · {facts.engine}{seats}")
    volume = f" (about {tokens:,} prompt tokens)" if tokens else ""
    kept = f", {spare} of them only to replace replies with no text" if spare else ""
    say(f"it sends at most {requests} streamed requests{volume}{kept}; {duration}.")
    if target.is_paid:
        price = price_for(target)
        cost = (
            f" (its prompts about ${tokens * price.input / 1e6:.3f} at the list input price, "
            f"{price.source}; the replies' few tokens are billed besides, at the output price)"
            if price and tokens
            else ""
        )
        say(f"{target.name} is paid: these requests bill your account{cost}.")
        terminal = sys.stdin is not None and sys.stdin.isatty()  # (none: never wait for an answer)
        if not yes and not (terminal and click.confirm("send them?", default=False)):
            raise FelabError("nothing was sent (not confirmed). Add --yes to skip the question.")


def calibrate(
    target: Target,
    out: Path | None,
    max_requests: int,
    yes: bool,
    max_minutes: float = MAX_MINUTES,
    again: Callable[[int], str] | None = None,
    given: tuple[str | None, str | None] = (None, None),
) -> Path:
    """Measure, fit, check the fit's evidence, write the profile, print what it found. Once the
    server's speed is known, stop if the plan would take over `max_minutes` (`again(minutes)`: the
    learner's command with the bound raised; by default one built from the target). `given`: the
    learner's --base-url and --model, which the check it advises needs too."""
    facts = server_facts(target)
    plan = make_plan(facts, max_requests, besides=counting.REQUESTS)  # the cap is on all it sends
    requests = plan.announced() + counting.REQUESTS
    announce(target, facts, requests, plan.prompt_tokens() + counting.PROMPT_TOKENS, yes, spare=plan.spare())
    prober = Prober(target, client(target, timeout=120.0), requests, say, seed=fresh_seed())
    rerun = again or (lambda minutes: rerun_command(target.name, target.base_url, max_minutes=minutes))
    m = measure(prober, plan, facts, bound(plan, facts, max_minutes, rerun, prober))
    say(f"  and how it counts tokens: {counting.TEXTS} texts of prose, code, numbers, another script")
    counted = counting.find(prober, target, lcp=prof.cache_of(m).kind == "seat-prefix")
    seconds = prober.elapsed_s()
    load = evidence.load_average()
    say("  and the practice server's own delivery time here (a throw-away one, not the target)")
    profile = prof.build(
        m, target, plan, seconds, prober.used, delivery_ms(), load, prober.empty + prober.ended_at_once
    )
    profile.settings |= counted.settings  # how the twin counts tokens: the engine's tokenizer, or characters
    profile.measured |= counted.measured
    refused = evidence.refusals(m, profile.settings)
    if refused:
        raise FelabError(
            f"calibrate measured {'; and '.join(refused)}. No real engine does that, so no profile "
            f"was written: the {target.name} server's times did not follow its prompts' lengths (a "
            f"busy machine or server, a cache that answered the cold prompts, or a proxy that "
            f"buffers replies). Calibrate again on a quiet machine, with nothing else using the server."
        )
    verify(profile)
    try:
        path = prof.write(profile, out or prof.default_path(target))
    except ProfileNotWritten as exc:  # a full disk: the profile on the terminal, then the message
        say(exc.text)
        raise
    say(f"\nmeasured in {seconds:.0f} s with {prober.used} requests. The fitted profile:\n")
    say(tabulate(prof.rows(profile.settings), headers="keys", disable_numparse=True))
    f, found = profile.fit, profile.measured
    say(
        f"\nfit: TTFT of {f['prefill_points']} cold prompt lengths (medians), off by "
        f"{f['ttft_residual_median_pct']}% (median) and {f['ttft_residual_max_pct']}% at most. "
        f"Overhead: {f['overhead_fitted_ms']} ms fitted, "
        f"less the practice server's own {f['delivery_subtracted_ms']} ms here (the twin adds it back)."
    )
    say(counted.line)
    say(f"prefix cache: reused {found['cache_reuse']} ({found['cache_evidence']}).")
    if "host_cache" in found:
        kept = "host_cache_tokens" in profile.settings
        say(
            f"beyond the seats: kept {found['host_cache']} ({found['host_cache_evidence']}"
            + ("; the twin keeps the server's -c in host memory)." if kept else ").")
        )
    st = profile.settings
    say(
        f"after a cached opening: {st['cached_token_us']} µs more per cached token in the prefill "
        f"that reuses it; each reply token {st.get('decode_context_ns', 0)} ns slower per prompt token."
    )
    say(f"a last piece of few rows: {found['rows_probe'].split(';')[0]}.")
    say(
        together_line(
            plan.streams, st["batch_tokens"], found, st.get("batch_slowdown", 0.0), st.get("step_policy")
        )
    )
    for line in found["terms_left_out"]:
        say(f"{line}.")
    if prober.ended_at_once:
        say(
            f"{prober.ended_at_once} probes of prompt reading got a reply with no text (the model ended "
            f"it at once): each was timed by the end of its reply, which came when a first token would have."
        )
    if prober.empty:
        say(
            f"{prober.empty} replies carried no text (nothing to time): each was sent again with new "
            f"text, and the figures hold only replies with text."
        )
    for warning in f.get("warnings", []):
        say(f"\nWARNING: {warning}")
    shown = os.path.relpath(path, learner_folder())
    say(
        f"\nprofile written: {shown}"
        + (" (with the warnings above, which --check repeats)" if f.get("warnings") else "")
    )
    say(f"check the twin:  {rerun_command(target.name, *given, check=shown)}")
    say(f"serve the twin:  {from_here('make mock')} PROFILE={shown}")
    return path


def rerun_command(
    target_name: str,
    base_url: str | None = None,
    model: str | None = None,
    out: Path | None = None,
    max_requests: int | None = None,
    yes: bool = False,
    max_minutes: int | None = None,
    check: str | None = None,
) -> str:
    """The calibrate command with the learner's own flags (those given: they work again from the
    folder it was typed in) and the ones the advice changes (`check`: the profile to check)."""
    words = ["python -m felab calibrate", *([f"--check {shlex.quote(check)}"] if check else [])]
    words.append(f"--target {target_name}")
    given = {
        "--base-url": base_url,
        "--model": model,
        "--out": out,
        "--max-requests": max_requests,
        "--max-minutes": max_minutes,
    }
    words += [f"{flag} {shlex.quote(str(value))}" for flag, value in given.items() if value is not None]
    return " ".join(words + (["--yes"] if yes else []))


def bound(
    plan: Plan, facts: ServerFacts, max_minutes: float, again: Callable[[int], str], prober: Prober
) -> Callable[[Speed], None]:
    """Calibrate's time bound, for `measure`: once the server's speed is known, say how long the
    whole plan takes on it, and stop (nothing written yet) if that is over `max_minutes`."""

    def check_speed(speed: Speed) -> None:
        minutes = plan.projected_s(speed, counting.REQUESTS, counting.PROMPT_TOKENS) / 60
        tokens, seconds = speed.long
        said = f"this server read {tokens:,} tokens in {seconds:.2f} s"
        say(f"    {said}: calibrating it takes about {max(minutes, 0.1):.1f} minutes")
        if minutes > max_minutes:
            raise FelabError(
                f"calibrate stopped: this server is too slow to calibrate within --max-minutes "
                f"{max_minutes:g}. A cold prompt of {tokens:,} tokens took {seconds:.2f} s, so its "
                f"plan (about {plan.read_tokens(speed):,} prompt tokens to read) would take about "
                f"{minutes:.1f} minutes. It stopped after {prober.used} requests; nothing was "
                f"written. To calibrate it anyway, allow that long (a fifth to spare, for a busier "
                f"moment): `{again(math.ceil(minutes * SPARE))}`. Or "
                f"{faster(plan, facts, speed, max_minutes)}"
            )

    return check_speed


def faster(plan: Plan, facts: ServerFacts, speed: Speed, max_minutes: float) -> str:
    """What makes this server quicker to calibrate, where it reports its context: a smaller one
    (the plan's prompts follow it), the largest whose plan fits the bound at the measured speed."""
    if facts.seat_context is None:
        return "calibrate a faster deployment of it (a GPU, or a smaller model)."
    for seat in (4096, 2048, SMALLEST_CONTEXT + SEAT_ROOM):
        smaller = dataclasses.replace(plan, biggest=min(plan.biggest, seat - SEAT_ROOM))
        fits = smaller.projected_s(speed, counting.REQUESTS, counting.PROMPT_TOKENS) <= 60 * max_minutes
        if seat < facts.seat_context and fits:
            return (
                f"restart the server with seats of {seat:,} tokens ({flags_for(facts, seat)}): "
                f"calibrate's prompts follow "
                f"the context, and then fit in the time; use the profile with the context you really run "
                f"(--context-tokens, --seats)."
            )
    return "calibrate it on a faster machine (a GPU), or with a smaller model: no smaller context fits."


def flags_for(facts: ServerFacts, seat: int) -> str:
    """The server's own flags for seats of `seat` tokens, as many seats as it has."""
    if facts.seats and facts.engine.startswith("llama.cpp"):
        return f"-c {seat * facts.seats} -np {facts.seats}"
    if facts.seats:  # the practice server's flags
        return f"--context-tokens {seat * facts.seats} --seats {facts.seats}"
    return f"{facts.engine}: {'--context-length' if facts.engine == 'SGLang' else '--max-model-len'} {seat}"


def verify(profile: prof.Profile) -> None:
    """Read the profile back with the practice server's own loader before it is written: calibrate
    never writes a profile its own server would refuse."""
    with tempfile.TemporaryDirectory() as folder:
        trial = Path(folder) / "calibrated.toml"
        trial.write_text(prof.to_toml(profile), encoding="utf-8")
        try:
            read_settings(trial)
        except ProfileError as exc:
            why = str(exc).replace(f"the profile {trial} ", "it ")
            raise FelabError(
                f"calibrate's fit gave settings the practice server would refuse ({why}), so no "
                f"profile was written. The server's figures were possible but led nowhere a twin can "
                f"go: calibrate again on a quiet machine; if it happens again, the messages above "
                f"say what was measured."
            ) from None


BATCH_FITS_PCT = 10.0
"""A batch size whose first tokens are off by more than this (mean, %) does not describe the server."""


def together_line(
    streams: int, batch: int | str, found: dict[str, Any], slowdown: float = 0.0, policy: str | None = None
) -> str:
    """What the prompts sent at once showed: the batch size (and slowdown) fitted, the first tokens
    measured and the twin's, and a word when no batch size reproduces them (`policy` mlx: MLX's
    batches, each prompt `batch` tokens a step)."""
    err, real, twin = found["batch_tokens_error_pct"], found["together_ttft_ms"], found["together_twin_ms"]
    if not real:
        return f"{streams} cold prompts at once: not measured, {err}; batch_tokens left at none."
    longer = "longer" if slowdown > 0 else "shorter"
    shared = f", a batch shared by several prompts {abs(slowdown):.0%} {longer}" if slowdown else ""
    if batch == "none":
        how = "each prompt's first token at the end of its own prefill"
    elif policy == "mlx":
        how = f"read together, as MLX batches them: each prompt up to {batch:,} tokens a step{shared}"
    else:
        how = f"prefilled in batches of {batch:,} tokens{shared}"
    shown = f"batch_tokens {batch}" + (f", batch_slowdown {slowdown:g}" if slowdown else "")
    shown += ", step_policy mlx" if policy == "mlx" else ""
    line = (
        f"{streams} cold prompts at once: {how} ({shown}): first tokens "
        f"{', '.join(map(str, real))} ms measured, the twin {', '.join(map(str, twin))} ms "
        f"(off by {err}% on average)."
    )
    if err > BATCH_FITS_PCT:
        line += (
            f" No batch size brings the twin within {BATCH_FITS_PCT:g}%: this server shares prefill "
            f"in a way the twin does not model (docs/practice-server.md, 'What the twin cannot do (yet)')."
        )
    return line


def profile_settings(path: Path) -> dict[str, Any]:
    """The profile's settings, or the one message that says why it cannot be used (here: its twin
    could not count tokens, so nothing is sent)."""
    try:
        settings = read_settings(path)
    except ProfileError as exc:
        raise FelabError(str(exc)) from None
    absent = absent_tokenizer(path, settings)
    if absent:
        raise FelabError(absent)
    return settings


def check(
    target: Target,
    path: Path,
    settings: dict[str, Any],
    max_requests: int,
    yes: bool,
    picture: Path | None,
    rounds: int = card.ROUNDS,
) -> list[card.Row]:
    """The held-out work on the real server and on the twin; the table; the picture. First: does
    the server look like the profile's (else ask, or refuse without a terminal), and is this
    machine as fast as when the profile was made (its reference prompts, sent again)."""
    facts = server_facts(target)
    whole = load(path)
    about, fitted, measured = (whole.get(k) or {} for k in ("profile", "fit", "measured"))
    differs = card.differences(about, settings, facts, target)
    if differs:
        confirm_other_server(path, differs, yes)
    biggest = BIGGEST if facts.seat_context is None else facts.seat_context - DECODE_MAX_TOKENS - 64
    biggest = min(BIGGEST, biggest)
    ref_tokens = measured.get("reference_tokens") if isinstance(measured, dict) else None
    need = card.requests(biggest, rounds) + card.SIZING_PROMPTS
    need += card.REFERENCE_REPEATS if isinstance(ref_tokens, int) else 0
    need += card.SIZING_TRIES  # card.sizing: one untimed prompt of the held-out text, or two
    if need > max_requests:
        raise FelabError(
            f"the check sends {need} requests to the real server; --max-requests is {max_requests}. "
            f"Allow {need} or more."
        )
    spare = min(max(5, need // 5), max_requests - need)  # as calibrate's: Plan.spare
    took = f"{rounds} rounds on each server (75 s on the kit's tiny llama.cpp; longer on a slower one)"
    announce(target, facts, need + spare, card.prompt_tokens(biggest, rounds), yes, took, spare)
    doubts = fitted.get("warnings") if isinstance(fitted, dict) else None
    for warning in doubts or []:
        say(f"WARNING (from the profile, when it was made): {warning}")
    seed = fresh_seed()
    real_prober = Prober(target, client(target), need + spare, say, seed=seed)
    ratio = None
    if isinstance(ref_tokens, int):
        chars_per_token = float(settings.get("chars_per_token", 4.0))
        now = card.reference(real_prober, ref_tokens, chars_per_token, seed)
        ratio = card.reference_ratio(now, measured, settings)
        shown = ", ".join(f"{s.ttft_ms:.0f}" for s in now)
        said = "" if ratio is None else f": {ratio:.2f}x the time when the profile was made"
        say(f"the reference prompts first ({ref_tokens:,} tokens, cold): TTFT {shown} ms{said}")
    real_prober.chars_per_token = card.sizing(real_prober, seed)
    counted = measured.get("token_count") if isinstance(measured, dict) else None
    say(
        f"held-out text (unlike calibrate's): {real_prober.chars_per_token / card.SIZING_MARGIN:.2f} "
        f"characters a token on the real server (prompts sized at {card.SIZING_MARGIN:.0%} of it, so "
        f"each fits a seat); the profile counts tokens with {counted or 'characters (an older profile)'}"
    )
    say(
        f"the real server ({target.name}) and its twin (a practice server with --profile {path.name}), "
        f"{rounds} rounds, taking turns:"
    )
    with practice_server("--profile", str(path)) as url:
        twin_target = Target("mock", url, "", NO_KEY, False)
        twin_target = Target("mock", url, served_model(twin_target), NO_KEY, False)
        twin_prober = Prober(twin_target, client(twin_target), need + spare, say, seed=seed)
        twin_prober.chars_per_token = real_prober.chars_per_token  # the same prompts to both
        done = card.workload(real_prober, twin_prober, biggest, rounds)
    real, twin = done.real, done.twin
    rows = card.compare(real, twin)
    moved = card.drift(card.pooled(real), settings)
    say("")
    say(table([r.cells() for r in rows], floatfmt=".1f"))
    met = sum(r.within for r in rows[:-1])
    say(
        f"\n{met} of {len(rows) - 1} kinds of work have the twin's median TTFT within "
        f"{card.TOLERANCE:.0%} (or {card.FLOOR_MS:g} ms) of the real server's."
    )
    for note in notes(rows, done, settings, counted, (ratio, moved), real_prober):
        say(note)
    for warning in doubts or []:
        say(f"WARNING (from the profile): {warning}")
    record(
        "calibrate-check",
        {
            "target": target.name,
            "model": target.model,
            "profile": str(path),
            "rows": [r.cells() for r in rows],
            "reference_ratio": ratio,
            "empty_replies": real_prober.empty,
            "rounds_left_out": done.left_out,
        },
    )
    if importlib.util.find_spec("matplotlib") is None:
        say(f"(no picture: `{from_here('make calibrate')}` installs what draws it)")
        return rows
    from felab.calibrate import plot

    real_samples, twin_samples = card.pooled(real), card.pooled(twin)
    cold = [k for k in real_samples if k.startswith("cold")]
    out = picture or path.with_name(path.stem + "-check.png")
    drawn = plot.draw(
        [s for k in cold for s in real_samples[k]],
        [s for k in cold for s in twin_samples.get(k, [])],
        settings,
        f"{target.name} ({PurePath(target.model).name}) and its twin: cold prompts",
        out,
    )
    say(f"picture: {drawn}")
    return rows


def confirm_other_server(path: Path, differs: list[str], yes: bool) -> None:
    """The server differs from the profile's: say how, and go on only if told to (--yes, or yes at a
    terminal). Without a terminal to ask (CI, a pipe), refuse: never wait for an answer."""
    say(f"the profile {path.name} was made on another server: " + "; ".join(differs) + ".")
    if yes:
        return
    if sys.stdin is not None and sys.stdin.isatty() and click.confirm("check it against this one anyway?"):
        return
    raise FelabError(
        f"nothing was sent: the profile was made on another server ({'; '.join(differs)}), and "
        f"checking it here would spend minutes comparing this server with another one's twin. "
        f"Check it against the server it was made on, or calibrate this one first; to check it "
        f"here anyway, add --yes."
    )


@click.command("calibrate", context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--target", "target_name", type=click.Choice(list(TARGETS)), default="llamacpp", show_default=True
)
@click.option("--base-url", help="the server's OpenAI-compatible URL, ending in /v1 (default: the target's)")
@click.option("--model", help="model id (default: the target's, or the one the server serves)")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="where to write the profile")
@click.option(
    "--check",
    "check_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="check this profile instead: held-out work on the server and on its twin",
)
@click.option(
    "--max-requests",
    type=click.IntRange(min=1),
    default=MAX_REQUESTS,
    show_default=True,
    help="never send the server more requests than this",
)
@click.option(
    "--max-minutes",
    type=click.FloatRange(min=0, min_open=True),
    default=MAX_MINUTES,
    show_default=True,
    help="stop (nothing written) when the server's speed, timed on its first prompts, puts "
    "calibrating it above this many minutes",
)
@click.option(
    "--plot", "picture", type=click.Path(dir_okay=False, path_type=Path), help="--check's picture (.png)"
)
@click.option(
    "--yes",
    is_flag=True,
    help="do not ask before sending requests to a paid target, or checking a profile made on another server",
)
def calibrate_command(
    target_name: str,
    base_url: str | None,
    model: str | None,
    out: Path | None,
    check_path: Path | None,
    max_requests: int,
    max_minutes: float,
    picture: Path | None,
    yes: bool,
) -> Any:
    """Measure a server and write a profile that makes the practice server behave like it.

    It fits, from about 110 streamed requests (it says how many at most before it
    sends one): the fixed overhead, prefill
    against uncached tokens and tokens already in context, the engine's characters per token,
    its prefix cache (whole blocks, or the longest common prefix per seat), how 4 prompts sent
    at once are prefilled, decode time per token and its slowdown with streams at once, and
    (llama.cpp) its seats and context from GET /props, and whether a prompt pushed out of every
    seat comes back cached (llama-server's --cache-ram). A reply with no text is sent again with
    new text (up to a fifth more requests, counted in the total it announces); a figure that
    cannot be true stops it; a busy machine or a doubtful fit is said, and kept in the profile.

    It takes about 2 minutes on a server that reads a cold 3,000-token prompt within 1 s, and
    longer in proportion on a slower one: after its first dozen requests it says how long, from
    the speed it measured, and stops there (nothing written) if that is over --max-minutes.

    \b
    Examples:
      python -m felab calibrate --target llamacpp
      python -m felab calibrate --check results/profiles/llamacpp-....toml --target llamacpp
      make mock PROFILE=results/profiles/llamacpp-....toml
    """
    refuse_unread(click.get_current_context())  # `make calibrate SEATS=4`: a variable make would drop
    here = learner_folder()  # paths as typed there (`make calibrate ARGS=...` runs at the kit's root)
    check_path, out, picture = (here / p if p is not None else None for p in (check_path, out, picture))
    settings = profile_settings(check_path) if check_path is not None else None  # before any request
    check_out(out)  # --out: a new file or a profile, never .env or a device
    target = connect(target_name, base_url, model)
    with busy("calibrate", target.base_url):  # a lesson run on this server meanwhile is not its step
        if check_path is not None and settings is not None:
            check(target, check_path, settings, max_requests, yes, picture)
        else:
            shown = max_requests if max_requests != MAX_REQUESTS else None

            def again(minutes: int) -> str:
                return rerun_command(target_name, base_url, model, out, shown, yes, minutes)

            calibrate(target, out, max_requests, yes, max_minutes, again, given=(base_url, model))


def notes(
    rows: list[card.Row],
    done: card.Workload,
    settings: dict[str, Any],
    counted: Any,
    speed: tuple[float | None, float | None],
    real_prober: Prober,
) -> list[str]:
    """What the card says under its table: the machine's own noise, then each note that applies
    (the token count, the last pieces, the machine's speed, replies with no text, rounds left out)."""
    real, twin = card.pooled(done.real), card.pooled(done.twin)
    said = [card.noise_note(rows)]
    said += [
        n for n in (card.count_note(real, twin, counted), card.pieces_note(real, twin, rows, settings)) if n
    ]
    moved = card.speed_note(*speed)
    if moved:
        said.append(f"note: {moved}")
    scaled = card.scaled_note(rows, speed[0])
    if scaled:
        said.append(scaled)
    if real_prober.ended_at_once:
        said.append(
            f"{real_prober.ended_at_once} replies of the real server carried no text and were timed by "
            f"their end (the model ended them at once: that end came when a first token would have)."
        )
    if real_prober.empty:
        said.append(
            f"{real_prober.empty} replies of the real server carried no text (nothing to time): each "
            f"was sent again with new text (the twin got the prompt as first written)."
        )
    if done.left_out:
        said.append(
            f"{len(done.left_out)} of {len(done.real) + len(done.left_out)} rounds were left out on both "
            f"servers, each for a request that failed (the medians hold the other rounds): "
            + "; ".join(done.left_out)
        )
    return said
