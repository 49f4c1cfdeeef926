"""The commands lesson 06's course page gives, each with the folder the page says to type it in.

The page itself (the course's text, not part of the kit) is shared/seeds/lesson-06-prefix-caching.txt
in the course repository, next to the kit's. This list is checked in so the test that types
these commands runs everywhere; tests/test_course_text.py checks it against the page whenever
the page is there (every command in this list is on the page, and every command line of the
page is in this list).

`how` says how the test runs it, on a fresh clone, with bash, on the practice server:
  run      typed as written (a real engine's target points at the practice server)
  dry      `make -n` of it: it would start the learner's own practice server on port 8765,
           or reach Fireworks' control plane
  resolve  the script exists where the path leads from that folder, parses (`bash -n`) and
           answers --dry-run or --help: the engine (llama.cpp, MLX) is not on this machine
  skip     not run; the reason follows
"""

from __future__ import annotations

from dataclasses import dataclass

SEED = "lesson-06-prefix-caching.txt"
LABS = "03-labs"
LESSON = "03-labs/lessons/06-prefix-caching"


@dataclass(frozen=True)
class PageCommand:
    folder: str
    """Where the page says to type it, as a path in the kit's clone (through 03-labs/, as the course does)."""
    command: str
    """As the page writes it."""
    how: str


COMMANDS = [
    PageCommand(LABS, "make demo", "run"),
    PageCommand(LABS, "source .venv/bin/activate", "run"),
    PageCommand(LABS, "make check", "run"),
    PageCommand(LABS, "make mock &", "dry"),
    PageCommand(LABS, "cd lessons/06-prefix-caching", "run"),
    PageCommand(LESSON, "python prefix_bench.py --target mock", "run"),
    PageCommand(LESSON, "python prefix_bench.py --target mock --order variable-first", "run"),
    PageCommand(LESSON, "bash ../02-three-local-servers/serve_llamacpp.sh", "resolve"),
    PageCommand(LESSON, "bash ../02-three-local-servers/serve_llamacpp.sh Q4_K_M 16384 4", "resolve"),
    PageCommand(LESSON, "python prefix_bench.py --target llamacpp", "run"),
    PageCommand(LESSON, "python prefix_bench.py --target llamacpp --order variable-first", "run"),
    PageCommand(LESSON, "bash mlx_prompt_cache.sh", "resolve"),
    PageCommand(LESSON, "python prefix_bench.py --target fireworks --usage", "run"),
    PageCommand(LESSON, "make fw-check", "dry"),
    PageCommand(LABS, "make fw-check", "dry"),
    PageCommand(LABS, "make smoke", "dry"),  # named in "Stuck?": a run that warms the practice server
    PageCommand(
        LABS,
        "pkill -f felab.mock_server",
        "skip: it stops every practice server on the machine, not only the learner's",
    ),
]
"""In the order the page gives them. `make demo` is Day 1's check, which the issue's walk
starts from; `make fw-check` is typed where the learner is after the Fireworks run (the
lesson's folder) or in 03-labs/."""

SENTENCES = {
    "make demo": "from `make demo` to `make fw-check` (issue 20's walk; the page itself does not show it)",
}
"""Commands of the list that are not on the page, and why they are listed anyway."""
