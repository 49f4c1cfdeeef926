"""The practice server counts tokens as the engine does, given its tokenizer (felab/mock_server/tokens.py).

The tokenizer is the kit's own tiny model's, trained here (a byte-level BPE, as `felab
tiny-model` makes it), saved as a tokenizer.json and as a GGUF holding only its vocabulary.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import openai
import pytest

from felab.calibrate import prompts
from felab.mock_server.config import Settings
from felab.mock_server.launch import practice_server
from felab.mock_server.profile import PROFILE_PATH
from felab.mock_server.serve import banner
from felab.mock_server.tokens import (
    INSTALL,
    CharCounter,
    TokenizerCounter,
    TokenizerError,
    counter_for,
    id_block_keys,
    load_tokenizer,
)
from felab.mock_server.wire import Message, chat_template

pytest.importorskip("tokenizers", reason="the engines extra (tokenizers) is not installed: make engines")
pytest.importorskip("gguf", reason="the engines extra (gguf) is not installed: make engines")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The kit's tiny model's tokenizer (vocabulary 2,000) as tokenizer.json and as a vocab-only GGUF."""
    import gguf

    from felab.engines.tiny_model import SPECIAL_TOKENS, train_tokenizer

    folder = tmp_path_factory.mktemp("tokenizer")
    tok = train_tokenizer(2000)
    tok.save(str(folder / "tokenizer.json"))
    vocab = tok.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    import json

    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]
    writer = gguf.GGUFWriter(str(folder / "model.gguf"), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if t in SPECIAL_TOKENS else gguf.TokenType.NORMAL for t in tokens]
    )
    writer.add_token_merges(merges)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return folder / "tokenizer.json", folder / "model.gguf"


def varied(rng: random.Random) -> list[str]:
    """Prose, code, numbers, another script: text whose characters per token differ by kind."""
    return [prompts.varied(kind, 1500, rng) for kind in prompts.KINDS]


def test_a_gguf_is_read_as_the_same_tokenizer_as_its_tokenizer_json(files: tuple[Path, Path]) -> None:
    as_json, as_gguf = (load_tokenizer(f) for f in files)
    rng = random.Random(1)
    for text in [*varied(rng), "<|im_start|>user\nhi<|im_end|>\n"]:
        assert as_gguf.encode(text).ids == as_json.encode(text).ids
    assert len(as_gguf.encode("<|im_start|>").ids) == 1  # a control token stays whole, as llama.cpp reads it


def test_message_by_message_ids_are_the_whole_texts(files: tuple[Path, Path]) -> None:
    """The counter remembers each message's ids; spaces, newlines and special tokens at a message's
    edges must not make them differ from the whole text's."""
    tok = load_tokenizer(files[0])
    counter = TokenizerCounter(tok)
    assert counter.by_message
    rng = random.Random(2)
    pieces = [
        "x",
        "  ",
        "\n",
        "\n\n",
        " \t",
        "'s",
        "<|",
        "|>",
        "12",
        "Привет",
        ".",
        "<|im_start|>",
        "<|user|>\n",
    ]
    for _ in range(1500):
        messages = [
            Message(
                role=rng.choice(["user", "system", "assistant"]), content="".join(rng.choices(pieces, k=5))
            )
            for _ in range(rng.randrange(1, 4))
        ]
        text = chat_template(messages)
        assert counter.ids(text) == tok.encode(text, add_special_tokens=False).ids, repr(text)


def test_block_keys_chain_token_ids() -> None:
    ids = list(range(300))
    keys = id_block_keys(ids, 64)
    assert len(keys) == 4  # only full blocks
    assert id_block_keys(ids[:200] + [7] * 100, 64)[:3] == keys[:3]
    changed = id_block_keys([1, *ids[1:]], 64)
    assert all(a != b for a, b in zip(changed, keys, strict=True))  # one token changes every later key


def test_without_a_tokenizer_the_count_is_the_character_model() -> None:
    counter = counter_for(Settings())
    assert isinstance(counter, CharCounter)
    assert counter.keys("x" * 12_112, 64)[0] == 3028


def practice_tokens(url: str, messages: list[dict]) -> tuple[int, int]:
    api = openai.OpenAI(base_url=url, api_key="not-needed", max_retries=0)
    usage = api.chat.completions.create(model="felab-practice", messages=messages, max_tokens=1).usage  # type: ignore[arg-type]
    assert usage is not None and usage.prompt_tokens_details is not None
    return usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens or 0


def test_the_practice_server_counts_and_caches_with_the_tokenizer(files: tuple[Path, Path]) -> None:
    """Started for real with --tokenizer: usage.prompt_tokens is the tokenizer's count of its
    template text plus --template-tokens, and the cache reuses whole blocks of token ids."""
    tok = load_tokenizer(files[1])
    rng = random.Random(3)
    opening = " ".join(varied(rng))
    asked = [prompts.with_question(opening, q) for q in prompts.QUESTIONS[:2]]
    with practice_server(
        "--tokenizer", str(files[1]), "--template-tokens", "-3", "--block-tokens", "16"
    ) as url:
        for n, messages in enumerate(asked):
            text = chat_template([Message(**m) for m in messages])
            ids = tok.encode(text, add_special_tokens=False).ids
            tokens, cached = practice_tokens(url, messages)
            assert tokens == len(ids) - 3
            shared = len(tok.encode(chat_template([Message(**asked[0][0])]), add_special_tokens=False).ids)
            assert cached == (0 if n == 0 else shared // 16 * 16)
    chars = sum(len(m["role"]) + 6 + len(m["content"]) for m in asked[0]) + len("<|assistant|>\n")
    with practice_server() as url:  # the default is the character model, as before
        assert practice_tokens(url, asked[0])[0] == -(-chars // 4)


def test_a_missing_library_is_one_message_with_its_install_command(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if not installed
    with pytest.raises(TokenizerError, match="not installed") as got:
        load_tokenizer(files[0])
    assert INSTALL in str(got.value)


def test_a_file_that_is_no_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match="no such file"):
        load_tokenizer(tmp_path / "nothing.json")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(TokenizerError, match="not a tokenizer.json"):
        load_tokenizer(tmp_path / "config.json")
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf at all")
    with pytest.raises(TokenizerError, match="cannot be read as a GGUF"):
        load_tokenizer(tmp_path / "bad.gguf")


def test_the_banner_names_the_tokenizer_and_repeats_the_profiles_warnings(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    profile = tmp_path / "twin.toml"
    profile.write_text(
        "[profile]\nschema = 1\n[settings]\nprefill_tps = 900.0\n"
        '[fit]\nwarnings = ["the machine was busy: 4 of 12 repeats disturbed"]\n'
    )
    lines = banner("127.0.0.1", 8765, Settings(tokenizer=str(files[1]), template_tokens=-3), profile)
    assert "tokens counted with the tokenizer of model.gguf, -3 tokens of chat template" in lines[0]
    assert lines[1] == (
        "WARNING (from the profile twin.toml, when it was made): "
        "the machine was busy: 4 of 12 repeats disturbed"
    )
    assert banner("127.0.0.1", 8765, Settings()) == [
        "practice server listening on http://127.0.0.1:8765/v1 · model felab-practice · prefill 2500 tok/s · "
        "decode 400 tok/s · Ctrl+C stops it"
    ]
    assert PROFILE_PATH  # the key serve.py reads the profile's path under
