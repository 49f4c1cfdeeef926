"""How the practice server counts a prompt's tokens: from its characters, or with the engine's tokenizer.

A server's time to first token follows the tokens it must prefill, so a twin that
counts tokens differently from its engine is off by as much. Two counters stand
behind one protocol (`TokenCounter`), and both give what the prefix cache needs:
the prompt's length in tokens and its block keys.

- `CharCounter` (the default): a token is `chars_per_token` characters of the
  prompt (4, or a calibrated average). Cheap, and right on average for the text
  it was fitted on, wrong on any other: text fitted at 3.22 characters a token
  ran at 2.95 on held-out work, so the twin under-counted by 9%.
- `TokenizerCounter` (`--tokenizer FILE`): the engine's own tokenizer, read with
  Hugging Face's `tokenizers` library, counts the prompt exactly as the engine
  does. Block keys are hash chains over blocks of token ids, as vLLM's automatic
  prefix caching keys its blocks: a block's key hashes its parent's key and its
  own ids, so equal keys mean equal prompts up to there.

The engine does not see the practice server's plain chat template (`<|user|>`...)
but its model's (ChatML's `<|im_start|>`, say): a prompt costs it a few fixed
tokens more or fewer than the practice server's text. `--template-tokens` adds
them, and `--template-message-tokens` those of each message after the first (the role
markers differ, message by message: an 8-turn conversation was counted 4 to 5% long with the
fixed tokens alone); calibrate fits both from the server's reported `usage.prompt_tokens`
minus this counter's count of the same messages, sent as one message and as three.

Where the tokenizer comes from (the file `--tokenizer` names):

- a `tokenizer.json` (Hugging Face's layout, as mlx_lm.server and vLLM load it),
  or a folder holding one;
- a GGUF, the one file llama-server loaded: its vocabulary and merges are read
  with the `gguf` library and built into a byte-level BPE (`tokenizer.ggml.model`
  "gpt2" with the "gpt-2" split, as the kit's tiny model has). The GGUF is the
  file the server actually ran, so it is read first; a GGUF whose tokenizer this
  module cannot rebuild (a SentencePiece model, another split regex) is refused
  with a message naming the model's tokenizer.json to pass instead.
"""

from __future__ import annotations

import functools
import re
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from felab.mock_server.cache import prompt_keys

if TYPE_CHECKING:
    from felab.mock_server.config import Settings

INSTALL = "pip install 'tokenizers>=0.20' 'gguf>=0.17'"
"""Both come with the kit's engines extra (`make engines`); this is the one command for just them."""
GGUF_SPLITS = ("gpt-2",)
"""GGUF pre-tokenizers (`tokenizer.ggml.pre`) that are byte-level BPE's own split regex."""


class TokenizerError(ValueError):
    """A tokenizer the practice server cannot use; the message says why and what to do."""


class TokenCounter(Protocol):
    """Counts a prompt's tokens and keys its full blocks, as the modelled engine would."""

    name: str
    """What the server's banner says it counts with."""

    def keys(self, text: str, block_tokens: int) -> tuple[int, list[int]]:
        """The prompt's length in tokens, and one key per full block of `block_tokens` tokens."""
        ...


class CharCounter:
    """A token is `chars_per_token` characters (cache.py's `prompt_keys`)."""

    def __init__(self, chars_per_token: float) -> None:
        self.chars_per_token = chars_per_token
        self.name = f"{chars_per_token:g} characters a token"

    def keys(self, text: str, block_tokens: int) -> tuple[int, list[int]]:
        return prompt_keys(text, self.chars_per_token, block_tokens)


ROLES = ("system", "developer", "user", "assistant", "tool")
MESSAGE_START = re.compile(r"(?=\n<\|(?:" + "|".join(ROLES) + r")\|>\n)")
"""Where a message of the practice server's template starts: before the newline that ends the
last one (`...text|\n<|user|>\n...`), so each piece begins as the whole text would be cut."""
REMEMBERED = 256
"""Messages whose token ids a counter keeps (least recently used forgotten): a lesson's opening,
sent again with each new question, is encoded once."""


class TokenizerCounter:
    """The engine's tokenizer: its token ids, hashed in blocks; plus the chat template's fixed tokens.

    Encoding costs about 1 µs a token (3 ms for a 3,000-token prompt here), so a counter remembers
    the ids of the last REMEMBERED messages: an opening sent again with a new question costs only
    the question. A byte-level BPE (GPT-2's split) always cuts a text before a newline followed
    by `<|user|>` (any role), whatever precedes it, so the ids of the messages one by one are the
    ids of the whole (tests/test_tokens.py checks it on spaces and newlines at a message's end);
    for any other tokenizer the whole text is encoded every time, to stay exact."""

    def __init__(
        self, tokenizer: Any, fixed_tokens: int = 0, source: str = "", per_message: int = 0, reply: int = 0
    ) -> None:
        self.tokenizer, self.fixed, self.per_message, self.reply = tokenizer, fixed_tokens, per_message, reply
        fixed = f", {fixed_tokens:+d} tokens of chat template" if fixed_tokens else ""
        fixed += f" and {per_message:+d} a message after the first" if per_message else ""
        fixed += f" ({reply:+d} in the reply's opener)" if reply else ""
        self.name = f"the tokenizer of {source or 'the engine'}{fixed}"
        special = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
        self.by_message = type(tokenizer.pre_tokenizer).__name__ == "ByteLevel" and not any(
            f"<|{role}|>" in special for role in ROLES
        )  # a role marker that is one token would cut the text itself
        self.memo: OrderedDict[str, list[int]] = OrderedDict()

    def ids(self, text: str) -> list[int]:
        """The text's token ids, as the engine's tokenizer cuts it (no special tokens added)."""
        if not self.by_message:
            return self._encode(text)
        out: list[int] = []
        pieces = MESSAGE_START.split(text)
        reply = self.reply if len(pieces) > 1 else 0  # (the last piece opens the reply)
        for i, message in enumerate(pieces):
            ids = self.memo.get(message)
            if ids is None:
                ids = self.memo[message] = self._encode(message)
                if len(self.memo) > REMEMBERED:
                    self.memo.popitem(last=False)
            else:
                self.memo.move_to_end(message)
            if not i:
                out.extend(_marked(ids, self.fixed - self.per_message - reply))
            elif i < len(pieces) - 1:
                out.extend(_marked(ids, self.per_message))
            else:
                out.extend(_opener(_marked(ids, self.per_message), reply))
        return out

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def keys(self, text: str, block_tokens: int) -> tuple[int, list[int]]:
        ids = self.ids(text)  # (by message: the template's tokens are in the ids: `_marked`)
        template = 0 if self.by_message else self.fixed + self.per_message * (messages(text) - 1)
        return max(1, len(ids) + template), id_block_keys(ids, block_tokens)


MARKER = -1
"""The id of a role marker's token that the practice template lacks (no real token has it)."""


def _marked(ids: list[int], more: int) -> list[int]:
    """A message as the engine reads it: its role marker `more` tokens longer (marker ids put
    before it) or shorter (ids taken from its start) than the practice template's. The first
    message takes the template's fixed tokens less one message's (`--template-tokens`), each later
    one and the reply's opening one message's (`--template-message-tokens`). In the ids, not only in
    the count, so that a later prompt finds cached as many as the engine would. (Added to the count
    alone, a conversation's 10 messages took their -3 each off every new turn's few dozen tokens,
    and the twin's 8-turn conversation came out 45 to 63% short.)"""
    if not more:  # (the same template: each request's ids, not copied again)
        return ids
    if more > 0:
        return [MARKER] * more + ids
    return ids[min(-more, len(ids) - 1) :]


def _opener(ids: list[int], more: int) -> list[int]:
    """The reply's opener as the engine reads it: `more` tokens longer or shorter at its end than a
    message's marker (its start stays a marker's, so a conversation's next turn, which has that
    marker where this prompt had the opener, finds it cached). The first message takes them off, so
    the count is the same, and a question after a cached opening finds as many tokens cached as the
    engine does: with the tiny model's template, one more (its generation prompt ends `assistant`,
    with no newline, a message's header with one)."""
    if more >= 0:
        return ids + [MARKER] * more
    return ids[: max(len(ids) + more, 1)]


def messages(text: str) -> int:
    """How many messages the practice server's plain template holds in `text`: one role marker
    starts each after the first, and one more opens the reply."""
    return max(len(MESSAGE_START.findall(text)), 1)


def id_block_keys(ids: Sequence[int], block_tokens: int) -> list[int]:
    """One key per full block of token ids; each hashes its parent's key and its own ids (vLLM's chain)."""
    keys, parent = [], 0
    for start in range(0, len(ids) - block_tokens + 1, block_tokens):
        parent = hash((parent, tuple(ids[start : start + block_tokens])))
        keys.append(parent)
    return keys


def counter_for(settings: Settings) -> TokenCounter:
    """The counter these settings name: the engine's tokenizer (`--tokenizer`), else characters."""
    if settings.tokenizer is None:
        return _chars(settings.chars_per_token)
    return _loaded(
        settings.tokenizer,
        settings.template_tokens,
        settings.template_message_tokens,
        settings.template_reply_tokens,
    )


@functools.lru_cache(maxsize=16)
def _chars(chars_per_token: float) -> CharCounter:
    """One counter per ratio: a request looks it up instead of making one."""
    return CharCounter(chars_per_token)


@functools.lru_cache(maxsize=4)
def _loaded(path: str, fixed_tokens: int, per_message: int = 0, reply: int = 0) -> TokenizerCounter:
    """Read once per server (a tokenizer takes tens of ms to load), then every request reuses it."""
    return TokenizerCounter(load_tokenizer(Path(path)), fixed_tokens, Path(path).name, per_message, reply)


def load_tokenizer(path: Path) -> Any:
    """A `tokenizers.Tokenizer` from a tokenizer.json, a folder holding one, or a GGUF."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizerError(
            f"--tokenizer {path} needs the tokenizers library, which is not installed. Install it "
            f"with `{INSTALL}` (or `make engines`), or start without --tokenizer (tokens are then "
            f"counted from characters)."
        ) from None
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise TokenizerError(
            f"--tokenizer {path}: no such file. Name the model file the server loaded (a .gguf) or "
            f"its tokenizer.json, or start without --tokenizer (tokens are then counted from characters)."
        )
    if path.suffix.lower() == ".gguf":
        return from_gguf(path)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # the library raises a bare Exception for a file it cannot parse
        raise TokenizerError(
            f"--tokenizer {path} is not a tokenizer.json the tokenizers library can read ({exc}). "
            f"Name the model's own tokenizer.json or .gguf."
        ) from None


def from_gguf(path: Path) -> Any:
    """The byte-level BPE a GGUF's metadata describes: its tokens in id order, its merges, its
    control tokens kept whole (`<|im_start|>` is one token, as llama.cpp reads it)."""
    try:
        import gguf
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    except ImportError:
        raise TokenizerError(
            f"--tokenizer {path} is a GGUF, read with the gguf library, which is not installed. "
            f"Install it with `{INSTALL}` (or `make engines`)."
        ) from None
    try:
        fields = gguf.GGUFReader(str(path)).fields
    except Exception as exc:  # a damaged or foreign file: numpy/struct errors of every kind
        raise TokenizerError(f"--tokenizer {path} cannot be read as a GGUF ({exc}).") from None

    def text(key: str) -> str | None:
        field = fields.get(key)
        return None if field is None else str(field.contents())

    model, split = text("tokenizer.ggml.model"), text("tokenizer.ggml.pre")
    beside = path.parent / "hf" / "tokenizer.json"
    if model != "gpt2" or split not in GGUF_SPLITS or "tokenizer.ggml.merges" not in fields:
        instead = beside if beside.is_file() else "the model's tokenizer.json"
        raise TokenizerError(
            f"--tokenizer {path}: its tokenizer (model {model}, split {split}) is not a GPT-2 style "
            f"byte-level BPE, the one kind the practice server rebuilds from a GGUF. Pass {instead} "
            f"instead (the same vocabulary in Hugging Face's layout)."
        )
    tokens = [str(t) for t in fields["tokenizer.ggml.tokens"].contents()]
    pairs = (str(m).split(" ", 1) for m in fields["tokenizer.ggml.merges"].contents())
    merges = [(left, right) for left, right in pairs]
    types = fields["tokenizer.ggml.token_type"].contents() if "tokenizer.ggml.token_type" in fields else []
    bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    control = [t for t, kind in zip(tokens, types, strict=False) if kind == gguf.TokenType.CONTROL]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    return tok
