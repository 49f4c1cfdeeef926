"""List prices, kept in one place with where and when each was read, and the `--usage` cost line.

Prices change: every entry names its source and the month it was checked.
`--price-in` and `--price-cached` (USD per million input tokens) override the
table for one run, and are the way to price a model the table does not know.
The cost line always shows the prices it used, never a bare percentage.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from felab.targets import Target


@dataclass(frozen=True)
class Price:
    """USD per million input tokens: at list price, and for the cached part of a prompt."""

    input: float
    cached: float
    source: str
    """Where the numbers come from, and when they were checked (or `--price-in/--price-cached`)."""


# (target, model) -> price. Check the pricing page before trusting a number here.
PRICES: dict[tuple[str, str], Price] = {
    ("fireworks", "accounts/fireworks/models/gpt-oss-120b"): Price(
        input=0.15,  # serverless; output is $0.60 / 1M (fireworks.ai/models/fireworks/gpt-oss-120b)
        cached=0.015,  # as reported for cached input; the default discount is 50%: check the pricing page
        source="felab/prices.py (fireworks.ai/pricing, checked 2026-11)",
    ),
}


def add_price_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add --price-in and --price-cached to a lesson script's parser, and return it."""
    parser.add_argument(
        "--price-in",
        type=float,
        metavar="USD",
        help="list price of input tokens, USD per 1M (default: felab/prices.py for the model)",
    )
    parser.add_argument(
        "--price-cached",
        type=float,
        metavar="USD",
        help="price of cached input tokens, USD per 1M (default: felab/prices.py for the model)",
    )
    return parser


def price_for(target: Target, args: argparse.Namespace | None = None) -> Price | None:
    """The price of the target's model: the flags where given, else the table; None if unknown."""
    known = PRICES.get((target.name, target.model))
    given_in = getattr(args, "price_in", None)
    given_cached = getattr(args, "price_cached", None)
    if given_in is None and given_cached is None:
        return known
    price_in = given_in if given_in is not None else (known.input if known else None)
    price_cached = given_cached if given_cached is not None else (known.cached if known else None)
    if price_in is None or price_cached is None:
        return None
    source = "--price-in/--price-cached" + (f", else {known.source}" if known else "")
    return Price(price_in, price_cached, source)


def cost_line(prompt_tokens: int, cached_tokens: int, price: Price) -> str:
    """What a prompt's input cost at list price, and with its cached part at the cached price."""
    cached = min(max(cached_tokens, 0), prompt_tokens)
    at_list = prompt_tokens * price.input / 1e6
    with_cache = ((prompt_tokens - cached) * price.input + cached * price.cached) / 1e6
    return (
        f"cost: input at list price ${at_list:.6f} ({prompt_tokens:,} tokens × ${price.input:g}/M); "
        f"with {cached:,} of them cached at ${price.cached:g}/M: ${with_cache:.6f} "
        f"— prices: {price.source}"
    )
