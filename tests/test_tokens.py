"""The practice server counts tokens as the engine does, given its tokenizer (felab/mock_server/tokens.py).

The tokenizer is the kit's own tiny model's, trained here (a byte-level BPE, as `felab
tiny-model` makes it), saved as a tokenizer.json and as a GGUF holding only its vocabulary.
"""

from __future__ import annotations

import random
import shutil
import sys
from pathlib import Path

import openai
import pytest
from fake_engines import fake_mlx

from felab.calibrate import check as card
from felab.calibrate import counting, prompts
from felab.calibrate.probes import Prober, Sample
from felab.connect import client
from felab.mock_server.config import Settings
from felab.mock_server.launch import practice_server
from felab.mock_server.profile import PROFILE_PATH
from felab.mock_server.seats import common_blocks
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
from felab.targets import NO_KEY, Target


def needs_the_engines_extra() -> None:
    """Skip, with the reason, where the engines extra is not installed (make test's dev extra has
    neither library; make engines installs both, and the kit's venv here has them: these run)."""
    pytest.importorskip("tokenizers", reason="the engines extra (tokenizers) is not installed: make engines")
    pytest.importorskip("gguf", reason="the engines extra (gguf) is not installed: make engines")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The kit's tiny model's tokenizer (vocabulary 2,000) as tokenizer.json and as a vocab-only GGUF."""
    needs_the_engines_extra()
    import gguf

    from felab.tiny_model.build import SPECIAL_TOKENS, train_tokenizer

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
    template = -3  # the engine's chat template: 3 tokens fewer than the practice server's
    with practice_server(
        "--tokenizer", str(files[1]), "--template-tokens", str(template), "--block-tokens", "16"
    ) as url:
        seen: list[list[int]] = []
        for messages in asked:
            text = chat_template([Message(**m) for m in messages])
            ids = tok.encode(text, add_special_tokens=False).ids
            tokens, cached = practice_tokens(url, messages)
            assert tokens == len(ids) + template
            # The engine's ids: its template is 3 tokens shorter at the first message's start
            # (tokens._marked), so its blocks start 3 ids later than the practice template's.
            # Counted on the practice template's ids, the shared blocks were one too many whenever
            # the shared ids ran fewer than 3 past a block's end: the kit's tokenizer is trained on
            # the lessons' text, and an edit to lesson 06's README moved them there.
            engine = ids[-template:]
            # The ids both prompts begin with (the opening's, and its template's start), in whole
            # blocks: the system message rendered alone ends with the generation prompt, which the
            # second prompt does not share, so its length is not the truth.
            shared = max((common_blocks(engine, before) for before in seen), default=0)
            assert cached == shared // 16 * 16 and (not seen or cached > 1000)
            seen.append(engine)
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
    needs_the_engines_extra()
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


# ── calibrate finds the engine's tokenizer, or fits characters on varied text (calibrate/counting.py) ──


def prober(url: str, model: str) -> Prober:
    target = Target("mock", url, model, NO_KEY, False)
    return Prober(target, client(target), counting.REQUESTS, lambda _: None, seed=5)


def test_calibrate_records_the_gguf_llama_server_names_and_fits_the_template(
    files: tuple[Path, Path],
) -> None:
    """A practice server standing in for llama-server: it counts with the GGUF and names it in
    GET /props `model_path`, as llama-server does; its template adds 7 tokens, and 2 more for each
    message after the first (calibrate's second round of texts is sent as three messages)."""
    gguf_file = str(files[1])
    flags = ("--seats", "1", "--model", gguf_file, "--tokenizer", gguf_file, "--template-tokens", "7")
    flags += ("--template-message-tokens", "2", "--template-reply-tokens", "-1")
    flags += ("--cache-mode", "seat-prefix", "--block-tokens", "1")  # (a seat's longest common prefix)
    with practice_server(*flags) as url:
        target = Target("mock", url, gguf_file, NO_KEY, False)
        found = counting.find(prober(url, gguf_file), target, lcp=True)
        blind = counting.find(prober(url, gguf_file), target)
    assert found.settings == {
        "tokenizer": str(files[1].resolve()),
        "template_tokens": 7,
        "template_message_tokens": 2,
        "template_reply_tokens": -1,  # the counts alone cannot tell it (blind): a cached count does
    }
    assert "template_reply_tokens" not in blind.settings
    assert found.measured["token_count_error_tokens"] == [0] * counting.TEXTS
    assert "counted with the engine's tokenizer" in found.line and "GET /props" in found.line


def test_calibrate_records_the_tokenizer_json_of_a_model_folder(files: tuple[Path, Path]) -> None:
    """As mlx_lm.server: the model id is a folder holding tokenizer.json (no /props)."""
    folder = str(files[0].parent)
    with practice_server("--model", folder, "--tokenizer", str(files[0]), "--template-tokens", "-2") as url:
        found = counting.find(prober(url, folder), Target("mock", url, folder, NO_KEY, False))
    assert found.settings == {
        "tokenizer": str(files[0].resolve()),
        "template_tokens": -2,
        "template_message_tokens": 0,
    }


def test_without_a_tokenizer_file_calibrate_fits_characters_on_varied_text_and_states_the_error(
    files: tuple[Path, Path],
) -> None:
    """The engine counts with a real tokenizer the twin cannot name: one ratio cannot fit prose and
    another script at once, and the profile says by how much it misses each, on held-out text."""
    tok = load_tokenizer(files[0])
    with practice_server("--tokenizer", str(files[0])) as url:
        p = prober(url, "felab-practice")
        found = counting.find(p, Target("mock", url, "felab-practice", NO_KEY, False))
    ratio = found.settings["chars_per_token"]
    assert set(found.settings) == {"chars_per_token"}
    errors = found.measured["token_count_error_pct"]
    assert set(errors) == set(prompts.KINDS)
    rng = random.Random(p.seed ^ 0xC0DE)  # the texts counting sent: its second text of each kind is held out
    sent = [
        (kind, f"{prompts.tag(rng)} {prompts.varied(kind, counting.TEXT_CHARS, rng)}")
        for _ in range(counting.TEXTS_PER_KIND)
        for kind in prompts.KINDS
    ]
    for kind, content in sent[len(prompts.KINDS) :]:  # (sent as three messages: counting.conversation)
        text = chat_template([Message(**m) for m in counting.conversation(content)])
        real = len(tok.encode(text, add_special_tokens=False).ids)
        assert errors[kind] == pytest.approx(100 * (len(text) / ratio / real - 1), rel=0.02)
    assert errors["script"] < -50 < 0 < errors["prose"]  # prose over-counted, another script under
    assert "no tokenizer" not in found.line and "give --tokenizer" in found.line


# ── --check's held-out work is text unlike calibrate's, and the card says how far the count is ──


class Recording(Prober):
    """A prober that keeps every message it sends (the requests go out as ever)."""

    def __init__(self, url: str) -> None:
        target = Target("mock", url, "felab-practice", NO_KEY, False)
        super().__init__(target, client(target), 1000, lambda _: None, seed=11)
        self.sent: list[str] = []

    def call(self, messages: list[dict], max_tokens: int = 2, keep_opening: bool = False) -> Sample:
        self.sent += [m["content"] for m in messages]
        return super().call(messages, max_tokens, keep_opening)

    def together(self, batches: list[list[dict]], max_tokens: int = 2) -> list[Sample]:
        self.sent += [m["content"] for b in batches for m in b]
        return super().together(batches, max_tokens)


FAST = ("--prefill-tps", "1000000", "--decode-tps", "100000")


def test_the_checks_held_out_work_is_text_unlike_calibrates_own() -> None:
    with practice_server(*FAST) as url:
        p = Recording(url)
        card.one_round(p, 800, {})
    long = [text for text in p.sent if len(text) > 300]  # the prompts, not the untimed call or questions
    assert len(long) >= 8
    for text in long:
        assert not any(sentence in text for sentence in prompts.SENTENCES), text[:200]
    together = " ".join(long)
    assert any(word in together for word in prompts.HELD_OUT.words)  # another script
    assert any(name in together for name in prompts.HELD_OUT.names)  # code
    assert any(sentence in together for sentence in prompts.HELD_OUT.sentences)


def test_the_card_says_how_far_the_twins_count_is_from_the_real_servers(files: tuple[Path, Path]) -> None:
    """The same held-out round on an "engine" that counts with a tokenizer and on a twin that counts
    characters (4 a token): the card's note is the pairwise difference of their prompt_tokens."""
    with practice_server(*FAST, "--tokenizer", str(files[0])) as real_url, practice_server(*FAST) as twin_url:
        real, twin = Recording(real_url), Recording(twin_url)
        real.chars_per_token = twin.chars_per_token = card.sizing(real, 11)
        got: tuple[dict[str, list[Sample]], dict[str, list[Sample]]] = ({}, {})
        for p, out in zip((real, twin), got, strict=True):
            p.rng = random.Random(11)
            card.one_round(p, 800, out)
    tok = load_tokenizer(files[0])
    sized = [chat_template([Message(role="user", content=text)]) for text in real.sent[: card.SIZING_PROMPTS]]
    measured = sum(map(len, sized)) / sum(len(tok.encode(text).ids) for text in sized)
    assert real.chars_per_token == pytest.approx(card.SIZING_MARGIN * measured)
    cold = [k for k in got[0] if k.startswith("cold")]
    off = sorted(
        (t.prompt_tokens - r.prompt_tokens) / r.prompt_tokens
        for k in cold
        for r, t in zip(got[0][k], got[1][k], strict=True)
    )
    note = card.count_note(got[0], got[1], "characters, 4 a token")
    assert note is not None
    assert f"{off[len(off) // 2]:+.1%} (median of {len(off)} cold prompts" in note
    assert off[-1] < -0.3  # 4 characters a token counts this text (about 2 a token) far short
    assert "(the profile counts with characters, 4 a token)" in note


@pytest.mark.parametrize("reply", ["0", "-1"])
def test_a_conversations_next_turn_finds_cached_what_the_engine_would(
    files: tuple[Path, Path], reply: str
) -> None:
    """The engine's template has other tokens than the practice server's, -7 a prompt and -3 a
    message after the first (llama-server's ChatML on the model the kit did not make): turn 2 of a
    conversation finds turn 1's whole prompt cached there, 724 of 776 tokens. The twin counts the
    template in its ids (tokens._marked), so its turn 2 finds as many: before, the -3 a message
    came off the new turn alone, and 10 messages left it a few dozen tokens short. A reply's opener
    a token short of a message's marker (`reply` -1) is a token short at its end: the next turn's
    assistant message still starts with all of it."""
    tok = str(files[0])
    flags = ("--tokenizer", tok, "--template-tokens", "-7", "--template-message-tokens", "-3")
    flags += ("--template-reply-tokens", reply)
    flags += ("--seats", "1", "--cache-mode", "seat-prefix", "--block-tokens", "1")
    history = [{"role": "system", "content": "You answer questions about the policy. " * 40}]
    got = []
    with practice_server(*flags) as url:
        api = client(Target("mock", url, "felab-practice", NO_KEY, False))
        for question in ("What does it cover?", "And what does it not?", "Who decides?"):
            history.append({"role": "user", "content": question})
            usage = api.chat.completions.create(model="felab-practice", messages=history, max_tokens=1).usage
            assert usage is not None and usage.prompt_tokens_details is not None
            got.append((usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens))
            history.append({"role": "assistant", "content": "It says so in the policy."})
    (first, _), (second, cached_2), (_, cached_3) = got
    assert cached_2 == first and cached_3 == second
    text = chat_template([Message(**m) for m in history[:2]])
    assert (
        first == len(load_tokenizer(files[0]).encode(text, add_special_tokens=False).ids) - 7 - 3
    )  # 2 messages


# ── a model id the server maps (mlx_lm's default_model), or a repo in the Hugging Face cache ──


@pytest.fixture
def hub(tmp_path: Path, files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face cache, laid out as huggingface_hub writes one, holding two repos with the tiny
    model's tokenizer.json and one without; huggingface_hub told to read it (as HF_HUB_CACHE would)."""
    constants = pytest.importorskip("huggingface_hub.constants")
    for repo, has in (
        ("mlx-community/tiny-4bit", True),
        ("mlx-community/other-8bit", True),
        ("org/bare", False),
    ):
        root = tmp_path / "hub" / f"models--{repo.replace('/', '--')}"
        (root / "refs").mkdir(parents=True)
        (root / "refs" / "main").write_text("abc123")
        snapshot = root / "snapshots" / "abc123"
        snapshot.mkdir(parents=True)
        (snapshot / "config.json").write_text("{}")
        if has:
            shutil.copy(files[0], snapshot / "tokenizer.json")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def mlx_target(url: str, model: str = "default_model") -> Target:
    return Target("mlx", url, model, NO_KEY, False)


def test_asked_for_default_model_calibrate_reads_the_folder_mlx_lm_lists(
    files: tuple[Path, Path], hub: Path
) -> None:
    """mlx_lm.server started on a folder, asked for `default_model` (the kit's mlx target): the folder
    it lists by its full path is the model, whatever else the cache holds."""
    folder = str(files[0].parent.resolve())
    with fake_mlx(["mlx-community/tiny-4bit", "mlx-community/other-8bit", folder]) as url:
        path, how = counting.tokenizer_file(mlx_target(url))
    assert path == Path(folder) / "tokenizer.json"
    assert how == f"the model GET /v1/models lists, {folder}"


def test_a_repo_id_is_read_from_the_hugging_face_cache(files: tuple[Path, Path], hub: Path) -> None:
    """mlx_lm.server started on a repo id: calibrate asked for that repo, or for `default_model` with
    one cached repo listed that has a tokenizer; with two, it cannot tell which, and says what to give."""
    snapshot = hub / "models--mlx-community--tiny-4bit" / "snapshots" / "abc123" / "tokenizer.json"
    with fake_mlx(["mlx-community/tiny-4bit", "org/bare"]) as url:
        assert counting.tokenizer_file(mlx_target(url, "mlx-community/tiny-4bit")) == (
            snapshot,
            "the Hugging Face cache, its model id",
        )
        assert counting.tokenizer_file(mlx_target(url))[0] == snapshot
    with fake_mlx(["mlx-community/tiny-4bit", "mlx-community/other-8bit"]) as url:
        path, why = counting.tokenizer_file(mlx_target(url))
    assert path is None
    assert "2 models" in why and "mlx-community/other-8bit" in why and "give calibrate --model" in why
    with fake_mlx(["org/bare"]) as url:
        assert counting.tokenizer_file(mlx_target(url)) == (None, counting.NOT_FOUND)
