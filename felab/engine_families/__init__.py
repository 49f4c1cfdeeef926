"""The engine registry: every kind of server the kit can measure, one module each.

    practice    the kit's practice server (target `mock`)
    llamacpp    llama.cpp's llama-server: seats, GET /props
    mlx         mlx_lm.server (Apple silicon)
    vllm        vLLM
    sglang      SGLang
    ollama      Ollama: seats of its own, GET /api/ps
    tgi         Hugging Face Text Generation Inference: 422 for an over-long prompt
    fireworks   Fireworks, the paid cloud target

Each module builds one `Engine` (family.py says what each field means); `ENGINES` lists
them in the order `--target` offers them. A new engine is one module and one line here:
see docs/adding-an-engine.md.
"""

from __future__ import annotations

from felab.engine_families import fireworks, llamacpp, mlx, ollama, practice, sglang, tgi, vllm
from felab.engine_families.family import Engine

ENGINES: dict[str, Engine] = {
    e.name: e
    for e in (
        practice.ENGINE,
        llamacpp.ENGINE,
        mlx.ENGINE,
        vllm.ENGINE,
        sglang.ENGINE,
        ollama.ENGINE,
        tgi.ENGINE,
        fireworks.ENGINE,
    )
}
"""Every target, by its `--target` name."""
