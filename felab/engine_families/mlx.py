"""MLX's `mlx_lm.server` (Apple silicon), started by the lesson's serve script.

It reads a request's `model` as a path or hub repo; the string "default_model" means
"the model it was started with", so the kit never has to ask. Its context is the
model's own: no over-context wording of its own to read.
"""

from __future__ import annotations

from felab.engine_families.family import Engine

ENGINE = Engine(
    name="mlx",
    url="http://127.0.0.1:8081/v1",
    model="default_model",
    start="bash lessons/02-three-local-servers/serve_mlx.sh",
    port_variable="MLX_PORT",
    api_key_flag=None,
)
