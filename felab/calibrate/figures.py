"""Figures checked as they arrive: a server that reports something impossible is stopped at once.

Calibrate fits what servers report (`usage`: prompt, cached and reply tokens) to what its
clock measured. A figure that cannot be true (a negative count, a word where a number
belongs, NaN, more tokens cached than the prompt had, a prompt of more tokens than twice its
characters) would become a setting no server has (`chars_per_token = -4.06`), or a
traceback deep inside the fit. So each reply's figures are checked the moment it arrives,
and the first one that lies ends calibrate with one message naming the server and the
figure: on a paid target, before another request is billed.

What is checked, and the bound each time:

    usage.prompt_tokens       a whole number, at least 1, at most 2 per character sent + 256
                              (English prose is about 4 characters a token; a chat template adds a few)
    cached_tokens             a whole number from 0 to prompt_tokens
    reply tokens              a whole number from 0 to 4 x max_tokens + 16 (a server stops at max_tokens)
    the clock's times         finite, not negative, in order: first token <= last token
"""

from __future__ import annotations

import math
from typing import Any

from felab.errors import FelabError
from felab.streaming import CallResult
from felab.targets import Target


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def lie(r: CallResult, chars: int, max_tokens: int) -> str | None:
    """What in this reply cannot be true, in words (None: every figure is possible)."""
    prompt: Any = r.prompt_tokens  # as the server sent it: maybe not a number at all
    cached: Any = r.cached_tokens
    out: Any = r.output_tokens
    if not _whole(prompt) or prompt < 1:
        return f"usage.prompt_tokens = {prompt!r} (a prompt is a whole number of tokens, at least 1)"
    if prompt > 2 * chars + 256:
        return f"usage.prompt_tokens = {prompt:,} for a prompt of {chars:,} characters"
    if cached is not None and (not _whole(cached) or not 0 <= cached <= prompt):
        return f"cached_tokens = {cached!r} with prompt_tokens = {prompt:,} (it is 0 to prompt_tokens)"
    if not _whole(out) or not 0 <= out <= 4 * max_tokens + 16:
        return f"completion_tokens = {out!r} for a reply of at most {max_tokens} tokens"
    times = [r.ttft_ms, r.total_ms, *r.itl_ms]
    if not all(isinstance(t, float | int) and math.isfinite(t) and t >= 0 for t in times):
        return "times that are not finite, positive numbers"
    if r.total_ms < r.ttft_ms:
        return f"its last token ({r.total_ms:.1f} ms) before its first ({r.ttft_ms:.1f} ms)"
    return None


def check(r: CallResult, chars: int, max_tokens: int, target: Target) -> None:
    """Raise the one message for a reply whose figures cannot be true."""
    found = lie(r, chars, max_tokens)
    if found is None:
        return
    paid = " before sending (and paying for) more," if target.is_paid else ""
    raise FelabError(
        f"the {target.name} server at {target.base_url} reported {found}, which cannot be true. "
        f"Calibrate stopped at this figure,{paid} and wrote nothing: a profile fitted to it would "
        f"describe no server. Check the server (or a proxy in front of it, which may rewrite "
        f"`usage`), then calibrate again."
    )
