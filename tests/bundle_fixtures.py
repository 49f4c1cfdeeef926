"""What the bundle tests share: a results fixture, a build from it, lesson 06's sections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from felab.course import bundle

LESSON06_SECTIONS = (
    "what-and-why",
    "watch",
    "key-points",
    "in-plain-words",
    "picture-it",
    "with-real-numbers",
    "words-to-know",
    "from-the-lesson",
    "what-each-command-does",
    "how-to-read-the-output",
    "go-deeper",
    "check-yourself",
    "explain-what-you-learned",
    "your-numbers",
    "done-when",
    "next",
    "stuck",
    "code-in-this-step",
)
"""The `id` of every section (h2) of lesson 06's page, in order."""

MODEL = "accounts/fireworks/models/gpt-oss-120b"
RUNS = [
    {
        "ts": "2026-11-30T04:25:00+00:00",
        "target": "llamacpp",
        "model": "llama-3.1-8b",
        "order": "stable-first",
        "first_ms": 2890.4,
        "rest_p50_ms": 41.2,
        "rest_p95_ms": 45.0,
        "speedup_x": 70.2,
    },
    {
        "ts": "2026-11-30T04:27:00+00:00",
        "target": "llamacpp",
        "model": "llama-3.1-8b",
        "order": "variable-first",
        "first_ms": 2900.0,
        "rest_p50_ms": 2850.0,
        "rest_p95_ms": 2900.0,
        "speedup_x": 1.02,
    },
    {
        "ts": "2026-11-30T04:28:00+00:00",
        "target": "llamacpp",
        "model": "llama-3.1-8b",
        "order": "variable-first",
        "first_ms": 40.0,
        "rest_p50_ms": 39.0,
        "rest_p95_ms": 41.0,
        "speedup_x": None,
        "warm_start": True,
    },
    {
        "ts": "2026-11-30T04:29:00+00:00",
        "target": "fireworks",
        "model": MODEL,
        "order": "stable-first",
        "first_ms": 610.0,
        "rest_p50_ms": 180.0,
        "rest_p95_ms": 240.0,
        "speedup_x": 3.39,
    },
    {
        "ts": "2026-11-30T04:31:00+00:00",
        "target": "mock",
        "model": "felab-practice",
        "order": "stable-first",
        "first_ms": 1241.0,
        "rest_p50_ms": 35.4,
        "rest_p95_ms": 69.7,
        "speedup_x": 35.1,
    },
]
USAGE = [
    {
        "ts": "2026-11-30T04:30:00+00:00",
        "target": "fireworks",
        "model": MODEL,
        "order": "stable-first",
        "prompt_tokens": 3110,
        "cached_tokens": 2944,
    },
]


def write_results(folder: Path) -> Path:
    """results/06-prefix.jsonl and 06-prefix-usage.jsonl as the lesson's script writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    for key, rows in (("06-prefix", RUNS), ("06-prefix-usage", USAGE)):
        (folder / f"{key}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def build_with_fixture(tmp: Path) -> Path:
    """The kit's bundle built from the results fixture into `tmp` (the kit's build/ is left alone)."""
    results = write_results(tmp / "results")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FELAB_RESULTS_DIR", str(results))
        return bundle.build(site=tmp / "site", staging=tmp / "staging")
