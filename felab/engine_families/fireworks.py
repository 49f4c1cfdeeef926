"""Fireworks (a cloud service, paid): nothing to start, a key to send, one root URL.

`FIREWORKS_BASE_URL` (the variable its SDK reads) is the service's ROOT: inference lives at
$FIREWORKS_BASE_URL/inference/v1, the control plane (make fw-check) at $FIREWORKS_BASE_URL/v1/...
It answers an over-long prompt as OpenAI does; its prefix cache cannot be emptied on request.
"""

from __future__ import annotations

from felab.engine_families.family import Engine, Target, choose_another, openai_overflow

ROOT = "https://api.fireworks.ai"
"""Fireworks' root URL; `FIREWORKS_BASE_URL` overrides it."""
API_PATH = "/inference/v1"


def forget_cache(target: Target) -> str:
    return f"wait: {target.name} keeps a cached prompt for minutes to hours and cannot be told to forget it"


ENGINE = Engine(
    name="fireworks",
    url=f"{ROOT}{API_PATH}",
    start=None,
    model="accounts/fireworks/models/gpt-oss-120b",
    key_env="FIREWORKS_API_KEY",
    paid=True,
    root_env="FIREWORKS_BASE_URL",
    api_path=API_PATH,
    api_key_flag=None,
    status_page="https://status.fireworks.ai",
    read_overflow=openai_overflow,
    fit_context=choose_another,
    forget_cache=forget_cache,
    models_from="copy a current id from its model library (https://fireworks.ai/models)",
)
