"""The replay's rows, for people: two tables with the same rows, one line per configuration.

    what the traffic found   tokens sent and found cached, the hit rate, what the prompt tokens cost
    how long it took         TTFT percentiles, queueing, load per replica, span and wall time

A column in ms shows seconds once a value passes 10,000 ms, and says so in its heading.

(One table with every column would be 170 characters wide.) A configuration is named
by its replicas, route and cache size, and by any other flag that was swept. `--json`
prints the rows themselves instead, one object a line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tabulate import tabulate

from felab.mock_server.config import DEFAULTS
from felab.replay.sweep import KNOBS, Knob
from felab.tables import alignment

ALWAYS = ("replicas", "route", "cache_blocks")

FOUND = (
    ("requests", "requests", "int"),
    ("failed", "failed", "int"),
    ("prompt_tokens", "prompt\ntokens", "int"),
    ("cached_tokens", "cached\ntokens", "int"),
    ("hit_pct", "hit\n%", ".1f"),
    ("same_replica_pct", "same replica\nas last turn %", ".1f"),
    ("cost_list_usd", "$ prompt tokens\nat list price", ".2f"),
    ("cost_cached_usd", "$ prompt tokens,\ncached price", ".2f"),
)
TIMES = (
    ("ttft_p50_ms", "TTFT p50\nms", "int"),
    ("ttft_p95_ms", "TTFT p95\nms", "int"),
    ("ttft_p99_ms", "TTFT p99\nms", "int"),
    ("queue_p50_ms", "queue p50\nms", "int"),
    ("queue_p95_ms", "queue p95\nms", "int"),
    ("prefill_busy_pct", "prefill\nbusy %", ".0f"),
    ("load_max_over_mean", "load\nmax/mean", ".2f"),
    ("send_lag_p99_ms", "sent late\np99 ms", ".1f"),
    ("span_s", "span\ns", "short"),
    ("wall_s", "wall\ns", ".2f"),
    ("x_real_time", "times\nreal time", "short"),
)
OPTIONAL = (
    "failed",
    "same_replica_pct",
    "queue_p50_ms",
    "queue_p95_ms",
    "prefill_busy_pct",
    "load_max_over_mean",
    "send_lag_p99_ms",
)
"""Columns left out when no row has a value (a real-time replay cannot see queues or replicas)."""

FLOATFMT = {"int": ".0f", "short": "g"}
"""tabulate's format for the columns whose cells are made here (rounded, or written as text)."""

SECONDS_PAST_MS = 10_000
"""A column in ms shows seconds instead once a value in it passes this (an overloaded fleet's
TTFT runs to hours: 25,949 s reads better than 25,949,037 ms)."""


def in_seconds(rows: Sequence[dict[str, Any]], key: str, header: str) -> bool:
    """Does this ms column show seconds here (some value past SECONDS_PAST_MS)?"""
    return header.endswith("\nms") and any((r.get(key) or 0) > SECONDS_PAST_MS for r in rows)


def shows(value: Any, key: str) -> bool:
    """Is this worth a column? Any measured value; for `failed`, only a count above 0."""
    return bool(value) if key == "failed" else value is not None


def config_knobs(swept: Sequence[Knob]) -> list[Knob]:
    return [k for k in KNOBS if k.field in ALWAYS or k in swept]


def knob_cell(knob: Knob, row: dict[str, Any]) -> Any:
    """A setting as the table shows it (`never` for a cache that never expires)."""
    value = row.get(knob.field)
    if knob.field == "cache_ttl_s" and value is None:
        return "never"
    if knob.field == "cache_blocks" and row.get("cache_mode") == "seat-prefix":
        return None  # n/a: each seat keeps its last prompt; there is no block cache to size
    return f"{value:,}" if knob.field == "cache_blocks" and isinstance(value, int) else value


def one_table(rows: Sequence[dict[str, Any]], swept: Sequence[Knob], columns: Sequence[tuple]) -> str:
    """The configuration's columns, then these; integers with thousands separators."""
    knobs = config_knobs(swept)
    keep = [c for c in columns if c[0] not in OPTIONAL or any(shows(r.get(c[0]), c[0]) for r in rows)]
    if all(r.get("mode") == "real time" and r.get("replicas") is None for r in rows):
        knobs = []  # a server started elsewhere: its settings are not known here
    seconds = {key for key, header, _ in keep if in_seconds(rows, key, header)}
    headers = [k.column.replace(" ", "\n", 1) for k in knobs]
    headers += [h[: -len("ms")] + "s" if key in seconds else h for key, h, _ in keep]
    body = []
    for r in rows:
        cells: list[Any] = [knob_cell(k, r) for k in knobs]
        for key, _, fmt in keep:
            value = r.get(key)
            if value is not None and key in seconds:
                value = value / 1000
            elif value is not None and fmt == "int":
                value = round(value)
            elif value is not None and fmt == "short":  # 4,478 for a virtual hour; 0.12 for a short real one
                value = f"{value:,.0f}" if value >= 10 else f"{value:.2g}"
            cells.append(value)
        body.append(cells)
    floatfmt = ["g"] * len(knobs)
    floatfmt += [",.1f" if key in seconds else FLOATFMT.get(fmt, fmt) for key, _, fmt in keep]
    # Numbers (and a missing one's n/a) to the right: every measured column, and a setting's
    # column unless its values are words (the route).
    align = alignment([[cells[i] for cells in body] for i in range(len(knobs))]) + ["right"] * len(keep)
    return tabulate(body, headers=headers, floatfmt=floatfmt, intfmt=",", missingval="n/a", colalign=align)


def tables(rows: Sequence[dict[str, Any]], swept: Sequence[Knob]) -> str:
    """Both tables, titled."""
    return (
        "what the traffic found\n\n"
        + one_table(rows, swept, FOUND)
        + "\n\nhow long it took\n\n"
        + one_table(rows, swept, TIMES)
    )


def settings_line(row: dict[str, Any], swept: Sequence[Knob]) -> str:
    """The settings every configuration shares, in one line (those the table does not show)."""
    words = [f"{row['block_tokens']}-token blocks", f"speed {row['speed']:g}x"]
    if row.get("profile"):
        words.insert(0, f"profile {row['profile']}")
    if row.get("prefill_tps") is None:
        return "settings: " + " · ".join([*words, "the rest as the server was started"])
    shown = {k.field for k in config_knobs(swept)}
    ttl = "never" if row["cache_ttl_s"] is None else f"{row['cache_ttl_s']:g} s"
    for field, text in (
        ("prefill_tps", f"prefill {row['prefill_tps']:g} tok/s"),
        ("overhead_ms", f"overhead {row['overhead_ms']:g} ms"),
        ("decode_tps", f"decode {row['decode_tps']:g} tok/s"),
        ("cache_ttl_s", f"cache TTL {ttl}"),
    ):
        if field not in shown:
            words.append(text)
    return "settings: " + " · ".join([*words, *context_words(row, shown), f"seed {row['seed']}"])


def context_words(row: dict[str, Any], shown: set[str]) -> list[str]:
    """The room a prompt has, when it refuses some (seats of a profile, or a context not the default)."""
    seats, context = row.get("seats"), row.get("context_tokens")
    if context is None or "seats" in shown or "context_tokens" in shown:
        return []
    if seats:
        return [f"{seats} seat{'s' if seats > 1 else ''} of {context // seats:,} tokens"]
    return [f"context {context:,} tokens"] if context != DEFAULTS.context_tokens else []


def requests_words(row: dict[str, Any], failures: bool = True) -> str:
    """The requests of the trace a row replayed, timed and failed, and (`failures`) how many of them
    failed: `12,031 requests (7,929 failed)`."""
    failed = row.get("failed") or 0
    words = f"{row['requests'] + failed:,} requests"
    return words + (f" ({failed:,} failed)" if failures and failed else "")


def overload_note(rows: Sequence[dict[str, Any]]) -> str:
    """A word when some configuration's prefill lanes are busier than 100%: its queues only grow."""
    over = [r for r in rows if (r.get("prefill_busy_pct") or 0) > 100]
    if not over:
        return ""
    which = "this configuration" if len(rows) == 1 else f"{len(over)} of these {len(rows)} configurations"
    held = max((r.get("in_flight_max") or 0 for r in over), default=0)
    held_text = (
        f" Up to {held:,} requests were waiting or running at once (a replay holds each until its "
        f"reply ends, so its memory grows with the backlog)."
        if held
        else ""
    )
    return (
        f"note: {which} cannot keep up: the uncached prompt tokens need more prefill time than the "
        f"trace lasts (prefill busy over 100%), so requests wait longer and longer, and TTFT is "
        f"mostly queue.{held_text} Add replicas (--replicas 8,18,64) or model faster hardware "
        f"(--prefill-tps; {prefill_words(over[0])}; a data-centre GPU reads tens of thousands)."
    )


def prefill_words(row: dict[str, Any]) -> str:
    """The prefill rate a row ran at, against the default (a profile's may be slower than a laptop's)."""
    default = f"the default, {DEFAULTS.prefill_tps:,.0f} tokens/s, is a laptop's"
    tps = row.get("prefill_tps")
    return default if tps in (None, DEFAULTS.prefill_tps) else f"this one read {tps:,.0f} tokens/s, {default}"


def failed_note(rows: Sequence[dict[str, Any]]) -> str:
    """Failed requests are not in the figures above; say how many, and the first one's message
    (and the longest prompt's, whose advice fits every prompt that failed)."""
    failed = [r for r in rows if r.get("failed")]
    if not failed:
        return ""
    total = sum(r["failed"] for r in failed)
    note = (
        f"note: {total:,} request(s) failed and are not in the figures; the first: {failed[0]['first_error']}"
    )
    longest = max(failed, key=lambda r: r.get("failed_prompt_max") or 0)
    if not longest.get("failed_prompt_max"):
        return note
    model = all(r.get("prefill_tps") is not None for r in failed)  # a model this replay runs: its flags apply
    said = None if model else longest.get("longest_error")  # (a model's refusal is the server's own words)
    note += longest_failure(failed[0]["first_error"], longest["failed_prompt_max"], said)
    if model:
        note += (
            " A prompt refused for its length fits with --context-tokens of more than that (with "
            "--seats, more than that per seat: each holds context / seats)."
        )
    return note


def longest_failure(first: str | None, tokens: int, said: str | None) -> str:
    """The line after the first failure's message: the longest prompt that failed, and its own
    message where that differs (a server's restart advice is sized for the prompt it refused:
    followed for the first, it may still refuse the longest)."""
    line = f"\nThe longest prompt that failed has {tokens:,} tokens (by the trace)"
    return f"{line}, and failed with: {said}" if said and said != first else f"{line}."
