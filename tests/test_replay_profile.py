"""A replay through a profile is the twin's replay: its seats refuse what the live twin refuses, in
virtual time as in real time, and its rows and settings line name the profile.

The profile here has llama.cpp's shape (2 seats of 8,192 tokens, seat-prefix cache) and a fast
prefill, so the real-time half stays short. The first 30 requests of the kit's Mooncake trace
are 915 to 87,169 tokens long: how many a seat cannot hold is counted from the trace itself,
not from the kit (none lies within 4 tokens of the seat, the most the real-time text may add).
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest
from conftest import KIT, run_felab, run_make

from felab.replay import report

SEAT = 8192
PROFILE = f"""[profile]
schema = 1
engine = "llama.cpp (a test's)"

[settings]
prefill_tps = 1000000.0
cache_mode = "seat-prefix"
seats = 2
context_tokens = {2 * SEAT}

[sources]
seats = "a test's: llama.cpp -np 2 -c {2 * SEAT}"
"""
LIMIT = 30


def too_long_for_a_seat() -> list[int]:
    """The trace's own prompts a seat cannot hold (llama.cpp: a prompt of a seat or more), their lengths."""
    trace = Path(__file__).parents[1] / "data" / "traces" / "mooncake-conversation.jsonl.xz"
    with lzma.open(trace, "rt") as f:
        lengths = [json.loads(line)["input_length"] for _, line in zip(range(LIMIT), f, strict=False)]
    assert not any(SEAT - 4 <= n < SEAT + 4 for n in lengths)  # clear of the real-time text's slack
    return [n for n in lengths if n >= SEAT]


@pytest.mark.parametrize("mode", ["virtual", "real time"])
def test_a_profiles_seats_refuse_in_replay_what_the_live_twin_refuses(
    mode: str, tmp_path: Path, isolated: Path
) -> None:
    profile = tmp_path / "two-seats.toml"
    profile.write_text(PROFILE)
    live = ("--target", "mock", "--max-tokens", "2") if mode == "real time" else ()
    out = run_felab("replay", "--profile", str(profile), "--limit", str(LIMIT), "--speed", "10", *live)
    assert out.returncode == 0, out.stderr
    row = json.loads((isolated / "replay.jsonl").read_text().splitlines()[-1])
    longer = too_long_for_a_seat()
    refused = len(longer)
    assert 0 < refused < LIMIT
    assert (row["failed"], row["requests"]) == (refused, LIMIT - refused)
    assert row["failed_prompt_max"] == max(longer) and f"{LIMIT} requests ({refused} failed)" in out.stdout
    assert f"exceeds the available context size ({SEAT} tokens)" in row["first_error"]
    assert (row["profile"], row["context_tokens"], row["seats"]) == ("two-seats", 2 * SEAT, 2)
    assert "settings: profile two-seats" in out.stdout and f"2 seats of {SEAT:,} tokens" in out.stdout
    assert "Stop it" not in out.stdout  # the server a replay started is gone: no advice to restart it


def test_a_cache_size_is_refused_where_seats_keep_the_prompts(tmp_path: Path, isolated: Path) -> None:
    profile = tmp_path / "two-seats.toml"
    profile.write_text(PROFILE)
    out = run_felab("replay", "--profile", str(profile), "--limit", "3", "--cache-blocks", "0,4096")
    assert out.returncode == 2 and "--cache-blocks sizes the block cache" in out.stderr
    assert "profile two-seats's" in out.stderr and "Sweep --seats instead" in out.stderr
    shown = run_felab("replay", "--profile", str(profile), "--limit", "3")
    assert shown.returncode == 0, shown.stderr
    first_row = next(line for line in shown.stdout.splitlines() if line.strip().startswith("1 "))
    assert "4,096" not in first_row and "n/a" in first_row  # no block cache to size


def test_times_real_time_keeps_its_figures_below_ten() -> None:
    base = {"replicas": 1, "route": "affinity", "cache_blocks": 4096, "span_s": 1.0}
    slow = report.one_table([{**base, "x_real_time": 0.123}], [], report.TIMES)
    fast = report.one_table([{**base, "x_real_time": 4478.3}], [], report.TIMES)
    assert slow.splitlines()[-1].endswith("0.12") and fast.splitlines()[-1].endswith("4,478")


def test_the_overload_note_names_the_prefill_rate_the_row_ran_at() -> None:
    over = {"prefill_busy_pct": 140.0, "prefill_tps": 1050.0}
    assert "this one read 1,050 tokens/s" in report.overload_note([over])
    assert "this one read" not in report.overload_note([{**over, "prefill_tps": 2500.0}])


LESSON06 = KIT / "lessons" / "06-prefix-caching"


def test_make_replay_refuses_a_variable_it_would_not_read(isolated: Path) -> None:
    # `make replay REPLICAS=8` replayed one replica, the variable dropped without a word.
    out = run_make(LESSON06, "replay", "REPLICAS=8", "ARGS=--limit 3")
    assert out.returncode != 0 and "make replay ARGS='--limit 3 --replicas 8'" in out.stderr, out.stderr
    assert not (isolated / "replay.jsonl").exists()  # nothing replayed in its place
    # A name close to one it reads is that one; a name that is no flag is not made into one.
    typo = run_make(LESSON06, "replay", "PROFLE=mine.toml", "N=2")
    assert "Did you mean PROFILE= for PROFLE=?" in typo.stderr and "There is no flag --n" in typo.stderr
    assert "ARGS='--n" not in typo.stderr


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        (("mock", "PORT=1", "PROFIL=lesson-mac.toml"), "Did you mean PROFILE= for PROFIL=?"),
        (("mock", "PROT=1"), "Did you mean PORT= for PROT=?"),
        (
            ("mock", "PORT=1", "SEATS=4"),
            "a flag of the command it runs: `../../.venv/bin/python -m felab.mock_server --seats 4`",
        ),
        (("fleet", "ROUTR=none", "PORT=1"), "Did you mean ROUTER= for ROUTR=?"),
    ],
    ids=["mock PROFIL", "mock PROT", "mock SEATS", "fleet ROUTR"],
)
def test_make_mock_and_fleet_refuse_a_variable_they_would_not_read(typed: tuple[str, ...], says: str) -> None:
    # `make mock PROFIL=...` started the plain server, and `make mock PROT=8830` one on 8765; the
    # runs against them were recorded as such. (PORT=1: were it read, nothing could start there.)
    out = run_make(LESSON06, *typed, timeout=30)
    assert out.returncode == 2 or "Error 2" in out.stderr, out.stderr
    assert says in out.stderr and "(make help lists what each target reads.)" in out.stderr, out.stderr
    assert "listening" not in out.stdout and "Traceback" not in out.stderr


def test_a_refused_variables_value_is_never_run(tmp_path: Path, isolated: Path) -> None:
    # The refusal once echoed the value inside shell quotes: a quote in it ran the rest.
    marker = tmp_path / "ran"
    out = run_make(LESSON06, "replay", f"REPLICAS=x'; touch {marker}; echo '")
    assert out.returncode != 0 and "would drop REPLICAS" in out.stderr, out.stderr
    assert not marker.exists()


def test_make_replay_takes_a_profile_typed_in_a_lesson_folder(isolated: Path) -> None:
    out = run_make(LESSON06, "replay", "PROFILE=../../data/profiles/lesson-mac.toml", "ARGS=--limit 3 --json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["profile"] == "lesson-mac"


def test_a_refusal_names_the_setting_the_profile_brought() -> None:
    # `--seats none` next to lesson-mac: "give --seats too" alone left the learner asking where
    # --cache-mode seat-prefix came from (the profile).
    mac = str(KIT / "data" / "profiles" / "lesson-mac.toml")
    out = run_felab("replay", "--profile", mac, "--seats", "none", "--limit", "3")
    said = "profile lesson-mac sets --cache-mode seat-prefix"
    assert out.returncode == 2 and said in out.stderr, out.stderr
    typed = run_felab("replay", "--cache-mode", "seat-prefix", "--limit", "3")
    assert typed.returncode == 2 and "give it --seats N" in typed.stderr and "profile" not in typed.stderr


def test_the_context_the_note_names_holds_every_prompt(tmp_path: Path, isolated: Path) -> None:
    # The virtual refusal's note said llama.cpp's "try increasing it", and replay had no flag to.
    profile = tmp_path / "two-seats.toml"
    profile.write_text(PROFILE)
    out = run_felab("replay", "--profile", str(profile), "--limit", str(LIMIT))
    longest = max(too_long_for_a_seat())
    assert f"The longest prompt that failed has {longest:,} tokens" in out.stdout, out.stdout
    assert "fits with --context-tokens of more than that" in out.stdout
    roomy = run_felab("replay", "--profile", str(profile), "--limit", str(LIMIT), "--context-tokens",
                      str(2 * (longest + 1)), "--json")  # fmt: skip
    assert roomy.returncode == 0, roomy.stderr
    assert json.loads(roomy.stdout)["failed"] == 0
