"""The report card's picture: cold TTFT against prompt length, measured and predicted (matplotlib).

Three things on one chart: each cold prompt measured on the real server (dots),
the same prompts on the twin (crosses), and the profile's formula for one prompt
on an idle server (the line). Where dots and line part, the formula misses a term
the engine has; where crosses and line part, the practice server does not keep
its own formula (HTTP, a busy machine).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from felab.calibrate.probes import Sample
from felab.mock_server.profile import timing_of


def draw(
    real: Sequence[Sample], twin: Sequence[Sample], settings: dict[str, Any], title: str, out: Path
) -> Path:
    """Draw the chart into `out` (.png) and return its path."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot([s.prompt_tokens for s in real], [s.ttft_ms for s in real], "o", label="real server, measured")
    ax.plot(
        [s.prompt_tokens for s in twin],
        [s.ttft_ms for s in twin],
        "x",
        label="twin (practice server), measured",
    )
    top = max([s.prompt_tokens for s in [*real, *twin]] or [1000])
    xs = range(1, top + 1, 4)  # fine enough for a tooth 64 tokens wide (a last piece of few rows)
    timing = timing_of(settings)
    ys = [timing.alone_ms(x) for x in xs]
    ax.plot(xs, ys, "-", linewidth=0.8, alpha=0.6, label="profile's formula")
    ax.set(xlabel="prompt tokens (none cached)", ylabel="time to first token, ms", title=title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
