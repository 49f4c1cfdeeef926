"""The `--usage` report: what the server says it read, and what it reused.

One extra call, not streamed, returns `usage`; `prompt_tokens_details.cached_tokens`
is the part of the prompt the server took from its prefix cache.
"""

from __future__ import annotations

from typing import Any

import openai

from felab.streaming import usage_once
from felab.targets import Target


def report_usage(target: Target, cli: openai.OpenAI, messages: list[dict], extra: dict[str, Any]) -> None:
    """Make one non-streamed call and print its usage line, with advice when nothing was cached."""
    usage = usage_once(cli, target.model, messages, max_tokens=8, **extra)
    print(f"\nusage: prompt_tokens={usage.prompt_tokens}  cached_tokens={usage.cached_tokens}")
    if not usage.cached_tokens:
        print(
            "note: no cached tokens reported. Run the same command again at once: caches expire when "
            "idle. If it still says None, this model does not report them; pass another with --model."
        )
