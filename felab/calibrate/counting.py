"""How the engine counts tokens, as the twin will count them: with its tokenizer, or from characters.

A twin that counts a prompt's tokens differently from its engine books the wrong
prefill: on held-out text a ratio of characters fitted on calibrate's own prose
under-counted by 9% and 22%. So calibrate finds, where it can, the very file the
engine reads its tokenizer from, and writes it into the profile (`tokenizer`):

- llama-server: `GET /props` names the model it loaded (`model_path`, a GGUF);
- mlx_lm.server, vLLM (or any server whose model id is a folder, or a Hugging Face repo in this
  machine's cache, where both download models): that model's tokenizer.json. Asked for
  mlx_lm's `default_model` (the kit's mlx target), the model `GET /v1/models` lists: mlx_lm
  lists the folder it loaded by its full path, and every repo in the cache;

each only when that file is readable on this machine (a server elsewhere loaded a
file that is not here). Either way calibrate sends a few texts of every kind
(prose, code, numbers, another script: `prompts.varied`) and reads back the
server's `usage.prompt_tokens` for each:

- with a tokenizer, their difference from its count of the same messages is the
  chat template's fixed tokens (`template_tokens`, the median of the texts sent as
  one message) and those of each further message (`template_message_tokens`, from
  the texts sent as three: the engine's role markers are other tokens than the
  practice server's), and what is left is the count's error, stated;
- without one, the character model is fitted on the first text of each kind,
  weighted by how much of a prompt is usually of that kind (prompts.KIND_SHARE), and its
  error is stated on the second (held out): by kind, since one ratio cannot be
  right for prose and for another script at once.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from felab.calibrate import fit, prompts
from felab.calibrate.probes import Prober, get_json
from felab.connect import model_ids
from felab.mock_server.tokens import TokenizerCounter, TokenizerError, load_tokenizer
from felab.mock_server.wire import Message, chat_template
from felab.targets import Target

TEXT_CHARS = 1200
"""Characters of each counting text: a few hundred tokens, quick to prefill, long enough that a
template's few tokens do not decide the ratio."""
TEXTS_PER_KIND = 2
"""Per kind of text: one to fit the character model, one held out to state its error."""
TEXTS = TEXTS_PER_KIND * len(prompts.KINDS)
"""The counting texts."""
REQUESTS = TEXTS + 2
"""The streamed requests this step adds to calibrate's plan: the texts, and one opening asked two
questions (`opener_shift`)."""
MAX_SHIFT = 4
"""The most tokens a reply's opener is taken to differ from a message's marker by (a template's
newline or two): a larger difference between the cached counts is a cache that rounds (blocks)."""
PROMPT_TOKENS = REQUESTS * TEXT_CHARS
"""About how many prompt tokens they hold, at most (announced, billed on a paid target): a token a
character on average. Prose runs at 3 to 4 characters a token, but another script, to a small
vocabulary, at about 2 tokens a character (the kit's tiny models: some 7,700 tokens for the 8
texts, by the rates measured per kind)."""


NOT_COUNTED = (
    "tokens: counted from characters as the cold prompts ran (calibrate's prose): every counting text "
    "came back with no text and was sent again as another, so no other text was counted."
)


@dataclass
class Counted:
    """One counting text: its kind, the messages sent, and the server's count of them."""

    kind: str
    messages: list[dict]
    prompt_tokens: int

    @property
    def text(self) -> str:
        """The messages as the practice server sees them (its plain chat template)."""
        return chat_template([Message(**m) for m in self.messages])

    @property
    def chars(self) -> int:
        return prompts.chars_of(self.messages)


@dataclass
class Finding:
    """What the profile gets: its settings, the evidence for [measured], and a line to print."""

    settings: dict[str, Any]
    measured: dict[str, Any] = field(default_factory=dict)
    line: str = ""


def send_texts(p: Prober) -> list[Counted]:
    """TEXTS_PER_KIND texts of each kind, each a cold prompt (its own tag), timed as any probe. A
    reply with no text is sent again with new text (`Prober.call`), whose messages this step
    does not know: such a text is left out."""
    rng = random.Random(p.seed ^ 0xC0DE)
    out = []
    for round_ in range(TEXTS_PER_KIND):
        for kind in prompts.KINDS:
            text = f"{prompts.tag(rng)} {prompts.varied(kind, TEXT_CHARS, rng)}"
            messages = conversation(text) if round_ else [{"role": "user", "content": text}]
            sample = p.call(messages)
            if not sample.retried:
                out.append(Counted(kind, messages, sample.prompt_tokens))
    return out


def conversation(text: str) -> list[dict]:
    """The text as three messages (a question, a reply, a question): the second round's counting
    texts, so that the tokens each message's role markers add are measured too."""
    third = len(text) // 3
    parts = [text[:third], text[third : 2 * third], text[2 * third :]]
    return [
        {"role": role, "content": part}
        for role, part in zip(("user", "assistant", "user"), parts, strict=True)
    ]


def tokenizer_file(target: Target) -> tuple[Path | None, str]:
    """The file the engine reads its tokenizer from, if this machine can read it; and how it was
    found (or why not), in words."""
    if target.is_paid:
        return None, "a paid service does not say which tokenizer it uses"
    props = get_json(f"{target.base_url.removesuffix('/v1')}/props")
    loaded = props.get("model_path") if isinstance(props, dict) else None
    if isinstance(loaded, str) and loaded not in ("", "none"):
        if not Path(loaded).is_absolute():  # relative to where the server was started: unknown here
            return None, (
                f"the server names its model by a relative path ({loaded}, GET /props; start it "
                f"with the model's full path to let calibrate read its tokenizer)"
            )
        if not Path(loaded).is_file():
            return None, f"the server loaded {loaded} (GET /props), which is not on this machine"
        return Path(loaded), "the model file the server loaded: GET /props"
    found = model_tokenizer(target.model)
    if found is not None:
        return found[0], f"{found[1]}, its model id"
    return listed_tokenizer(target)


def model_tokenizer(model_id: str) -> tuple[Path, str] | None:
    """The tokenizer.json of the model `model_id` names on this machine, and where it was: the
    model's folder (FOLDER), or its repo in the Hugging Face cache (read by huggingface_hub, where
    mlx_lm and vLLM find a model they downloaded); None if neither."""
    folder = Path(model_id).expanduser()
    if (folder / "tokenizer.json").is_file():
        return folder / "tokenizer.json", FOLDER
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # (it comes with `tokenizers`, which reading the file needs anyway)
        return None
    try:
        cached = try_to_load_from_cache(model_id, "tokenizer.json")
    except ValueError:  # not a repo id (a path, a name with spaces): not in the cache
        return None
    return (Path(cached), "the Hugging Face cache") if isinstance(cached, str) else None


FOLDER = "the model's folder"
NOT_FOUND = (
    "the server names no model file on this machine (GET /props; its model id as a folder or as a "
    "Hugging Face repo in the cache; GET /v1/models)"
)


def listed_tokenizer(target: Target) -> tuple[Path | None, str]:
    """For a model id the server maps to what it loaded (mlx_lm's `default_model`): the tokenizer of
    the model GET /v1/models lists, if one is plain. A folder first: mlx_lm lists the one it loaded
    by its full path, beside every repo in the Hugging Face cache; else the one cached repo listed."""
    ids = model_ids(get_json(f"{target.base_url}/models")) or []
    found = {i: hit for i in ids if (hit := model_tokenizer(i)) is not None}
    folders = [i for i, (_, place) in found.items() if place == FOLDER]
    named = folders if len(folders) == 1 else list(found)
    if len(named) == 1:
        return found[named[0]][0], f"the model GET /v1/models lists, {named[0]}"
    if named:
        return None, (
            f"the server lists {len(named)} models whose tokenizers are on this machine (GET /v1/models: "
            f"{', '.join(named)}), and which it serves cannot be told: give calibrate --model with it"
        )
    return None, NOT_FOUND


def counter(path: Path) -> tuple[Path, TokenizerCounter | None, str]:
    """The tokenizer at `path`, or, for a GGUF this kit cannot rebuild, the tokenizer.json beside it
    (hf/tokenizer.json, as `felab tiny-model` lays a model out): the file read and its counter;
    None and why if neither reads."""
    try:
        return path, TokenizerCounter(load_tokenizer(path)), ""
    except TokenizerError as exc:
        beside = path.parent / "hf" / "tokenizer.json"
        if path.suffix.lower() == ".gguf" and beside.is_file():
            return counter(beside)
        return path, None, str(exc)


def with_tokenizer(path: Path, tok: TokenizerCounter, texts: list[Counted], found: str) -> Finding:
    """The tokenizer's count against the server's: the fixed tokens, then what is left over."""
    diffs = [c.prompt_tokens - len(tok.ids(c.text)) for c in texts]
    extra = [len(c.messages) - 1 for c in texts]  # messages after the first
    fixed = round(fit.median([d for d, e in zip(diffs, extra, strict=True) if not e] or diffs))
    more = [(d - fixed) / e for d, e in zip(diffs, extra, strict=True) if e]
    per_message = round(fit.median(more)) if more else 0
    off = [d - fixed - per_message * e for d, e in zip(diffs, extra, strict=True)]
    worst = max(range(len(off)), key=lambda i: abs(off[i]))
    pct = 100 * off[worst] / texts[worst].prompt_tokens
    how = (
        f"exactly as the server does on all {len(texts)}"
        if not off[worst]
        else f"within {abs(off[worst])} tokens ({pct:+.1f}%, {texts[worst].kind}) of the server on "
        f"{len(texts)}"
    )
    line = (
        f"tokens: counted with the engine's tokenizer, {path} ({found}): {how} texts of prose, code, "
        f"numbers and another script, as one message and as three, with {fixed:+d} tokens of chat "
        f"template and {per_message:+d} for each message after the first."
    )
    return Finding(
        {"tokenizer": str(path.resolve()), "template_tokens": fixed, "template_message_tokens": per_message},
        {
            "token_count": f"the engine's tokenizer ({path.name}), from {found}",
            "token_count_error_tokens": off,
            "token_count_error_max_pct": fit.sig(pct, 2),
        },
        line,
    )


def with_characters(texts: list[Counted], why: str) -> Finding:
    """A ratio of characters fitted on the first text of each kind, weighted by prompts.KIND_SHARE; its
    error stated on the rest (held out), kind by kind."""
    fitted: dict[str, Counted] = {}
    held: list[Counted] = []
    for c in texts:
        if c.kind in fitted:
            held.append(c)
        else:
            fitted[c.kind] = c
    share = sum(prompts.KIND_SHARE.get(k, 0.0) for k in fitted)
    per_char = sum(prompts.KIND_SHARE.get(k, 0.0) * c.prompt_tokens / c.chars for k, c in fitted.items())
    ratio = share / per_char  # characters a token over a prompt of prompts.KIND_SHARE's mix
    errors = {c.kind: fit.sig(100 * (c.chars / ratio / c.prompt_tokens - 1), 3) for c in held}
    shown = (
        "On held-out text the twin counts " + ", ".join(f"{k} {e:+.0f}%" for k, e in errors.items())
        if errors
        else "No held-out text came back with text, so its error is not known"
    )
    line = (
        f"tokens: counted from characters, {ratio:.2f} a token (fitted on prose, code, numbers and "
        f"another script), since {why}. {shown} against the server: give --tokenizer (the model's "
        f"tokenizer.json or .gguf) to the twin to count exactly."
    )
    return Finding(
        {"chars_per_token": fit.sig(ratio)},
        {
            "token_count": f"characters, {fit.sig(ratio)} a token, fitted on varied text ({why})",
            "token_count_error_pct": errors,
        },
        line,
    )


def opener_shift(p: Prober, tok: TokenizerCounter) -> tuple[int | None, str]:
    """Where the template's tokens fall: one opening, asked two questions; the engine's cached count
    of the second against the twin's longest common prefix of the two (its ids, with the template's
    fitted tokens), as `template_reply_tokens` (None, and why, where the count cannot tell).

    The counts of whole prompts cannot tell a message's marker from the reply's opener: the tiny
    model's template ends its prompt with `<|im_start|>assistant` and no newline, one token fewer
    than a message's header, so the twin, with the first message one token short instead, found
    one token fewer cached than llama-server after every opening (4,752 of 4,753), and a 16-token
    question took a row more (+6%: rows are what a last piece of few rows costs)."""
    rng = random.Random(p.seed ^ 0x0BE7)
    opening = prompts.opening(TEXT_CHARS, rng)
    first, asked = [prompts.with_question(opening, q) for q in rng.sample(prompts.QUESTIONS, 2)]
    p.call(first, keep_opening=True)
    second = p.call(asked, keep_opening=True)
    if second.retried or not second.cached_tokens:
        return None, "the second question came back with no text, or found nothing cached"
    a, b = (tok.ids(chat_template([Message(**m) for m in ms])) for ms in (first, asked))
    common = len(os.path.commonprefix([a, b]))  # (any sequences, not only strings)
    shift = common - second.cached_tokens
    if abs(shift) > MAX_SHIFT:
        return (
            None,
            f"the server found {second.cached_tokens:,} cached where the twin shares {common:,} (blocks)",
        )
    return (
        shift,
        f"the server found {second.cached_tokens:,} of an opening's tokens cached, the twin {common:,}",
    )


def find(p: Prober, target: Target, lcp: bool = False) -> Finding:
    """Send the counting texts; count them with the engine's tokenizer if there is one, else fit
    characters; either way say how far the twin's count is from the server's. `lcp`: the server's
    cache keeps the longest common prefix to the token, so where the template's tokens fall can be
    found too (`opener_shift`)."""
    texts = send_texts(p)
    if not texts:  # every one came back with no text, and was sent again as another
        return Finding({}, {"token_count": "not checked (every counting text was sent again)"}, NOT_COUNTED)
    path, found = tokenizer_file(target)
    if path is None:
        return with_characters(texts, found)
    used, tok, why = counter(path)
    if tok is None:
        return with_characters(texts, f"{found}, but {why}")
    finding = with_tokenizer(used, tok, texts, found)
    if lcp:
        st = finding.settings
        fitted = TokenizerCounter(tok.tokenizer, st["template_tokens"], "", st["template_message_tokens"])
        shift, how = opener_shift(p, fitted)
        finding.measured["template_reply_evidence"] = how
        if shift is not None:
            st["template_reply_tokens"] = shift
            finding.line += f" The reply's opener: {shift:+d} ({how})."
    return finding
