"""The tiny model: written offline, in seconds, in both layouts, with the same weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.engines


def test_hugging_face_layout(tiny_model: Path) -> None:
    hf = tiny_model / "hf"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (hf / name).is_file(), name
    config = json.loads((hf / "config.json").read_text())
    assert config["model_type"] == "llama"
    tok_config = json.loads((hf / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tok_config["chat_template"]
    assert tok_config["eos_token"] == "<|im_end|>"


def test_gguf_has_the_same_weights_and_tokenizer(tiny_model: Path) -> None:
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    reader = gguf.GGUFReader(tiny_model / "tiny-model.gguf")
    fields = reader.fields

    def text(key: str) -> str:
        f = fields[key]
        return bytes(f.parts[f.data[0]]).decode()

    assert text("general.architecture") == "llama"
    assert text("tokenizer.ggml.model") == "gpt2"
    assert "<|im_start|>" in text("tokenizer.chat_template")
    hf = load_file(str(tiny_model / "hf" / "model.safetensors"))
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    assert np.array_equal(tensors["token_embd.weight"], hf["model.embed_tokens.weight"])
    assert np.array_equal(tensors["blk.1.ffn_down.weight"], hf["model.layers.1.mlp.down_proj.weight"])
    assert len(fields["tokenizer.ggml.tokens"].data) == hf["lm_head.weight"].shape[0]


def test_the_opening_is_about_3000_tokens(tiny_model: Path) -> None:
    """Lesson 06's opening must fit a 4,096-token seat and overflow a 2,048-token one."""
    import importlib.util

    from tokenizers import Tokenizer

    from .conftest import PREFIX_BENCH

    spec = importlib.util.spec_from_file_location("prefix_bench_for_test", PREFIX_BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    preamble = module.PREAMBLE
    n = len(Tokenizer.from_file(str(tiny_model / "hf" / "tokenizer.json")).encode(preamble).ids)
    assert 2200 < n < 3900, n


def test_command_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from felab.tiny_model.build import tiny_model_command

    result = CliRunner().invoke(tiny_model_command, [str(tmp_path / "pm"), "--layers", "1"])
    assert result.exit_code == 0, result.output
    assert "gibberish" in result.output
    assert (tmp_path / "pm" / "tiny-model.gguf").stat().st_size > 1_000_000
    assert json.loads((tmp_path / "pm" / "hf" / "config.json").read_text())["num_hidden_layers"] == 1
