"""docs/fleet.md's figures for SGLang's rule against the prefix route on the Mooncake hour are what
`felab replay` gives today (virtual time: the same on every machine).

When the practice server's model or a route changes, this fails naming the figure to update.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from felab.paths import KIT_ROOT

FLEET_DOC = KIT_ROOT / "docs" / "fleet.md"
COMMAND = ("replay", "--replicas", "18", "--route", "sglang-cache-aware,prefix")


def quoting_paragraph() -> str:
    """The paragraph of fleet.md that quotes the command, on one line."""
    text = " ".join(FLEET_DOC.read_text(encoding="utf-8").split())
    shown = f"`python -m felab {' '.join(COMMAND)}`"
    assert shown in text, f"fleet.md no longer quotes {shown}"
    start = text.rindex(". ", 0, text.index(shown)) + 2
    return text[start : text.index("64 requests", start)]


def test_the_replay_figures_fleet_md_quotes_are_the_replays(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "felab", *COMMAND, "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "FELAB_RESULTS_DIR": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    rows = {r["route"]: r for r in map(json.loads, (x for x in out.stdout.splitlines() if x.startswith("{")))}
    sglang, prefix = rows["sglang-cache-aware"], rows["prefix"]
    said = quoting_paragraph()
    expected = [
        f"hit rate {sglang['hit_pct']:.1f}% against {prefix['hit_pct']:.1f}%",
        f"load max/mean {sglang['load_max_over_mean']:.2f} against {prefix['load_max_over_mean']:.2f}",
        f"TTFT p95 is {sglang['ttft_p95_ms'] / 1000:.1f} s against {prefix['ttft_p95_ms'] / 1000:.1f} s",
    ]
    for figure in expected:
        assert figure in said, f"docs/fleet.md should say: {figure}"
