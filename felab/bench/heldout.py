"""`make bench`'s held-out phase: the twin against the real server, on work nobody tuned it on.

    python -m felab.bench.heldout                 # every case the machine has (each missing one: a line)
    python -m felab.bench.heldout --case np1      # one case
    python -m felab.bench.heldout --tiny          # a practice server with known settings as the "real" one

For each case: start the real server, calibrate it (`felab calibrate`, a profile), start a practice
server with that profile (the twin), then send the same held-out work to both, in rounds that take
turns (as `--check` does, so both see the same drift of a shared machine's speed). The work is
none of calibrate's probes and none of `--check`'s kinds (the issue's list):

    cold prompts of 4 lengths            between calibrate's and --check's lengths
    an opening then questions            a shorter opening than --check's, other questions
    a growing 8-turn conversation        each turn's prompt is the last one, a reply and a question
    2 and 4 cold prompts at once
    a long reply's mean token gap        200 tokens
    a warm question 100 ms behind a cold prompt

Each kind's median TTFT (the long reply: its mean token gap) on the twin against the real server's:
the target is within 10%, or 5 ms (0.5 ms for a token gap). The cases (each needs what it names):

    np4     the kit's tiny model on llama-server, 4 seats of 8,192, one thread (make llama-server,
            make tiny-model)
    np1     the same, 1 seat of 8,192
    wide    a model 3x wider and 2x deeper (384 wide, 4 layers; written here), 2 seats, one thread
    other   a tiny model the kit did not make: its GGUF named by --other-model, or in `make bench`
            by FELAB_OTHER_MODEL (make bench FELAB_OTHER_MODEL=/path/to/model.gguf)
    mlx     mlx_lm.server on CPU with the kit's tiny model (make engines)

Each kind that misses gets a line saying why, read from the profile's terms
(felab/calibrate/causes.py): the real server's own noise, the token count, a miss its prompts make
alone too, a cold prompt's miss carried into the wait behind it, waiting behind other prompts'
steps, a term that would have to cost so much more or less, or a mechanism no term can
stand for. Before the rounds, the profile's reference prompts go to the real server again (as
`--check` sends them): a shared machine's speed moves within minutes, and a calibration made in a
slow minute reads as a twin too slow. Each case says how many times their calibration time they
took, and what its kinds would read with the twin scaled by that; after the rounds they go again,
and a case whose reference moved by more than 10% between says so. It asserts nothing (a shared
machine's noise is what it shows); the figures go to docs/runs/.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tabulate import tabulate

from felab.bench.calibrate import KNOWN, LLAMA_SERVER, TINY_MODEL, engine_process, known_flags, load
from felab.calibrate import causes, command, evidence, prompts
from felab.calibrate import check as card
from felab.calibrate.probes import Prober, Sample
from felab.connect import client, served_model
from felab.errors import FelabError
from felab.mock_server.launch import free_port, practice_server
from felab.mock_server.profile import load as load_profile
from felab.mock_server.profile import read_settings
from felab.paths import KIT_ROOT, learner_folder
from felab.targets import NO_KEY, Target

COLD_SHARES = (0.18, 0.35, 0.52, 0.7)
"""Cold lengths as shares of the longest prompt a seat takes: none is calibrate's (6, 15, 30, 50,
75, 100%) or --check's (11, 22, 40, 62, 88%)."""
OPENING_SHARE, QUESTIONS_AFTER = 0.3, 4
COLD = "cold, "
"""How the kinds of cold prompts read alone are named (the alike cause compares the others with them)."""
TURNS = 8
TURN_REPLY = "Noted. I will keep that in mind and answer in the policy's own words."
"""The assistant's turn in the conversation, written here (not the model's reply, which differs
between the servers): both get the same growing prompt."""
LONG_REPLY = 200
BEHIND_S, BEHIND_SHARE = 0.1, 0.5
ROUNDS = 5
START_S = 300
"""How long a real server may take to load its model (a wider one, on a busy machine)."""
TPOT = "long reply: mean token gap"
BEHIND = "warm question 100 ms behind a cold prompt"


def held_out_round(p: Prober, biggest: int, out: dict[str, list[Sample]]) -> None:
    """One round of every kind of held-out work on one server, its samples added to `out` by kind."""

    def add(kind: str, got: list[Sample]) -> None:
        out.setdefault(kind, []).extend(got)

    def text(share: float) -> str:
        return prompts.opening(p.tokens_to_chars(int(biggest * share)), p.rng, card.HELD_OUT)

    p.call(prompts.fresh(200, p.rng))  # untimed: the server sat idle while the other took its turn
    for share in COLD_SHARES:
        cold = prompts.fresh(p.tokens_to_chars(int(biggest * share)), p.rng, True)
        add(f"{COLD}~{int(biggest * share):,} tokens", [p.call(cold)])
    opening = text(OPENING_SHARE)
    asked = [prompts.with_question(opening, q) for q in prompts.QUESTIONS[-QUESTIONS_AFTER - 1 :]]
    p.call(asked[0], keep_opening=True)  # untimed: it reads the opening (--check times that kind)
    add("questions after an opening", [p.call(m, keep_opening=True) for m in asked[1:]])
    add("8-turn conversation, turns 2-8", conversation(p, text(0.08))[1:])
    for n in (2, 4):
        at_once = [prompts.fresh(p.tokens_to_chars(int(biggest * 0.25)), p.rng, True) for _ in range(n)]
        add(f"{n} cold prompts at once", p.together(at_once))
    add(TPOT, [p.call(prompts.fresh(p.tokens_to_chars(100), p.rng, True), LONG_REPLY)])
    cold = prompts.fresh(p.tokens_to_chars(int(biggest * BEHIND_SHARE)), p.rng, True)
    add(BEHIND, [behind(p, text(0.2), cold)])


def conversation(p: Prober, opening: str) -> list[Sample]:
    """A conversation that grows: each turn sends the whole history, the last reply and a new question."""
    messages: list[dict] = [{"role": "system", "content": opening}]
    got = []
    for question in (prompts.QUESTIONS * 2)[:TURNS]:
        messages.append({"role": "user", "content": question})
        got.append(p.call(list(messages), keep_opening=True))
        messages.append({"role": "assistant", "content": TURN_REPLY})
    return got


def behind(p: Prober, opening: str, cold: list[dict]) -> Sample:
    """A question after a cached opening, sent 100 ms after a cold prompt: its TTFT (the cold one's
    prefill is under way when it comes)."""
    warm = prompts.with_question(opening, prompts.QUESTIONS[0])
    p.call(warm, keep_opening=True)  # untimed: the opening is cached
    later = prompts.with_question(opening, prompts.QUESTIONS[1])
    first = threading.Thread(target=p.call, args=(cold,))
    first.start()
    time.sleep(BEHIND_S)
    try:
        return p.call(later, keep_opening=True)
    finally:
        first.join()


def alternate(real: Prober, twin: Prober, biggest: int, rounds: int) -> tuple[card.Rounds, card.Rounds]:
    """The held-out work on both servers, round by round, taking turns; the same prompts to both."""
    got: tuple[card.Rounds, card.Rounds] = ([], [])
    for r in range(rounds):
        for p, mine in zip((real, twin), got, strict=True):
            p.rng = random.Random(p.seed * 1009 + r)
            held_out_round(p, biggest, card.new_round(mine))
        print(f"    round {r + 1}/{rounds} (load average {load()})", flush=True)
    return got


def rows(real: card.Rounds, twin: card.Rounds) -> list[card.Row]:
    """One row per kind: TTFT medians; the long reply's row compares its token gaps."""
    a, b = card.pooled(real), card.pooled(twin)
    out = []
    for kind in a:
        value, floor = (card.tpot, card.TPOT_FLOOR_MS) if kind == TPOT else (card.ttft, card.FLOOR_MS)
        row = card._row(kind, a[kind], b.get(kind, []), value)
        out.append(dataclasses.replace(row, floor_ms=floor, real_itself=card.itself(real, kind, value)))
    return out


# ── The cases: how each real server starts ────────────────────────────────────


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    start: Callable[[Path], contextlib.AbstractContextManager[Target]]
    missing: Callable[[], str | None]


def llama(model: Callable[[Path], Path], seats: int, context: int) -> Callable[[Path], Any]:
    @contextlib.contextmanager
    def start(folder: Path) -> Iterator[Target]:
        port = free_port()
        argv = [str(LLAMA_SERVER), "-m", str(model(folder)), "-c", str(context), "-np", str(seats)]
        argv += ["-t", "1", "--host", "127.0.0.1", "--port", str(port)]
        with engine_process(argv, f"http://127.0.0.1:{port}/health", "llama-server", timeout_s=START_S):
            yield named(Target("llamacpp", f"http://127.0.0.1:{port}/v1", "", NO_KEY, False))

    return start


def named(target: Target) -> Target:
    return Target(target.name, target.base_url, served_model(target), NO_KEY, False)


def wide_model(folder: Path) -> Path:
    """The 384-wide, 4-layer model, written once into the run's folder (random weights, offline)."""
    out = folder / "wide"
    if not (out / "tiny-model.gguf").exists():
        cmd = [sys.executable, "-m", "felab", "tiny-model", "--hidden", "384", "--layers", "4", str(out)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=KIT_ROOT)
    return out / "tiny-model.gguf"


@contextlib.contextmanager
def mlx(folder: Path) -> Iterator[Target]:
    port = free_port()
    argv = [str(KIT_ROOT / ".venv" / "bin" / "mlx_lm.server"), "--model", str(TINY_MODEL.parent / "hf")]
    with engine_process(
        [*argv, "--host", "127.0.0.1", "--port", str(port)],
        f"http://127.0.0.1:{port}/health",
        "mlx_lm.server",
        timeout_s=START_S,
    ):
        # mlx_lm.server reads a request's model as a path or repo (felab/engine_families/mlx.py); its
        # GET /v1/models lists the hub cache, not the model it loaded. Named by its folder, the model
        # is the one loaded, and calibrate counts tokens with the tokenizer.json in it.
        yield Target("mlx", f"http://127.0.0.1:{port}/v1", str(TINY_MODEL.parent / "hf"), NO_KEY, False)


@contextlib.contextmanager
def known_server(folder: Path) -> Iterator[Target]:
    with practice_server(*known_flags(KNOWN | {"context_tokens": 4 * 2_000})) as url:
        yield named(Target("mock", url, "", NO_KEY, False))


def need_llama() -> str | None:
    if not LLAMA_SERVER.exists():
        return "no llama-server (make llama-server)"
    return None if TINY_MODEL.exists() else "no tiny model (make tiny-model)"


def need_other() -> str | None:
    if not OTHER_MODEL or not OTHER_MODEL[0].is_file():
        named = f" ({OTHER_MODEL[0]} is not a file)" if OTHER_MODEL else ""
        return (
            f"no GGUF of a tiny model the kit did not make{named}: name one with "
            f"make bench {OTHER_ENV}=/path/to/model.gguf (or --other-model here)"
        )
    return need_llama()


def need_mlx() -> str | None:
    if not (KIT_ROOT / ".venv" / "bin" / "mlx_lm.server").exists():
        return "no mlx_lm.server (make engines)"
    return None if (TINY_MODEL.parent / "hf").is_dir() else "no tiny model (make tiny-model)"


def tiny_model(folder: Path) -> Path:
    return TINY_MODEL


OTHER_ENV = "FELAB_OTHER_MODEL"
OTHER_MODEL: list[Path] = []
"""The GGUF of a model the kit did not make (--other-model), if one was named."""


def other_model(folder: Path) -> Path:
    return OTHER_MODEL[0]


LLAMA_NP = "llama-server -np {} -c {} -t 1"
CASES = (
    Case(
        "np4", "the kit's tiny model, " + LLAMA_NP.format(4, 32768), llama(tiny_model, 4, 32768), need_llama
    ),
    Case("np1", "the kit's tiny model, " + LLAMA_NP.format(1, 8192), llama(tiny_model, 1, 8192), need_llama),
    Case("wide", "384 wide, 4 layers, " + LLAMA_NP.format(2, 16384), llama(wide_model, 2, 16384), need_llama),
    Case(
        "other",
        "a model the kit did not make, " + LLAMA_NP.format(1, 8192),
        llama(other_model, 1, 8192),
        need_other,
    ),
    Case("mlx", "the kit's tiny model, mlx_lm.server (CPU)", mlx, need_mlx),
)
TINY = Case("known", "a practice server with known settings (as the real one)", known_server, lambda: None)


def run_case(
    case: Case, folder: Path, rounds: int, biggest: int
) -> tuple[list[card.Row], dict[str, str], str]:
    """Calibrate the case's real server, start its twin, run the held-out work on both. The rows,
    each miss's cause, and the reference prompts' time against calibration's, before the rounds
    and after them (`reference_now`, `speeds`)."""
    print(f"\n== held out: {case.name}: {case.what} (load average {load()}) ==", flush=True)
    with case.start(folder) as real_target:
        profile = folder / f"{case.name}.toml"
        steady_profile(real_target, profile)
        seed = 2026
        real = Prober(real_target, client(real_target), 10_000, lambda s: None, seed=seed)
        real.chars_per_token = card.sizing(real, seed)
        doc, settings = load_profile(profile), read_settings(profile)
        speed = reference_now(real, doc.get("measured", {}), settings, seed)
        with practice_server("--profile", str(profile)) as url:
            twin_target = named(Target("mock", url, "", NO_KEY, False))
            twin = Prober(twin_target, client(twin_target), 10_000, lambda s: None, seed=seed)
            twin.chars_per_token = real.chars_per_token
            got = alternate(real, twin, biggest, rounds)
        after = reference_now(real, doc.get("measured", {}), settings, seed + 1, "after")
    table = rows(*got)
    print(tabulate([r.cells() for r in table], headers="keys", floatfmt=".1f"))
    met = sum(r.within for r in table)
    print(f"{case.name}: {met} of {len(table)} kinds within target")
    for note in (card.scaled_note(table, speed), drift_note(speed, after)):
        if note is not None:
            print(note)
    said = causes_of(table, got, settings, doc.get("fit", {}).get("ttft_residual_median_pct"), biggest)
    for kind, line in said.items():
        print(f"  why {kind}: {line}")
    if said:
        print("the profile's settings:", {k: v for k, v in settings.items() if k != "tokenizer"})
    return table, said, speeds(speed, after)


CALIBRATIONS = 2
"""Calibrations of a case at most: one more when the first says the machine's speed moved."""


def steady_profile(target: Target, profile: Path) -> int:
    """Calibrate `target` into `profile`; a profile whose reference prompts say the machine's speed
    moved while it measured (evidence.SPEED_MOVED: its terms mix two speeds) is made again, as its
    warning advises, up to CALIBRATIONS times, and the last kept. A calibration after the first that
    fails (refused, too slow) keeps the one before. The held-out phase judges the twin's structure,
    not one disturbed minute of calibration. How many calibrations the profile kept took."""
    for n in range(1, CALIBRATIONS + 1):
        if n > 1:
            print(f"{evidence.SPEED_MOVED}: calibrating again ({n} of {CALIBRATIONS} at most)", flush=True)
        made = profile if n == 1 else profile.with_name(f"{profile.stem}-again{profile.suffix}")
        t0 = time.monotonic()
        try:
            command.calibrate(target, made, max_requests=300, yes=True)
        except FelabError as e:
            if n == 1:
                raise
            print(f"calibrating again failed, the profile before kept: {e.message}", flush=True)
            return n - 1
        print(f"calibrated in {time.monotonic() - t0:.0f} s", flush=True)
        made.replace(profile)
        warned = load_profile(profile).get("fit", {}).get("warnings", [])
        if not any(evidence.SPEED_MOVED in w for w in warned):
            return n
    return CALIBRATIONS


def reference_now(
    real: Prober, measured: dict[str, Any], settings: dict[str, Any], seed: int, when: str = "before"
) -> float | None:
    """The profile's reference prompts (cold, of the length calibrate timed them at: its
    `measured` table) sent to the real server again: how many times their time at calibration
    they take now (check.py's probe). Said on a line; None if the profile has no reference.
    `when`: before or after the rounds (new text each time: `seed`)."""
    tokens = measured.get("reference_tokens")
    if not isinstance(tokens, int):
        return None
    now = card.reference(real, tokens, real.chars_per_token, seed)
    ratio = card.reference_ratio(now, measured, settings)
    if ratio is not None:
        print(f"the reference prompts ({tokens:,} tokens, cold), {when} the rounds: {ratio:.2f}x their "
              f"time at calibration", flush=True)  # fmt: skip
    return ratio


DRIFT = 0.1
"""The reference moved more than this share between before and after the rounds: the machine's
speed moved within them (np1, 2026-12-07: 1.24x before one run, 0.75x before the next)."""


def drift_note(before: float | None, after: float | None) -> str | None:
    """What the reference before and after the rounds says of the rounds between them: None if
    either is missing or they differ by DRIFT or less."""
    if before is None or after is None or (moved := abs(after / before - 1)) <= DRIFT:
        return None
    return (
        f"the machine's speed moved during the rounds: the reference read {before:.2f}x before them and "
        f"{after:.2f}x after, so no one scale stands for them; a miss of {moved:.0%} or less may be the "
        f"machine's"
    )


def speeds(before: float | None, after: float | None) -> str:
    """The summary's column: the reference before the rounds, and after them."""
    return " -> ".join(f"{r:.2f}x" for r in (before, after) if r is not None) or "-"


def causes_of(
    table: list[card.Row],
    got: tuple[card.Rounds, card.Rounds],
    settings: dict[str, Any],
    fitted: float | None,
    biggest: int,
) -> dict[str, str]:
    """Why each missed kind missed (felab/calibrate/causes.py), by kind. The cold kinds come first
    in the table: each later kind is compared with them (the alike and carried causes; the warm
    question waits behind a cold prompt of `biggest` · BEHIND_SHARE tokens)."""
    said: dict[str, str] = {}
    alone: list[causes.Alone] = []
    for row in table:
        real, twin = (card.pooled(r).get(row.kind, []) for r in got)
        if not row.within:
            said[row.kind] = causes.cause(
                row.real_p50,
                row.twin_p50,
                row.real_itself,
                (real, twin),
                settings,
                row.kind == TPOT,
                fitted,
                alone,
                int(biggest * BEHIND_SHARE) if row.kind == BEHIND else None,
            )
        if row.kind.startswith(COLD) and real and row.real_p50:
            alone.append(causes.Alone.of(row.kind, row.real_p50, row.twin_p50, real, said.get(row.kind)))
    return said


BLIS_TTFT = 0.176
"""BLIS's published held-out TTFT error, the median over 36 runs (22.8% in a 38-run comparison):
the closest peer to a calibrated twin (../shared/reference/simulators-and-routers.md)."""


def ttft_error(table: list[card.Row]) -> float:
    """The twin's median TTFT error over a case's kinds, absolute, as a share of the real median:
    the figure BLIS states (BLIS_TTFT). The long reply's token gap is not a TTFT: left out."""
    return statistics.median(abs(card.relative(r.twin_p50, r.real_p50)) for r in table if r.kind != TPOT)


def summary_row(case: str, table: list[card.Row], said: dict[str, str], speed: str) -> dict[str, str]:
    """A case's line in the summary: kinds within target, the kinds where the real server met that
    target against itself (its even rounds against its odd: `Row.itself_within`, a harsher test
    than the twin's), how many misses are the server's own spread, the median TTFT error, the
    worst kind, the misses' causes and the machine's speed."""
    worst = max(table, key=lambda r: abs(card.relative(r.twin_p50, r.real_p50)))
    met, compared = card.itself_met(table)
    return {
        "case": case,
        "within target": f"{sum(r.within for r in table)} of {len(table)}",
        "the real server against itself": f"{met} of {compared}" if compared else "-",
        "misses no larger than the server's own spread": str(sum(r.noise_only for r in table)),
        f"median TTFT error (BLIS {BLIS_TTFT:.1%})": f"{ttft_error(table):.1%}",
        "worst kind": worst.kind,
        "its error": card.error(worst.twin_p50, worst.real_p50),
        "misses' causes": ", ".join(sorted({line.split(":")[0] for line in said.values()})) or "-",
        "reference now / at calibration (before -> after)": speed,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", action="append", choices=[c.name for c in CASES], help="only this case")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds on each server [{ROUNDS}]")
    ap.add_argument("--tiny", action="store_true", help="a practice server as the real one, 1 round, short")
    ap.add_argument(
        "--other-model",
        type=Path,
        default=os.environ.get(OTHER_ENV) or None,
        help=f"the GGUF of a model the kit did not make (case other) [default: ${OTHER_ENV}]",
    )
    args = ap.parse_args(argv)
    OTHER_MODEL[:] = [learner_folder() / args.other_model] if args.other_model else []  # (absolute: as is)
    cases = [TINY] if args.tiny else [c for c in CASES if not args.case or c.name in args.case]
    rounds, biggest = (1, 1_500) if args.tiny else (args.rounds, 6_000)
    summary = []
    with tempfile.TemporaryDirectory(prefix="felab-heldout-") as tmp:
        for case in cases:
            why = case.missing()
            if why:
                print(f"\n== held out: {case.name}: left out: {why} ==")
                summary.append({"case": case.name, "within target": f"left out: {why}"})
                continue
            try:
                table, said, speed = run_case(case, Path(tmp), rounds, biggest)
            except FelabError as exc:  # one case that fails does not end the others
                print(f"{case.name}: failed: {exc.message}", flush=True)
                summary.append({"case": case.name, "within target": f"failed: {exc.message}"})
                continue
            summary.append(summary_row(case.name, table, said, speed))
    print("\n" + tabulate(summary, headers="keys"))


if __name__ == "__main__":
    main()
