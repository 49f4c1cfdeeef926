"""Recording results, and resolving --target / --base-url / --model / .env."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from felab import FelabError, add_target_args, paths, read_records, record, resolve
from felab.connect import client

# ── record() ─────────────────────────────────────────────────────────────────


def test_record_appends_one_json_line_with_timestamp(isolated: Path) -> None:
    record("06-prefix", {"target": "mock", "model": "m", "first_ms": 1.5, "calls": [{"ttft_ms": 1.5}]})
    record("06-prefix", {"target": "llamacpp", "model": "m", "first_ms": 2.0})
    lines = (isolated / "06-prefix.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["target"] == "mock" and first["calls"] == [{"ttft_ms": 1.5}]
    assert first["ts"].endswith("+00:00")
    assert [r["target"] for r in read_records("06-prefix")] == ["mock", "llamacpp"]


def test_record_needs_target_and_model() -> None:
    with pytest.raises(ValueError, match="target"):
        record("x", {"model": "m"})


def test_record_rejects_keys_that_are_paths() -> None:
    with pytest.raises(ValueError):
        record("../escape", {"target": "t", "model": "m"})


def test_a_killed_run_keeps_every_row_it_recorded(isolated: Path) -> None:
    code = textwrap.dedent("""
        import sys, time
        from felab import record
        for i in range(3):
            record("killed", {"target": "mock", "model": "m", "i": i})
        print("recorded", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "recorded"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert [r["i"] for r in read_records("killed")] == [0, 1, 2]


# ── resolve() ────────────────────────────────────────────────────────────────


def parse(*argv: str) -> argparse.Namespace:
    return add_target_args(argparse.ArgumentParser()).parse_args(list(argv))


def test_default_target_is_the_practice_server_and_its_model_is_asked(mock_url: str, monkeypatch) -> None:
    monkeypatch.setenv("FELAB_MOCK_URL", mock_url)
    t = resolve(parse())
    assert (t.name, t.base_url, t.model, t.is_paid) == ("mock", mock_url, "felab-practice", False)


def test_flags_beat_env_beat_defaults(monkeypatch) -> None:
    monkeypatch.setenv("FELAB_VLLM_URL", "http://10.9.9.9:1/v1/")
    monkeypatch.setenv("FELAB_VLLM_MODEL", "from-env")
    t = resolve(parse("--target", "vllm"))
    assert (t.base_url, t.model) == ("http://10.9.9.9:1/v1", "from-env")
    t = resolve(parse("--target", "vllm", "--base-url", "http://127.0.0.1:9/v1", "--model", "flag"))
    assert (t.base_url, t.model) == ("http://127.0.0.1:9/v1", "flag")


def test_mlx_needs_no_model_lookup() -> None:
    t = resolve(parse("--target", "mlx"))
    assert (t.base_url, t.model) == ("http://127.0.0.1:8081/v1", "default_model")


def test_dotenv_at_the_kit_root_is_read_from_any_directory(tmp_path: Path, monkeypatch) -> None:
    env_file = tmp_path / "kit.env"
    env_file.write_text("FELAB_SGLANG_URL=http://127.0.0.1:1234/v1\nFELAB_SGLANG_MODEL=qwen\n")
    monkeypatch.setattr(paths, "ENV_FILE", env_file)
    monkeypatch.chdir(tmp_path)
    t = resolve(parse("--target", "sglang"))
    assert (t.base_url, t.model) == ("http://127.0.0.1:1234/v1", "qwen")


def test_fireworks_urls_come_from_one_root(monkeypatch) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-secret-123")
    t = resolve(parse("--target", "fireworks"))
    assert t.base_url == "https://api.fireworks.ai/inference/v1"
    assert t.model == "accounts/fireworks/models/gpt-oss-120b" and t.is_paid
    monkeypatch.setenv("FIREWORKS_BASE_URL", "http://127.0.0.1:5555/")
    assert resolve(parse("--target", "fireworks")).base_url == "http://127.0.0.1:5555/inference/v1"
    assert "fw-secret-123" not in repr(t)


def test_fireworks_without_a_key_says_where_to_put_it() -> None:
    with pytest.raises(FelabError) as info:
        resolve(parse("--target", "fireworks"))
    assert "FIREWORKS_API_KEY is not set" in info.value.message and ".env" in info.value.message


def test_a_server_that_is_down_names_the_command_that_starts_it() -> None:
    with pytest.raises(FelabError) as info:
        resolve(parse("--target", "llamacpp", "--base-url", "http://127.0.0.1:9/v1"))
    message = info.value.message
    assert "http://127.0.0.1:9/v1" in message and "serve_llamacpp.sh Q4_K_M 16384 4" in message
    assert "make check" in message


def test_the_client_never_retries_so_timings_stay_honest(mock_url: str, monkeypatch) -> None:
    monkeypatch.setenv("FELAB_MOCK_URL", mock_url)
    assert client(resolve(parse())).max_retries == 0


def test_a_key_is_never_sent_over_plain_http_to_another_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-test-key-123")
    args = add_target_args(argparse.ArgumentParser()).parse_args(
        ["--target", "fireworks", "--base-url", "http://api.fireworks.ai/inference/v1"]
    )
    with pytest.raises(FelabError, match="plain http:// address") as caught:
        resolve(args)
    assert "fw-test-key-123" not in caught.value.message


def test_a_missing_scheme_names_the_setting_read_and_https_for_another_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-test-key-123")
    monkeypatch.setenv("FIREWORKS_BASE_URL", "api.fireworks.ai")
    args = add_target_args(argparse.ArgumentParser()).parse_args(["--target", "fireworks"])
    with pytest.raises(FelabError) as caught:
        resolve(args)
    assert caught.value.message.startswith("FIREWORKS_BASE_URL is")
    assert "Use `FIREWORKS_BASE_URL=https://api.fireworks.ai` (in" in caught.value.message  # the root
    assert "inference/v1`" not in caught.value.message
    local = add_target_args(argparse.ArgumentParser()).parse_args(
        ["--target", "mock", "--base-url", "127.0.0.1:9/v1"]
    )
    with pytest.raises(FelabError, match=r"--base-url http://127\.0\.0\.1:9/v1"):
        resolve(local)


def test_a_refused_key_is_fixed_where_it_came_from(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from felab.targets import fix_key_advice

    env_file = tmp_path / "kit.env"
    monkeypatch.setattr(paths, "ENV_FILE", env_file)
    env_file.write_text("FIREWORKS_API_KEY=fw-from-the-file\n")
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-from-the-file")  # what load_env() would have set
    assert fix_key_advice("FIREWORKS_API_KEY").startswith(f"Check FIREWORKS_API_KEY in {env_file}")
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-exported-in-the-shell")  # an export wins over .env
    advice = fix_key_advice("FIREWORKS_API_KEY")
    assert "comes from this terminal" in advice and "unset FIREWORKS_API_KEY" in advice
    assert "fw-exported" not in advice and "fw-from-the-file" not in advice
