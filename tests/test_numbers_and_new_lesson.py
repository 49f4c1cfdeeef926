"""`make numbers` (your numbers, latest per target and order, and the TTFT picture) and
`make new-lesson` (a new lesson that `make smoke` runs with no other change)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KIT, run_felab, run_felab_peak

from felab import record


def calls(*ttft: float) -> list[dict]:
    return [{"ttft_ms": t, "prompt_tokens": 3050, "cached_tokens": 0} for t in ttft]


def fill_results() -> None:
    record(
        "06-prefix",
        {
            "target": "llamacpp",
            "model": "m",
            "order": "stable-first",
            "first_ms": 900.0,
            "rest_p50_ms": 80.0,
            "speedup_x": 11.25,
            "calls": calls(900, 80, 81),
        },
    )
    record(
        "06-prefix",
        {
            "target": "llamacpp",
            "model": "m",
            "order": "stable-first",
            "first_ms": 740.0,
            "rest_p50_ms": 36.0,
            "speedup_x": 20.56,
            "calls": calls(740, 36, 37),
        },
    )
    record(
        "06-prefix",
        {
            "target": "llamacpp",
            "model": "m",
            "order": "variable-first",
            "first_ms": 744.0,
            "rest_p50_ms": 712.0,
            "speedup_x": 1.04,
            "calls": calls(744, 712, 713),
        },
    )
    record(
        "06-prefix-usage",
        {
            "target": "fireworks",
            "model": "gpt-oss",
            "order": "stable-first",
            "prompt_tokens": 3039,
            "cached_tokens": 3024,
        },
    )


def test_numbers_prints_the_latest_row_per_target_and_order(isolated: Path) -> None:
    fill_results()
    out = run_felab("numbers")
    assert out.returncode == 0, out.stderr
    assert "740.0" in out.stdout and "900.0" not in out.stdout  # the later run replaced the earlier
    assert "712.0" in out.stdout and "3024" in out.stdout
    assert (isolated / "06-prefix-ttft.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_numbers_as_csv_and_json(isolated: Path) -> None:
    fill_results()
    rows = list(csv.DictReader(io.StringIO(run_felab("numbers", "--csv").stdout)))
    assert [(r["key"], r["order"]) for r in rows] == [
        ("06-prefix", "stable-first"),
        ("06-prefix", "variable-first"),
        ("06-prefix-usage", "stable-first"),
    ]
    assert rows[0]["rest_p50_ms"] == "36.0" and "calls" not in rows[0]
    data = json.loads(run_felab("numbers", "--json").stdout)
    assert data["06-prefix-usage"][0]["cached_tokens"] == 3024


def test_numbers_with_nothing_recorded_says_what_to_run() -> None:
    out = run_felab("numbers")
    assert out.returncode == 0 and "nothing recorded yet" in out.stdout and "make demo" in out.stdout


def test_a_tools_rows_name_the_command_that_records_them(isolated: Path) -> None:
    # `felab calibrate-check` was named, a command that does not exist ("No such command").
    record("calibrate-check", {"target": "mock", "model": "felab-practice", "rows": []})
    out = run_felab("numbers")
    said = " ".join(out.stdout.split())
    assert "1 row recorded by `felab calibrate --check`" in said and "felab calibrate-check" not in said, said


def kit_copy(tmp_path: Path) -> Path:
    """A copy of the kit (code, lessons, Makefile), so a test may add a lesson to it."""
    root = tmp_path / "kit"
    for part in ("felab", "lessons"):
        shutil.copytree(KIT / part, root / part, ignore=shutil.ignore_patterns("__pycache__", "*.txt"))
    shutil.copy(KIT / "Makefile", root / "Makefile")
    return root


def felab_in(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}  # the copy's felab, whose KIT_ROOT is the copy
    return subprocess.run(
        [sys.executable, "-m", "felab", *args], cwd=root, env=env, capture_output=True, text=True, timeout=180
    )


def test_a_new_lesson_runs_in_smoke_with_no_other_change(tmp_path: Path, mock_url: str) -> None:
    root = kit_copy(tmp_path)
    made = felab_in(root, "new-lesson", "07", "batching-basics")
    assert made.returncode == 0, made.stderr
    folder = root / "lessons" / "07-batching-basics"
    readme = (folder / "README.md").read_text()
    for section in (
        "## What and why",
        "## Read the code first",
        "## Run",
        "## What each command does",
        "## What you should see",
        "## Stuck?",
    ):
        assert section in readme
    assert (folder / "batching_basics.py").exists()
    assert {"page.md", "numbers.toml"} <= {p.name for p in folder.iterdir()}
    smoke = felab_in(root, "smoke")
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    assert "07-batching-basics" in smoke.stdout and "batching_basics.py" in smoke.stdout
    # its numbers, declared in its folder, are filled from a run (smoke records into a folder of its own)
    env = {**os.environ, "PYTHONPATH": str(root)}
    run = [sys.executable, "batching_basics.py", "--target", "mock", "--base-url", mock_url, "--quick"]
    ran = subprocess.run(run, cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    said = felab_in(root, "numbers").stdout
    line = next(x for x in said.splitlines() if "1. Practice server: TTFT p50 / p95 (ms)" in x)
    assert "not recorded yet" not in line and "on mock" in line, said


def test_a_new_lessons_page_builds_with_its_numbers(tmp_path: Path, isolated: Path) -> None:
    from felab.course import bundle, numbers
    from felab.course.new_lesson import create_lesson

    root = tmp_path / "kit"
    for part in ("course", "docs", "lessons"):
        shutil.copytree(KIT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(KIT / "mkdocs.yml", root)
    create_lesson("07", "batching", root / "lessons")
    record("07-batching", {"target": "mock", "model": "m", "ttft_p50_ms": 41.0, "ttft_p95_ms": 52.5})
    assert [f.key for f in numbers.declared(root / "lessons")["07-batching"]] == ["mock-ttft"]
    page = (bundle.build(root) / "lessons" / "07-batching.html").read_text(encoding="utf-8")
    assert 'id="n-07-batching-mock-ttft"' in page and 'value="41 / 52"' in page
    assert "Day 5" in page  # the day of lesson 06, the lesson before it


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ('[[field]]\nkey = "k"\nlabel = "l"\n', "field 1 does not follow docs/bundle.md: it has no hint"),
        ('[[field]]\nkey = "k"\nlabel = "l"\nhint = "h"\ncolour = "red"\n', "has unknown colour"),
        (
            '[[field]]\nkey = "k"\nlabel = "l"\nhint = "h"\n[field.source]\nrecords = "r"\n',
            "has no values, where",
        ),
        ("[[field]\n", "is not valid TOML"),
        ("", "declares no numbers"),
    ],
)
def test_a_malformed_numbers_toml_names_the_file_and_what_is_wrong(
    tmp_path: Path, toml: str, said: str
) -> None:
    from felab.course import numbers
    from felab.errors import FelabError

    (tmp_path / "07-x").mkdir()
    (tmp_path / "07-x" / "numbers.toml").write_text(toml)
    with pytest.raises(FelabError, match="numbers.toml") as error:
        numbers.declared(tmp_path)
    assert said in str(error.value)


def test_new_lesson_refuses_bad_or_taken_names(tmp_path: Path) -> None:
    root = kit_copy(tmp_path)
    for args, said in (
        (("7", "x"), "two digits"),
        (("07", "Bad_Name"), "lower-case"),
        (("06", "again"), "already exists"),
    ):
        out = felab_in(root, "new-lesson", *args)
        assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr


def test_your_numbers_lines_use_the_pages_mapping(isolated: Path) -> None:
    fill_results()
    record("06-affinity", {"target": "mock", "model": "m", "mode": "affinity", "calls": 36})  # a count
    out = run_felab("numbers")
    assert out.returncode == 0, out.stderr
    assert "1. llama.cpp, opening first: call 1 / middle of calls 2 to 12 (ms): 740 / 36" in out.stdout
    assert "2. llama.cpp, time first: speed-up: 1.0" in out.stdout
    assert "3. Fireworks, opening first: call 1 / middle of calls 2 to 12 (ms): not recorded yet" in (
        out.stdout
    )
    assert "4. Fireworks: cached tokens / prompt tokens: 3024 / 3039" in out.stdout


def test_numbers_reads_a_large_results_file_in_bounded_memory(isolated: Path) -> None:
    # 1,500 rows of 80 KB each (120 MB; per-call lists are what make real rows large). Read
    # whole, the file, its lines and their rows were all in memory at once (860 MB). Read a
    # line at a time, the peak is the kit's own (the same command on one row, measured here:
    # about 60 MB) plus the rows it keeps: margin, 40 MB, a third of the file.
    isolated.mkdir(parents=True, exist_ok=True)
    calls = [{"ttft_ms": 36.0 + i % 7, "prompt_tokens": 3050, "cached_tokens": 3024} for i in range(1300)]
    path = isolated / "06-prefix.jsonl"
    with path.open("w") as f:
        for i in range(1500):
            order = ("stable-first", "variable-first")[i % 2]
            row = {"ts": f"2026-11-30T04:{i % 60:02d}:00+00:00", "target": "llamacpp", "model": "m"}
            f.write(json.dumps({**row, "order": order, "first_ms": 700.0 + i, "calls": calls}) + "\n")
            if i == 0:
                f.flush()
                _, alone_mb = run_felab_peak("numbers", "--json")
    size_mb = path.stat().st_size / 2**20
    assert size_mb > 110
    out, peak_mb = run_felab_peak("numbers", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["06-prefix"][0]["first_ms"] == 2198.0  # the last stable-first row
    assert peak_mb - alone_mb < 40, (peak_mb, alone_mb, size_mb)


def test_numbers_into_a_full_disk_is_one_message_not_a_traceback(isolated: Path) -> None:
    fill_results()
    with open("/dev/full", "w") as full:
        out = subprocess.run(
            [sys.executable, "-m", "felab", "numbers", "--csv"],
            cwd=KIT,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env=dict(os.environ),
        )
    assert out.returncode == 2 and "Traceback" not in out.stderr and "Exception ignored" not in out.stderr
    assert out.stderr.startswith("error: this run's output could not be written (No space left on device)")
