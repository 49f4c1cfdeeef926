"""The front door: make help, felab check, felab smoke, felab demo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import KIT, run_felab, run_make


def test_make_help_lists_every_target_with_its_help_line() -> None:
    out = run_make(KIT, "--no-print-directory", "help")
    assert out.returncode == 0
    for target in ("setup", "demo", "mock", "check", "smoke", "test"):
        assert f"make {target} " in out.stdout


def test_check_shows_up_and_down_servers_and_never_the_key(mock_url: str, monkeypatch) -> None:
    monkeypatch.setenv("FELAB_MOCK_URL", mock_url)
    monkeypatch.setenv("FELAB_LLAMACPP_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-very-secret-key-42")
    out = run_felab("check")
    assert out.returncode == 0, out.stderr
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.strip()}
    assert " up " in lines["mock"] and "felab-practice" in lines["mock"]
    assert "down" in lines["llamacpp"] and "serve_llamacpp.sh" in lines["llamacpp"]
    assert "FIREWORKS_API_KEY is set" in lines["fireworks"]
    assert "fw-very-secret-key-42" not in out.stdout + out.stderr


def test_check_says_when_the_key_is_missing() -> None:
    out = run_felab("check")
    assert "FIREWORKS_API_KEY is NOT set" in out.stdout


def test_smoke_runs_every_lesson_script_without_touching_results(isolated: Path) -> None:
    out = run_felab("smoke")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "prefix_bench.py" in out.stdout and "ok" in out.stdout
    assert not isolated.exists()


def test_demo_prints_both_rows_as_the_lesson_says(isolated: Path) -> None:
    # The README's first command. The lesson expects ~34x and ~1.0x; the margins here are wider
    # than the (25-60 and 0.8-1.25) so a busy 2-core machine cannot make the test flaky.
    out = run_felab("demo", timeout=180)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in (isolated / "06-prefix.jsonl").read_text().splitlines()]
    stable, variable = rows
    assert stable["order"] == "stable-first" and 15 <= stable["speedup_x"] <= 80
    assert variable["order"] == "variable-first" and 0.7 <= variable["speedup_x"] <= 1.4
    table = out.stdout.split("Lesson 06 on the practice server")[1]
    assert "stable-first" in table and "variable-first" in table


def test_check_names_an_address_without_a_scheme_instead_of_calling_its_server_down(
    mock_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FELAB_MOCK_URL", mock_url.removeprefix("http://"))
    out = run_felab("check")
    assert out.returncode == 0, out.stderr
    assert "address without http://" in out.stdout and "down (start: make mock)" not in out.stdout
    assert f"Use `FELAB_MOCK_URL={mock_url}`" in " ".join(out.stdout.split())
