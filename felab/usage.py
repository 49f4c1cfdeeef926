"""The `--usage` report: what the server says it read, what it reused, and what that cost.

One extra call, not streamed, returns `usage`; `prompt_tokens_details.cached_tokens`
is the part of the prompt the server took from its prefix cache. Where a price
is known (felab/prices.py, or --price-in/--price-cached), a cost line follows.
"""

from __future__ import annotations

from typing import Any

import openai

from felab.prices import Price, cost_line
from felab.streaming import Usage, usage_once
from felab.targets import Target


def report_usage(
    target: Target,
    api: openai.OpenAI,
    messages: list[dict],
    extra: dict[str, Any],
    price: Price | None = None,
) -> Usage:
    """Make one non-streamed call and print its usage line, then its cost line where a price is known."""
    usage = usage_once(api, target.model, messages, max_tokens=8, **extra)
    print(f"\nusage: prompt_tokens={usage.prompt_tokens}  cached_tokens={usage.cached_tokens}")
    if not usage.cached_tokens:
        print(
            "note: no cached tokens reported. Run the same command again at once: caches expire when "
            "idle. If it still says None, this model does not report them; pass another with --model."
        )
    if price is None:
        if target.is_paid:
            print(
                f"cost: no price on file for {target.model} (felab/prices.py); pass --price-in and "
                f"--price-cached (USD per 1M input tokens) to see one."
            )
    elif usage.prompt_tokens:
        print(cost_line(usage.prompt_tokens, usage.cached_tokens or 0, price))
    return usage
