"""`make bench`'s replay phase runs, every part of it, at a tiny size (its timings are not checked here:
a benchmark reports them; see docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys

from felab.paths import KIT_ROOT


def test_the_replay_benchmark_runs_every_part_at_a_tiny_size() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "felab.bench", "--tiny", "--phase", "replay"],  # --limit 200 --hostile-mb 2
        cwd=KIT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    for title in ("speed", "routing balance", "parallel sweep", "hostile input", "targets:"):
        assert title in out.stdout, title
    figures = json.loads(out.stdout.splitlines()[-1])
    assert [(r["model"], r["requests"]) for r in figures["speed"]] == [
        ("defaults", 200),
        ("defaults", 200),
        ("twin", 200),
        ("twin", 200),
    ]
    assert [(r["replicas"], r["route"]) for r in figures["routing_balance"]] == [
        (18, "random"),
        (18, "prefix"),
        (64, "random"),
        (64, "prefix"),
    ]
    assert "met     --jobs 2 gives --jobs 1's rows (all but wall time): same" in out.stdout
    blank, spaces = figures["hostile_input"]
    assert blank["requests"] == 2 and spaces["refused"] is True
    assert "replay_64_prefix_wall_s" in figures and "replay_64_prefix_twin_wall_s" in figures
