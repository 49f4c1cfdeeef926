"""Damaged results files: every good line is kept, each bad one skipped and named once, nothing crashes.

A results file can be damaged by a full disk, a hand edit, or a copy from another
machine. `make numbers` and `make bundle` must still show what the good lines hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bundle_fixtures import RUNS, USAGE
from conftest import run_felab

from felab import read_records
from felab.course import bundle, numbers

GOOD_FIRST = {
    "ts": "2026-11-30T04:00:00+00:00",
    "target": "llamacpp",
    "model": "m",
    "order": "stable-first",
    "first_ms": 900.0,
    "rest_p50_ms": 80.0,
    "calls": [{"ttft_ms": 900.0}, {"ttft_ms": 80.0}],
}
GOOD_LAST = {**GOOD_FIRST, "ts": "2026-11-30T05:00:00+00:00", "first_ms": 740.0, "rest_p50_ms": 36.0}

BAD_LINES = [  # (the line, the reason named for it)
    (b'{"target": "llamacpp", "model": "m", "first_ms": 7', "not JSON"),  # cut short
    (b"[1, 2, 3]", "JSON, but list where a row (an object) belongs"),
    (b'"just a string"', "JSON, but str where a row"),
    (b'{"target": ["llamacpp"], "model": "m", "order": "stable-first", "first_ms": 1}', "`target` is list"),
    (b'{"target": "llamacpp", "model": {"a": 1}, "order": "stable-first"}', "`model` is dict"),
    (b'{"target": "llamacpp", "model": "m", "order": ["stable-first"]}', "`order` is list"),
    (b'{"target": "llamacpp", "model": "m", "ts": 12}', "`ts` is int"),
    (b'{"target": "mock", "model": "m", "profile": ["lesson-mac"]}', "`profile` is list"),  # grouped by
    (b'{"model": "m", "first_ms": 1}', "without its `target`"),
    (b'{"target": "llamacpp", "model": "caf\xe9"}', "not UTF-8"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b"[" * 100_000, "not JSON"),  # deeper than the parser's recursion limit
    (b'{"target": "llamacpp", "n": ' + b"9" * 5000 + b"}", "not JSON"),  # past int's digit limit
]


def write_damaged(folder: Path) -> Path:
    """results/06-prefix.jsonl: a good line, every kind of bad line, a good line last."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(GOOD_FIRST).encode(),
        *(line for line, _ in BAD_LINES),
        json.dumps(GOOD_LAST).encode(),
    ]
    path = folder / "06-prefix.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_read_records_keeps_the_good_lines_and_names_each_bad_one_once(isolated: Path, capsys) -> None:
    path = write_damaged(isolated)
    rows = read_records("06-prefix")
    assert [r["first_ms"] for r in rows] == [900.0, 740.0]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(BAD_LINES)
    for number, ((_, why), line) in enumerate(zip(BAD_LINES, err, strict=True), start=2):
        assert line.startswith(f"warning: {path}:{number}: skipped, "), line
        assert why in line and line.endswith("the other lines are kept.")
    read_records("06-prefix")  # read again in the same run: named once
    assert capsys.readouterr().err == ""


def test_numbers_survives_a_damaged_file(isolated: Path) -> None:
    path = write_damaged(isolated)
    for args in ((), ("--csv",), ("--json",)):
        out = run_felab("numbers", *args)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        assert "740" in out.stdout
        assert out.stderr.count(f"{path}:") == len(BAD_LINES)  # each bad line named once
    out = run_felab("numbers")
    assert "1. llama.cpp, opening first: call 1 / middle of calls 2 to 12 (ms): 740 / 36" in out.stdout


def test_numbers_survives_wrong_types_in_the_fields_it_reads(isolated: Path) -> None:
    # Lines that are good rows, with odd values where numbers belong: never shown as numbers.
    odd = [
        {**GOOD_LAST, "first_ms": 700.0, "calls": ["x", {"ttft_ms": "slow"}, {"ttft_ms": -1}]},
        {**GOOD_LAST, "first_ms": 700.0, "calls": {"not": "a list"}},
        {**GOOD_LAST, "first_ms": "999", "rest_p50_ms": 36.0},
        {**GOOD_LAST, "first_ms": True, "rest_p50_ms": 36.0},
        {**GOOD_LAST, "first_ms": float("nan"), "rest_p50_ms": float("inf")},  # json writes NaN, Infinity
    ]
    isolated.mkdir(parents=True, exist_ok=True)
    (isolated / "06-prefix.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [GOOD_FIRST, *odd]))
    (isolated / "06-prefix (copy).jsonl").write_text("{}\n")  # not a key the kit names: left alone
    for args in ((), ("--csv",), ("--json",)):
        out = run_felab("numbers", *args)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "NaN" not in run_felab("numbers", "--json").stdout
    out = run_felab("numbers")
    # the latest row whose values are finite numbers: the odd ones after it are passed over
    assert "1. llama.cpp, opening first: call 1 / middle of calls 2 to 12 (ms): 700 / 36" in out.stdout
    assert "nan" not in out.stdout.split("your numbers")[1]


@pytest.mark.parametrize("ts", ["0001-01-01T00:00:00+05:00", "yesterday", "9999-12-31T23:59:59-05:00"])
def test_a_time_at_the_edge_of_the_calendar_is_shown_as_written(ts: str) -> None:
    assert numbers._when(ts) in (ts, "9999-12-31 23:59 UTC")


def test_the_bundle_builds_from_a_damaged_file(tmp_path: Path, monkeypatch, capsys) -> None:
    results = tmp_path / "results"
    path = write_damaged(results)
    with path.open("ab") as f:
        f.write(b"".join(json.dumps(r).encode() + b"\n" for r in RUNS))
    (results / "06-prefix-usage.jsonl").write_bytes(
        b"\xff\n[]\n" + b"".join(json.dumps(r).encode() + b"\n" for r in USAGE)
    )
    monkeypatch.setenv("FELAB_RESULTS_DIR", str(results))
    site = bundle.build(site=tmp_path / "site", staging=tmp_path / "staging")
    html = (site / "lessons" / "06-prefix-caching.html").read_text(encoding="utf-8")
    assert 'value="610 / 180"' in html and 'value="2944 / 3110"' in html
    err = capsys.readouterr().err
    assert err.count(f"{path}:") == len(BAD_LINES)
    assert "06-prefix-usage.jsonl:1: skipped, its bytes are not UTF-8" in err


def test_a_line_longer_than_any_row_is_skipped_unread(isolated: Path, monkeypatch, capsys) -> None:
    # The cap is 64 MB; 1 KB here. The long line is read past in pieces, never held whole.
    from felab import results

    monkeypatch.setattr(results, "MAX_ROW_BYTES", 1024)
    isolated.mkdir(parents=True, exist_ok=True)
    long_line = json.dumps({**GOOD_FIRST, "pad": "x" * 3_000_000}).encode()
    lines = [json.dumps(GOOD_FIRST).encode(), long_line, json.dumps(GOOD_LAST).encode()]
    (isolated / "06-prefix.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    assert [r["first_ms"] for r in read_records("06-prefix")] == [900.0, 740.0]
    err = capsys.readouterr().err
    assert "06-prefix.jsonl:2: skipped, longer than 1,024 bytes, more than any row" in err
