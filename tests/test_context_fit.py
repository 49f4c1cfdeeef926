"""A prompt longer than the server's context (issue 11, case 1): the advice is worked out from what
the server reported, is never the configuration that just failed, and works when followed.

"Following" a llama.cpp restart here means starting the fake llama-server the way the advised
command would start llama-server (its CTX split over its SEATS); tests/engines/test_llamacpp.py
follows it with the real one.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import KIT, PREFIX_BENCH, run_script
from fake_engines import fake_engine
from fake_llamacpp import Seats, fake_llamacpp

from felab.context_fit import fits
from felab.engine_families.llamacpp import DEFAULT_REPO as LLAMACPP_DEFAULT_REPO
from felab.mock_server.launch import practice_server, wait_until_serving

SERVE = "bash ../02-three-local-servers/serve_llamacpp.sh"
DEFAULT_DOWNLOAD = (
    "/home/learner/.cache/llama.cpp/"
    "bartowski_Meta-Llama-3.1-8B-Instruct-GGUF_Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"
)


def bench(url: str, target: str = "llamacpp") -> tuple[int, str]:
    out = run_script(PREFIX_BENCH, "--target", target, "--base-url", url, "--quick")
    assert "Traceback" not in out.stderr
    return out.returncode, " ".join(out.stderr.split())


def advised(said: str) -> list[list[str]]:
    """Every serve_llamacpp.sh command the message shows, as words (VAR=value first)."""
    return [shlex.split(c) for c in re.findall(r"`([^`]+)`", said) if "serve_llamacpp.sh" in c]


def seats_of(command: list[str]) -> tuple[int, int]:
    """CTX and SEATS of `... serve_llamacpp.sh QUANT CTX SEATS`."""
    return int(command[-2]), int(command[-1])


def test_fits_is_the_next_power_of_two_with_room_for_the_reply() -> None:
    assert fits(3045) == 4096 and fits(4715) == 8192 and fits(3900) == 8192 and fits(10) == 1024


def test_the_issues_case_gives_bigger_seats_or_fewer_never_the_same(isolated: Path) -> None:
    # 16384 over 4 seats is 4,096 a seat; this model's tokenizer makes the opening ~4,700 tokens
    started = Seats(n_ctx=4096, slots=4, chars_per_token=2.58, model_path=DEFAULT_DOWNLOAD)
    with fake_llamacpp("too-small", started) as url:
        code, said = bench(url)
    port = url.split(":")[2].split("/")[0]
    assert code == 2 and not (isolated / "06-prefix.jsonl").exists()
    assert "does not fit a seat of the llamacpp server" in said and "(4,096 tokens)" in said
    assert "this one runs 4 seats of 4,096 (16,384 in all)" in said
    commands = advised(said)
    assert [" ".join(c) for c in commands] == [
        f"LLAMACPP_PORT={port} {SERVE} Q4_K_M 32768 4",
        f"LLAMACPP_PORT={port} {SERVE} Q4_K_M 16384 2",
    ]
    assert all(seats_of(c) != (16384, 4) for c in commands), "never the configuration that failed"
    for command in commands:  # following each: a seat of CTX / SEATS tokens
        ctx, seats = seats_of(command)
        restarted = Seats(n_ctx=ctx // seats, slots=seats, chars_per_token=2.58, model_path=DEFAULT_DOWNLOAD)
        with fake_llamacpp("too-small", restarted) as url:
            assert bench(url)[0] == 0


def test_the_lessons_trap_and_the_kit_folder(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_llamacpp("too-small", Seats(model_path=DEFAULT_DOWNLOAD)) as url:
        _, said = bench(url)
        monkeypatch.chdir(KIT)  # the same error, met from the kit folder
        from felab.connect import client
        from felab.explain import explain
        from felab.targets import Target

        target = Target("llamacpp", url, "m", "k", False)
        try:
            client(target).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x" * 12_000}], max_tokens=8
            )
        except Exception as exc:  # noqa: BLE001 - the openai error explain() turns into the message
            from_kit = " ".join(explain(exc, target).message.split())
    assert [seats_of(c) for c in advised(said)] == [(16384, 4), (8192, 2)]
    assert "(2,048 tokens)" in said
    assert " bash lessons/02-three-local-servers/serve_llamacpp.sh Q4_K_M 16384 4" in from_kit


def test_a_local_model_file_is_restarted_as_it_was() -> None:
    own = Seats(model_path="/models/my model.Q5_K_M.gguf")
    with fake_llamacpp("too-small", own) as url:
        _, said = bench(url)
    first = advised(said)[0]
    assert "LLAMACPP_MODEL=/models/my model.Q5_K_M.gguf" in first  # shlex-quoted in the message
    assert first[-3:] == ["Q5_K_M", "16384", "4"]


def test_without_props_the_seats_are_left_to_the_learner() -> None:
    with fake_llamacpp("too-small", Seats(props=False)) as url:
        _, said = bench(url)
    assert "start it with seats of 4,096 tokens: CTX = 4,096 x seats" in said
    assert [seats_of(c) for c in advised(said)] == [(16384, 4), (4096, 1)]


def test_the_default_repo_is_the_one_serve_llamacpp_downloads() -> None:
    script = (KIT / "lessons" / "02-three-local-servers" / "serve_llamacpp.sh").read_text()
    assert f'DEFAULT_REPO="{LLAMACPP_DEFAULT_REPO}"' in script


# ── The other engines' wording ──

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(
    ("engine", "target", "said", "command"),
    [
        (
            "vllm",
            "vllm",
            "The prompt (3,052 tokens) and its reply (48) do not fit",
            f"vllm serve {MODEL} --max-model-len 4096",
        ),
        (
            "vllm-old",
            "vllm",
            "The prompt (3,052 tokens) and its reply (48)",
            f"vllm serve {MODEL} --max-model-len 4096",
        ),
        ("vllm-at-least", "vllm", "The prompt (2,001+ tokens)", f"vllm serve {MODEL} --max-model-len 8192"),
        (
            "sglang",
            "sglang",
            "The prompt (3,052 tokens) does not fit",
            f"python -m sglang.launch_server --model-path {MODEL} --context-length 4096",
        ),
        (
            "ollama",
            "ollama",
            "It runs with 2,048 tokens a seat",
            f"bash ../02-three-local-servers/serve_ollama.sh {MODEL} 8192 4",
        ),
    ],
)
def test_other_engines_name_the_flag_that_fits(engine: str, target: str, said: str, command: str) -> None:
    with fake_engine(engine, MODEL) as url:
        code, message = bench(url, target)
    assert code == 2 and said in message
    assert "(2,048 tokens)" in message or engine == "ollama"  # Ollama's 400 names no numbers
    port = url.split(":")[2].split("/")[0]  # a fake on its own port: the advice must keep it
    expected = f"`OLLAMA_PORT={port} {command}" if engine == "ollama" else f"`{command} --port {port}`"
    assert expected in message


def follows(command: str, url: str) -> int:
    """Run the advised server command from the lesson folder the script ran in, then the lesson
    again against it: the lesson's exit code."""
    proc = subprocess.Popen(shlex.split(command), cwd=PREFIX_BENCH.parent, stdout=subprocess.DEVNULL)
    try:
        wait_until_serving(url, proc)
        return bench(url, "mock")[0]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_practice_server_with_a_small_context_and_following_the_advice(isolated: Path) -> None:
    with practice_server("--context-tokens", "2000") as url:
        code, said = bench(url, "mock")
    port = url.split(":")[2].split("/")[0]
    assert code == 2 and "(2,000 tokens)" in said
    command = next(c for c in re.findall(r"`([^`]+)`", said) if "mock_server" in c)
    assert command.endswith(f"-m felab.mock_server --context-tokens 4096 --port {port}")
    assert follows(command, url) == 0  # literally, from the lesson folder, on the port it used


def test_day_2s_trap_on_the_practice_server_and_following_the_advice(isolated: Path) -> None:
    # --seats 4 --context-tokens 8192: 2,048 tokens a seat, as llama.cpp's `-c 8192 -np 4`. Lesson
    # 06's ~3,000-token opening is refused with llama.cpp's own body; the advice reads the seats
    # from GET /props (as for llama.cpp) and keeps them, with room for the prompt in each.
    with practice_server("--seats", "4", "--context-tokens", "8192") as url:
        code, said = bench(url, "mock")
    port = url.split(":")[2].split("/")[0]
    assert code == 2 and not (isolated / "06-prefix.jsonl").exists()
    assert "does not fit a seat of the practice server" in said and "(2,048 tokens)" in said
    assert "between its 4 seats (8,192 in all)" in said
    command = next(c for c in re.findall(r"`([^`]+)`", said) if "mock_server" in c)
    assert command.endswith(f"-m felab.mock_server --seats 4 --context-tokens 16384 --port {port}")
    assert follows(command, url) == 0  # literally, from the lesson folder, on the port it used


def test_the_practice_server_says_its_seats_when_it_starts() -> None:
    from felab.mock_server.config import Settings
    from felab.mock_server.serve import describe

    assert "4 seats of 2,048 tokens (blocks cache)" in describe(Settings(seats=4, context_tokens=8192))
    assert "seats" not in describe(Settings())
