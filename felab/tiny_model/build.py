"""
A tiny model: a tiny Llama with random weights, made locally in seconds.

It exists to exercise real engines (llama.cpp's llama-server, MLX's mlx_lm) on a
machine that cannot download a model, and to check an install before a multi-GB
download. It answers in gibberish: the weights are random. What it does have is
real shape: a byte-level BPE tokenizer (so ~3,000 tokens of English is ~3,000
tokens), a chat template, and enough layers that prefilling the lesson 06 opening
takes a measurable time on a laptop CPU while each decoded token stays cheap.

    felab tiny-model .tools/tiny-model       # or: python -m felab.tiny_model DIR

writes, from one seed, the same weights twice:

    DIR/hf/     config.json, model.safetensors, tokenizer.json, tokenizer_config.json
                -> mlx_lm.generate --model DIR/hf ...   /   mlx_lm.server --model DIR/hf
    DIR/tiny-model.gguf
                -> llama-server -m DIR/tiny-model.gguf

Needs the `engines` extra (numpy, safetensors, tokenizers, gguf); no torch, no network.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import click

from felab.paths import KIT_ROOT, from_here, learner_folder

# ── the chat template (Jinja; both llama.cpp and transformers render it) ─────
# ChatML-shaped. Content is printed verbatim so mlx_lm.cache_prompt's
# `continue_final_message` can find the end of the cached user turn.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2
EOS = "<|im_end|>"

# Built-in English for the tokenizer, so it works even outside the kit. The kit's
# lesson texts are added to it (see training_text) so lesson prompts tokenize to
# about one token per word, as with a real model's tokenizer.
BUILTIN_TEXT = """\
A language model reads a prompt, one token at a time, and writes a reply one token at a time.
Reading the prompt is called prefill; writing the reply is called decode. Prefill can look at
every prompt token at once, so it is limited by arithmetic. Decode makes one token per step, so
it is limited by how fast the weights and the cache can be read from memory. The key-value cache
keeps the attention keys and values of every token seen so far, so the model never reads the
same text twice within one request. A prefix cache keeps them across requests: when the next
prompt starts with the same words, the server starts reading where the old prompt ended.
The time to first token is the wait before the first word appears. Throughput is how many tokens
the server writes per second across all users. A server has seats, or slots: each one holds
one conversation and its cache. More seats serve more people at once, but each gets a smaller
share of the context. Quantization stores each weight in fewer bits, so a model needs less
memory and reads faster, at a small cost in quality. The customer asked for a refund, an invoice,
a status page, a new API key, and an answer in under eighty words. The support agent searched the
tickets, read the incident status, and paged the on-call engineer when latency spiked.
"""


# ── shapes ────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class Shape:
    """Hyper-parameters. Defaults: ~1.6 M parameters, 6 MB per copy in float32."""

    layers: int = 2
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 384
    vocab: int = 4096
    context: int = 32768
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


# ── the tokenizer ─────────────────────────────────────────────────────────────
def training_text() -> list[str]:
    """Built-in text, lesson 06's opening and the kit's lesson sources, weighted, then filler.

    A real tokenizer, trained on a vast corpus, reads ordinary English at about one
    token per word. This one has a few hundred kilobytes to learn from, so the text the
    engines will be sent comes first, ten times over: lesson 06's opening (about 2,800
    tokens then, close to its chars/4 estimate of 3,028; without it, over 4,000 and the
    opening would overflow a 4,096-token seat) and the lesson sources. CPython's own
    help text fills the rest of the vocabulary: plain English, always installed.
    """
    kit = [BUILTIN_TEXT, *lesson06_prompts()]
    lessons = KIT_ROOT / "lessons"
    if lessons.is_dir():
        for path in sorted(lessons.glob("*/*")):
            if path.suffix in {".py", ".md"} and path.is_file():
                kit.append(path.read_text(encoding="utf-8", errors="replace"))
    texts = kit * 10
    try:
        from pydoc_data.topics import topics

        texts.extend(topics[k] for k in sorted(topics))
    except ImportError:
        pass
    return texts


def lesson06_prompts() -> list[str]:
    """Lesson 06's opening and questions, as prefix_bench.py sends them (none outside the kit)."""
    path = KIT_ROOT / "lessons" / "06-prefix-caching" / "prefix_bench.py"
    if not path.is_file():
        return []
    spec = importlib.util.spec_from_file_location("_felab_prefix_bench", path)
    if spec is None or spec.loader is None:
        return []
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)  # lesson scripts run nothing at import
    except (ImportError, SyntaxError):
        # A lesson being edited, or one whose import fails in this Python: the tiny model is still
        # built (its tokenizer is then trained without lesson 06's prompts). Any other error at
        # import is a bug in the lesson, and shows.
        return []
    return [str(getattr(module, "PREAMBLE", "")), "\n".join(getattr(module, "QUESTIONS", []))]


def train_tokenizer(vocab_size: int):
    """A byte-level BPE (GPT-2 style pre-tokenizer) trained on training_text()."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    return tok


# ── the weights ───────────────────────────────────────────────────────────────
def make_weights(shape: Shape, vocab: int, banned: list[int], seed: int) -> dict:
    """Random Llama weights in Hugging Face names and (out, in) layout, float32.

    One trick keeps the gibberish printable: every token embedding carries a
    constant 1.0 in dimension 0, which survives to the final norm, and the output
    rows of special tokens and lone non-ASCII bytes read that dimension with a
    negative weight. So the model (almost) never ends early or emits broken UTF-8.
    """
    import numpy as np

    rng = np.random.default_rng(seed)

    def rand(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims) * 0.02).astype(np.float32)

    h, hd = shape.hidden, shape.head_dim
    embed = rand(vocab, h)
    embed[:, 0] = 1.0
    lm_head = rand(vocab, h)
    lm_head[:, 0] = 0.0
    lm_head[banned, 0] = -1.0
    w = {
        "model.embed_tokens.weight": embed,
        "model.norm.weight": np.ones(h, np.float32),
        "lm_head.weight": lm_head,
    }
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        w[p + "self_attn.q_proj.weight"] = rand(shape.heads * hd, h)
        w[p + "self_attn.k_proj.weight"] = rand(shape.kv_heads * hd, h)
        w[p + "self_attn.v_proj.weight"] = rand(shape.kv_heads * hd, h)
        w[p + "self_attn.o_proj.weight"] = rand(h, shape.heads * hd)
        w[p + "mlp.gate_proj.weight"] = rand(shape.ffn, h)
        w[p + "mlp.up_proj.weight"] = rand(shape.ffn, h)
        w[p + "mlp.down_proj.weight"] = rand(h, shape.ffn)
    return w


def banned_ids(tok) -> list[int]:
    """Special tokens and tokens that decode to incomplete UTF-8."""
    out = []
    for token, i in tok.get_vocab().items():
        if token in SPECIAL_TOKENS:
            out.append(i)
            continue
        if "\ufffd" in tok.decode([i]):
            out.append(i)
    return sorted(out)


# ── writers ───────────────────────────────────────────────────────────────────
def write_hf(out: Path, shape: Shape, tok, weights: dict) -> None:
    """The Hugging Face layout that mlx_lm (and transformers) load."""
    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    vocab = tok.get_vocab_size()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.ffn,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": shape.context,
        "rms_norm_eps": shape.rms_eps,
        "rope_theta": shape.rope_theta,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": tok.token_to_id("<|endoftext|>"),
        "eos_token_id": tok.token_to_id(EOS),
        "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    tok.save(str(out / "tokenizer.json"))
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": EOS,
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": shape.context,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": config["eos_token_id"], "do_sample": True}, indent=2) + "\n"
    )
    (out / "README.md").write_text(
        "# felab tiny model\n\nRandom weights: it writes gibberish. Made by `felab tiny-model` "
        "to exercise engines offline, not to answer questions.\n"
    )


def _permute_for_gguf(w, n_head: int):
    """llama.cpp's rope pairs (i, i+1); Hugging Face's pairs (i, i+d/2). Same as convert_hf_to_gguf."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path: Path, shape: Shape, tok, weights: dict) -> None:
    """The same model as one GGUF file that llama-server loads (gguf-py, no torch)."""
    import gguf

    vocab = tok.get_vocab()
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    types = [gguf.TokenType.CONTROL if t in SPECIAL_TOKENS else gguf.TokenType.NORMAL for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in json.loads(tok.to_str())["model"]["merges"]]

    path.parent.mkdir(parents=True, exist_ok=True)
    wr = gguf.GGUFWriter(str(path), "llama")
    wr.add_name("felab tiny model (random weights)")
    wr.add_file_type(gguf.LlamaFileType.ALL_F32)
    wr.add_context_length(shape.context)
    wr.add_embedding_length(shape.hidden)
    wr.add_block_count(shape.layers)
    wr.add_feed_forward_length(shape.ffn)
    wr.add_head_count(shape.heads)
    wr.add_head_count_kv(shape.kv_heads)
    wr.add_rope_dimension_count(shape.head_dim)
    wr.add_rope_freq_base(shape.rope_theta)
    wr.add_layer_norm_rms_eps(shape.rms_eps)
    wr.add_vocab_size(len(tokens))
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("gpt-2")  # the same split regex as the ByteLevel pre-tokenizer
    wr.add_token_list(tokens)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(vocab["<|endoftext|>"])
    wr.add_eos_token_id(vocab[EOS])
    wr.add_eot_token_id(vocab[EOS])
    wr.add_pad_token_id(vocab["<|endoftext|>"])
    wr.add_add_bos_token(False)
    wr.add_chat_template(CHAT_TEMPLATE)

    names = {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    wr.add_tensor("token_embd.weight", weights["model.embed_tokens.weight"])
    for i in range(shape.layers):
        for hf, gg in names.items():
            t = weights[f"model.layers.{i}.{hf}.weight"]
            if hf == "self_attn.q_proj":
                t = _permute_for_gguf(t, shape.heads)
            elif hf == "self_attn.k_proj":
                t = _permute_for_gguf(t, shape.kv_heads)
            wr.add_tensor(f"blk.{i}.{gg}.weight", t)
    wr.add_tensor("output_norm.weight", weights["model.norm.weight"])
    wr.add_tensor("output.weight", weights["lm_head.weight"])

    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


# ── the one entry point ───────────────────────────────────────────────────────
@dataclass
class Made:
    hf_dir: Path
    gguf_path: Path
    vocab: int
    params: int
    seconds: float


def make_tiny_model(out: Path, shape: Shape = Shape(), seed: int = 0) -> Made:
    """Write DIR/hf/ and DIR/tiny-model.gguf with the same random weights."""
    t0 = time.perf_counter()
    out = Path(out)
    tok = train_tokenizer(shape.vocab)
    weights = make_weights(shape, tok.get_vocab_size(), banned_ids(tok), seed)
    write_hf(out / "hf", shape, tok, weights)
    write_gguf(out / "tiny-model.gguf", shape, tok, weights)
    (out / "shape.json").write_text(json.dumps({**asdict(shape), "seed": seed}, indent=2) + "\n")
    return Made(
        out / "hf",
        out / "tiny-model.gguf",
        tok.get_vocab_size(),
        sum(int(v.size) for v in weights.values()),
        time.perf_counter() - t0,
    )


DEFAULT_DIR = KIT_ROOT / ".tools" / "tiny-model"


def missing_extra() -> str:
    """What to install, written for the learner's folder (`make -C ../.. engines` in a lesson)."""
    kit = os.path.relpath(KIT_ROOT, learner_folder())
    return (
        "The tiny model needs the engines extra (numpy, safetensors, tokenizers, gguf).\n"
        f"Install it with:  {from_here('make engines')}   "
        f"(or: {from_here('.venv/bin/pip')} install -e '{kit}[engines]')"
    )


@click.command("tiny-model")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path), required=False)
@click.option("--layers", default=Shape.layers, show_default=True, help="transformer blocks")
@click.option("--hidden", default=Shape.hidden, show_default=True, help="model width (heads of 32)")
@click.option("--seed", default=0, show_default=True, help="random seed for the weights")
def tiny_model_command(out: Path | None, layers: int, hidden: int, seed: int) -> None:
    """Write a tiny random-weight Llama (Hugging Face layout + GGUF) to OUT, offline.

    OUT defaults to .tools/tiny-model in the kit folder.

    It writes gibberish: it exists to exercise llama-server and mlx_lm, not to answer.

    \b
    Examples:
      felab tiny-model .tools/tiny-model
      llama-server -m .tools/tiny-model/tiny-model.gguf -c 16384 -np 4
      mlx_lm.generate --model .tools/tiny-model/hf --prompt "hello" --max-tokens 20
      LLAMACPP_MODEL=$PWD/.tools/tiny-model/tiny-model.gguf \\
        bash lessons/02-three-local-servers/serve_llamacpp.sh Q4_K_M 16384 4
    """
    if hidden % 32 or hidden < 64:
        raise click.BadParameter("use a multiple of 32, at least 64", param_hint="--hidden")
    out = out or DEFAULT_DIR
    needed = ("gguf", "numpy", "safetensors", "tokenizers")
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        raise click.ClickException(f"not installed: {', '.join(missing)}.\n{missing_extra()}")
    shape = Shape(
        layers=layers, hidden=hidden, heads=hidden // 32, kv_heads=max(1, hidden // 64), ffn=3 * hidden
    )
    made = make_tiny_model(out, shape, seed)
    click.echo(
        f"tiny model: {made.params / 1e6:.1f} M random parameters, "
        f"{made.vocab:,}-token BPE vocabulary, made in {made.seconds:.1f} s "
        f"(it writes gibberish; it exercises engines)"
    )
    click.echo(f"  Hugging Face layout (mlx_lm): {made.hf_dir}")
    click.echo(f"  GGUF (llama-server):          {made.gguf_path}")


def main() -> None:
    tiny_model_command()


if __name__ == "__main__":
    main()
