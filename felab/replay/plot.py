"""A replay's picture (matplotlib, the `plot` extra): a sweep's hit rate and TTFT p95 against the
swept value; a single configuration's hit rate and TTFT percentiles.

The x axis is the first swept flag with numbers (replicas, cache blocks, TTL, rates),
else the route; every combination of the other swept flags is one line. TTFT is drawn
on a log scale: a fleet that cannot keep up waits minutes, one that can waits
milliseconds, and both belong in one picture.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from felab.replay.report import knob_cell, requests_words
from felab.replay.sweep import Knob


def x_knob(swept: Sequence[Knob]) -> Knob:
    numeric = [k for k in swept if k.field != "route"]
    return (numeric or list(swept))[0]


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, out: Path) -> Path:
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    pyplot().close(fig)
    return out


def draw_one(row: dict[str, Any], out: Path) -> Path:
    """One configuration (nothing swept) into `out`: the share of prompt tokens found cached, and
    TTFT at p50, p95 and p99 (seconds, log scale)."""
    plt = pyplot()
    fig, (hit, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    found = row.get("hit_pct")
    if found is None:  # a server that does not report cached tokens: nothing to draw, said so
        hit.text(0.5, 0.5, "the server reported no cached tokens", ha="center", va="center")
    else:
        hit.bar(["cached", "computed"], [found, 100 - found], color=["tab:green", "tab:gray"])
    hit.set(ylabel="% of prompt tokens", ylim=(0, 100))
    names = ("p50", "p95", "p99")
    seconds = [(row.get(f"ttft_{p}_ms") or 0) / 1000 for p in names]
    ttft.bar(names, seconds, color="tab:blue")
    ttft.set(ylabel="TTFT, seconds (log scale)", yscale="log")
    for ax in (hit, ttft):
        ax.grid(True, axis="y", alpha=0.3)
    fleet = f", {row['replicas']} replicas, route {row['route']}" if row.get("replicas") else ""
    fig.suptitle(f"{row['trace']}: {requests_words(row)}{fleet}")
    return save(fig, out)


def draw(rows: Sequence[dict[str, Any]], swept: Sequence[Knob], out: Path) -> Path:
    """Draw the sweep into `out` (a .png) and return its path."""
    plt = pyplot()

    x = x_knob(swept)
    others = [k for k in swept if k is not x]
    lines: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        label = ", ".join(f"{k.column} {knob_cell(k, r)}" for k in others) or "replay"
        lines.setdefault(label, []).append(r)
    fig, (hit, ttft) = plt.subplots(1, 2, figsize=(10, 4))
    for label, group in lines.items():
        xs = [str(knob_cell(x, r)) for r in group]
        hit.plot(xs, [r["hit_pct"] for r in group], marker="o", label=label)
        ttft.plot(xs, [(r["ttft_p95_ms"] or 0) / 1000 for r in group], marker="o", label=label)
    hit.set(xlabel=x.column, ylabel="cache hit rate, % of prompt tokens", ylim=(0, 100))
    ttft.set(xlabel=x.column, ylabel="TTFT p95, seconds (log scale)", yscale="log")
    for ax in (hit, ttft):
        ax.grid(True, alpha=0.3)
    if others:
        ttft.legend(fontsize="small")
    fig.suptitle(f"{rows[0]['trace']}: {requests_words(rows[0])}, first configuration")
    return save(fig, out)
