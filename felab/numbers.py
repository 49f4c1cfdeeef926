"""Your numbers: the latest recorded row of each lesson, per target and order.

Every run appends a line to `results/<key>.jsonl` (key `06-prefix` belongs to
lesson 06). For the wrap-up only the latest run of each (target, order)
counts, so that is what `make numbers` prints, ready to copy. Where runs
recorded each call's TTFT, a picture is drawn beside the results:
`results/<key>-ttft.png`, one panel per target, one line per order.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from felab.paths import results_dir
from felab.report import table
from felab.results import read_records

GROUP_BY = ("target", "order")
"""A row replaces an earlier one when these fields match (the ones it has)."""


def recorded_keys() -> list[str]:
    """Every key with records, in lesson order (`02-...` before `06-...`)."""
    folder = results_dir()
    return sorted(p.stem for p in folder.glob("*.jsonl")) if folder.is_dir() else []


def latest(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last row of each (target, order), in the order they were first seen."""
    found: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        found[tuple(row.get(k) for k in GROUP_BY)] = row
    return list(found.values())


LAST = ("model", "ts")
"""Columns shown last: what was measured matters more than when."""


def scalars(row: dict[str, Any]) -> dict[str, Any]:
    """The row without per-call lists, floats to 2 decimals, `model` and `ts` last: what a person copies."""
    kept = {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()
            if not isinstance(v, (list, dict))}
    return {**{k: v for k, v in kept.items() if k not in LAST}, **{k: kept[k] for k in LAST if k in kept}}


def collect() -> dict[str, list[dict[str, Any]]]:
    """Latest rows of every recorded key."""
    return {key: latest(read_records(key)) for key in recorded_keys()}


def as_csv(found: dict[str, list[dict[str, Any]]]) -> str:
    """One CSV table: key, then every scalar column any row has."""
    rows = [{"key": key, **scalars(r)} for key, rs in found.items() for r in rs]
    columns: list[str] = []
    for r in rows:
        columns += [c for c in r if c not in columns]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def as_json(found: dict[str, list[dict[str, Any]]]) -> str:
    return json.dumps({key: [scalars(r) for r in rs] for key, rs in found.items()}, indent=2)


def as_text(found: dict[str, list[dict[str, Any]]]) -> str:
    """A table per key, latest run per target and order."""
    parts = []
    for key, rows in found.items():
        lesson = key.split("-", 1)[0]
        parts.append(f"lesson {lesson} · {key} (latest run per target and order)\n")
        parts.append(table([scalars(r) for r in rows]) + "\n")
    return "\n".join(parts)


def plot_ttft(key: str, rows: list[dict[str, Any]]) -> Path | None:
    """Draw each call's TTFT (one panel per target, a line per order); `None` if no calls recorded."""
    with_calls = [r for r in rows if any("ttft_ms" in c for c in r.get("calls", []))]
    if not with_calls:
        return None
    import matplotlib

    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt

    targets = list(dict.fromkeys(r["target"] for r in with_calls))
    fig, axes = plt.subplots(1, len(targets), figsize=(5 * len(targets), 3.6), squeeze=False)
    for ax, target in zip(axes[0], targets, strict=True):
        for r in (r for r in with_calls if r["target"] == target):
            ttft = [c["ttft_ms"] for c in r["calls"]]
            ax.plot(range(1, len(ttft) + 1), ttft, marker="o", label=r.get("order", "run"))
        ax.set_yscale("log")
        ax.set_title(f"{target}")
        ax.set_xlabel("call")
        ax.set_ylabel("time to first token (ms, log scale)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"{key}: each call's time to first token")
    fig.tight_layout()
    path = results_dir() / f"{key}-ttft.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
