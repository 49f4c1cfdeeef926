"""Recording results, and resolving --target / --base-url / --model / .env."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import PREFIX_BENCH, run_script

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


KILLED_IN_WRITE = textwrap.dedent("""
    import os, sys
    from felab import record, results
    real_write = os.write
    def write(fd, data):  # say when record() starts its write, so the kill lands in it
        print("writing", flush=True)
        return real_write(fd, data)
    results.os.write = write
    record("big", {"target": "mock", "model": "m", "i": int(sys.argv[1]), "pad": "x" * int(sys.argv[2])})
    print("recorded", flush=True)
""")


def test_a_row_killed_while_it_is_written_never_leaves_a_torn_line(isolated: Path, capsys) -> None:
    # One write() of a large row on a local disk is cut short by SIGKILL (Linux checks for a
    # fatal signal between the pages it copies). record() must leave no torn line anyway:
    # a reader takes whole lines only, and the next record() removes the torn end first.
    # 6 rows of 16 MB, each writer killed 0 to 4 ms into its write (it takes about 10 ms), so
    # that most kills land inside it; the test needs at least one that did.
    record("big", {"target": "mock", "model": "m", "i": -1})
    path, pad, torn, whole = isolated / "big.jsonl", 16 * 2**20, 0, [-1]
    for i in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_IN_WRITE, str(i), str(pad)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline() == "writing\n"
        time.sleep(random.uniform(0, 0.004))
        proc.kill()
        proc.wait()
        data = path.read_bytes()
        torn += not data.endswith(b"\n")
        whole += [i] if data.endswith(b"\n") and len(data.rsplit(b"\n", 2)[-2]) > pad else []
        assert [r["i"] for r in read_records("big")] == whole  # whole rows, never a piece
        assert capsys.readouterr().err == ""  # and no line named as damaged
    assert torn >= 1, "no kill landed inside a write: the test proved nothing"
    record("big", {"target": "mock", "model": "m", "i": 99})
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # the file ends a line
    assert [json.loads(line)["i"] for line in lines[:-1]] == [*whole, 99]  # every line a whole row


@pytest.mark.parametrize("blocked", ["a file where the folder belongs", "a folder where the file belongs"])
def test_a_results_folder_that_cannot_be_written_loses_nothing(
    mock_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocked: str
) -> None:
    # As a learner meets it: the lesson runs, then its row cannot be written. Tests run as root,
    # whom chmod does not stop, so the folder is blocked by what is in the way instead.
    if blocked.startswith("a file"):
        (tmp_path / "not-a-folder").write_text("")
        folder = tmp_path / "not-a-folder" / "results"
    else:
        folder = tmp_path / "results"
        (folder / "06-prefix.jsonl").mkdir(parents=True)
    monkeypatch.setenv("FELAB_RESULTS_DIR", str(folder))
    out = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", mock_url, "--quick")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "first_ms" in out.stdout  # the table came first
    said = out.stderr.strip().splitlines()
    assert said[0].startswith(f"error: could not record this run's row in {folder / '06-prefix.jsonl'} (")
    assert "Nothing is lost" in said[0] and "FELAB_RESULTS_DIR" in said[0]
    row = json.loads(said[1])  # the row, whole, on its own line
    assert row["target"] == "mock" and len(row["calls"]) == 3 and row["ts"].endswith("+00:00")


def test_a_full_disk_cuts_nothing_into_the_file(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A write that a full disk cuts short is taken back whole, and the run told so.
    from felab import results

    record("full", {"target": "mock", "model": "m", "i": 0})
    before = (isolated / "full.jsonl").read_bytes()
    real_write = os.write
    monkeypatch.setattr(results.os, "write", lambda fd, data: real_write(fd, data[:10]))
    with pytest.raises(FelabError, match="only 10 of the row's") as caught:
        record("full", {"target": "mock", "model": "m", "i": 1})
    monkeypatch.undo()
    assert (isolated / "full.jsonl").read_bytes() == before
    assert json.loads(caught.value.message.splitlines()[-1])["i"] == 1


def test_an_unfinished_last_line_is_not_a_row_and_the_next_record_ends_the_file_cleanly(
    isolated: Path, capsys
) -> None:
    isolated.mkdir(parents=True, exist_ok=True)
    path = isolated / "tail.jsonl"
    whole = json.dumps({"target": "mock", "model": "m", "i": 0})
    path.write_text(whole + "\n" + '{"target": "mock", "model": "m", "i": 1, "pad": "xx')  # a write cut short
    assert [r["i"] for r in read_records("tail")] == [0] and capsys.readouterr().err == ""
    record("tail", {"target": "mock", "model": "m", "i": 2})
    assert [json.loads(line)["i"] for line in path.read_text().splitlines()] == [0, 2]
    path.write_text(whole)  # a whole row without its newline (edited by hand): kept
    record("tail", {"target": "mock", "model": "m", "i": 3})
    assert [r["i"] for r in read_records("tail")] == [0, 3] and path.read_text().endswith("\n")


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


def test_fireworks_without_a_key_says_where_to_put_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(FelabError) as info:
        resolve(parse("--target", "fireworks"))
    assert "FIREWORKS_API_KEY is not set" in info.value.message and ".env" in info.value.message
    # With no .env yet, from 03-labs/: `cp .env.example .env` there writes through its link to the
    # kit's .env, which does not exist ("cp: not writing through dangling symlink '.env'").
    labs = paths.KIT_ROOT / "03-labs"
    monkeypatch.setattr(paths, "ENV_FILE", tmp_path / ".env")  # (none, as in a fresh clone)
    monkeypatch.setenv("FELAB_CALLER_DIR", str(labs))
    with pytest.raises(FelabError) as info:
        resolve(parse("--target", "fireworks"))
    start = f"`cp ../.env.example {os.path.relpath(tmp_path / '.env', labs)}` starts one"
    assert start in info.value.message, info.value.message


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


@pytest.mark.parametrize("scheme", ["HTTP", "Http"])
def test_plain_http_in_any_case_is_refused_for_a_key(monkeypatch: pytest.MonkeyPatch, scheme: str) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw-test-key-123")
    monkeypatch.setenv("FIREWORKS_BASE_URL", f"{scheme}://api.fireworks.ai")
    with pytest.raises(FelabError, match="plain http:// address") as caught:
        resolve(parse("--target", "fireworks"))
    assert "fw-test-key-123" not in caught.value.message


def test_a_scheme_in_capitals_is_read_as_the_same_address() -> None:
    t = resolve(parse("--target", "mlx", "--base-url", "HTTP://127.0.0.1:9/v1"))
    assert t.base_url == "http://127.0.0.1:9/v1"
    t = resolve(parse("--target", "mlx", "--base-url", "HTTPS://Example.org/v1"))
    assert t.base_url == "https://Example.org/v1"


def test_one_function_reads_every_scheme() -> None:
    from felab.urls import lower_scheme, scheme

    assert [scheme(u) for u in ("HTTP://h", "https://h", "hTtPs://h", "h:80", "", "file:x")] == [
        "http",
        "https",
        "https",
        "",
        "",
        "",
    ]
    assert lower_scheme("HTTPS://Host/V1") == "https://Host/V1" and lower_scheme("host") == "host"


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
    env_file.unlink()  # no .env at all: nothing in it to fall back on, so no "the one in .env"
    advice = fix_key_advice("FIREWORKS_API_KEY")
    assert "comes from this terminal" in advice and "the one in .env" not in advice
    assert f"put it in {env_file} as `FIREWORKS_API_KEY=...`" in advice and "fw-exported" not in advice


def test_a_scheme_and_a_host_name_have_no_case_wherever_a_url_is_checked() -> None:
    from felab.engine_families.family import LOOPBACK, port_of
    from felab.targets import exposes_key

    assert exposes_key("HTTP://api.example.com/v1") and exposes_key("Http://10.0.0.1:8000/v1")
    assert not exposes_key("HTTP://LOCALHOST:8080/v1") and not exposes_key("HTTPS://api.example.com/v1")
    assert LOOPBACK.match("HTTP://127.0.0.1:8765/v1") and port_of("HTTP://127.0.0.1:8765/v1") == 8765
