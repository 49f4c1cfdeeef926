"""Lesson 06's mlx_prompt_cache.sh and lesson 02's serve_mlx.sh on real MLX (CPU build on Linux)."""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from pathlib import Path

import pytest

from felab.calibrate.counting import tokenizer_file
from felab.targets import NO_KEY, Target

from .conftest import LESSON02, LESSON06, free_port, last_record, prefix_bench, run_bash, script_env, serving

pytestmark = [pytest.mark.engines, pytest.mark.timeout(600)]


@pytest.mark.usefixtures("mlx_ready")
def test_mlx_prompt_cache_prefills_only_the_question(tiny_model: Path, tmp_path: Path) -> None:
    # a copy of the lesson folder, so the files the script writes stay out of the kit
    lesson = tmp_path / "06-prefix-caching"
    lesson.mkdir()
    for name in ("mlx_prompt_cache.sh", "prefix_bench.py"):
        shutil.copy(LESSON06 / name, lesson / name)
    r = run_bash(
        lesson / "mlx_prompt_cache.sh", env=script_env(MLX_MODEL=str(tiny_model / "hf")), timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    counts = [int(n) for n in re.findall(r"^Prompt: (\d+) tokens", r.stdout, re.M)]
    print(f"MLX Prompt: tokens, step 1 cold / step 3 from the cache file: {counts}")
    assert len(counts) == 2, r.stdout
    cold, warm = counts
    assert 2500 < cold < 4000, "step 1 reads the ~3,000-token opening and the question"
    assert warm < 60, "step 3 reads only the question"
    assert (lesson / "preamble.txt").read_text().startswith("You are the support agent")
    assert (lesson / "preamble.safetensors").stat().st_size > 0


@pytest.mark.usefixtures("mlx_ready")
def test_serve_mlx_works_with_the_mlx_target(tiny_model: Path, isolated: Path, tmp_path: Path) -> None:
    port = free_port()
    hub = tmp_path / "fresh-hub-cache"  # does not exist yet: the script must create it
    env = script_env(
        MLX_MODEL=str(tiny_model / "hf"), MLX_PORT=str(port), HF_HUB_CACHE=str(hub), HF_HUB_OFFLINE="1"
    )
    with serving(LESSON02 / "serve_mlx.sh", env=env, ready="is listening"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as resp:
            ids = [m["id"] for m in json.load(resp)["data"]]
        assert str((tiny_model / "hf").resolve()) in ids
        # calibrate asked for the mlx target's default model finds the model's tokenizer from that list
        found, how = tokenizer_file(
            Target("mlx", f"http://127.0.0.1:{port}/v1", "default_model", NO_KEY, False)
        )
        assert found == (tiny_model / "hf").resolve() / "tokenizer.json", how
        # the felab mlx target's default model ("default_model"), no --model needed
        r = prefix_bench(f"http://127.0.0.1:{port}/v1", "mlx")
    assert r.returncode == 0, r.stdout + r.stderr
    row = last_record(isolated)
    print(
        f"mlx_lm.server stable-first: first {row['first_ms']:.0f} ms, rest p50 {row['rest_p50_ms']:.0f} ms, "
        f"speed-up {row['speedup_x']:.1f}x"
    )
    # asked for the target's default, recorded as the model the server said it runs (results.py)
    assert row["model_asked"] == "default_model" and row["model"] in ids
    assert row["speedup_x"] > 2


@pytest.mark.usefixtures("mlx_ready")
def test_serve_mlx_says_when_the_model_cannot_load(tmp_path: Path) -> None:
    # mlx_lm.server keeps answering 503 when its model fails to load; the script must notice
    env = script_env(
        MLX_MODEL="felab-test/no-such-model",
        MLX_PORT=str(free_port()),
        HF_HUB_CACHE=str(tmp_path / "hub"),
        HF_HUB_OFFLINE="1",
    )
    r = run_bash(LESSON02 / "serve_mlx.sh", env=env, timeout=60)
    assert r.returncode == 1
    assert "could not load felab-test/no-such-model" in r.stderr
