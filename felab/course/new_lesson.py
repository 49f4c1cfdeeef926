"""`make new-lesson N=07 NAME=slug`: a new lesson folder that already runs, with its course page.

It writes, in `lessons/NN-slug/`:

    README.md      the house sections
    slug.py        a script that measures something real (TTFT over a few calls) with the
                   kit's plumbing, so `make smoke` runs the new lesson at once
    page.md        its course page (make bundle): README, your numbers and code markers
    numbers.toml   its numbers: the script's TTFT on the practice server, filled from results/

The instructor then replaces the measurement with the lesson's own, and its numbers with
what the learner should write down. The page goes on the day of the lesson before it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from felab.course.lessons import LESSONS_DIR, discover
from felab.course.numbers import NUMBERS_FILE
from felab.errors import FelabError

README = """\
# Lesson {number} · {title}

## What and why

(What the learner will measure, and why it matters, in a few sentences.)

## Read the code first

- `{script}`, `main()`: (the lines that hold the idea).

## Run

From this folder, with the practice server running (`make -C ../.. mock` in another terminal):

```bash
python {script} --target mock
```

## What each command does

- `python {script} --target mock` (what it sends, what to look for).

## What you should see

(A sample of the output, and how to read each column.)

## Stuck?

- **Could not connect … nothing is listening there.** Start the server the message names;
  `make -C ../.. check` shows what is up.
"""

SCRIPT = '''\
"""Lesson {number}: {title}.

(The idea in a few lines: what this script measures and why.)

    python {script} --target mock
"""

from __future__ import annotations

try:  # the kit's library: in a Python without it, felab/no_kit.py says which Python has it
    from felab import resolve
except ModuleNotFoundError:
    import pathlib
    import runpy

    runpy.run_path(
        str(pathlib.Path(__file__).resolve().parents[2] / "felab" / "no_kit.py"), run_name="__main__"
    )

from felab import banner, client, lesson_parser, percentile, record, run, stream_once, table

QUESTIONS = ["What is a token?", "What is prefill?", "What is decode?", "What is a KV cache?"]


def main() -> None:
    parser = lesson_parser(__doc__)  # --target, --base-url, --model
    parser.add_argument("--quick", action="store_true", help="fewer calls (for make smoke)")
    args = parser.parse_args()

    target = resolve(args)
    banner(target)
    api = client(target)

    ttft = []
    for i, question in enumerate(QUESTIONS[:2] if args.quick else QUESTIONS, start=1):
        r = stream_once(api, target.model, [{{"role": "user", "content": question}}], max_tokens=16)
        ttft.append(r.ttft_ms)
        print(f"  call {{i}}  TTFT {{r.ttft_ms:7.1f}} ms")

    row = {{"target": target.name, "ttft_p50_ms": percentile(ttft, 50), "ttft_p95_ms": percentile(ttft, 95)}}
    print("\\n" + table([row]))
    record("{key}", {{**row, "model": target.model, "calls": [{{"ttft_ms": t}} for t in ttft]}})


if __name__ == "__main__":
    run(main)
'''


PAGE = """\
---
title: {title}
day: {day}
---

# {title}

<p class="felab-facts">Lesson {number} · Day {day} · <code>lessons/{folder}</code> ·
practice server · free</p>

## What you will do and why {{ #what-and-why }}

(What the learner will measure, and why it matters, in a few sentences.)

## From the lesson {{ #from-the-lesson }}

The lesson's README, `lessons/{folder}/README.md`, as it is in your copy of the kit:

<!-- felab:readme -->

## Your numbers {{ #your-numbers }}

Kept on this device (in this browser). Where a field already shows a value, `make bundle`
found it in your `results/`; what you type replaces it.

<!-- felab:numbers -->

## Done when {{ #done-when }}

(What the learner has written down.)

## Stuck? {{ #stuck }}

**Could not connect … nothing is listening there.**
:   Start the practice server with `make mock` in another terminal (from the kit's folder);
    `make check` shows what is up.

More help: [all fixes](../all-fixes.md), every message the kit prints with its cause and fix.

## Code in this step {{ #code-in-this-step }}

The lesson's scripts exactly as they are in your copy of the kit.

<!-- felab:code -->
"""

NUMBERS = """\
# Lesson {number}'s numbers: the fields of its page's "your numbers" form (make bundle) and of
# `make numbers`' lines, in this order (see docs/bundle.md). Replace this one with what the
# learner should write down.

[[field]]
key = "mock-ttft"
label = "Practice server: TTFT p50 / p95 (ms)"
hint = "From `python {script} --target mock`: the ttft_p50_ms and ttft_p95_ms columns, both."
[field.source]
records = "{key}"
where = {{ target = "mock" }}
values = ["ttft_p50_ms", "ttft_p95_ms"]
"""


def page_day(number: str, root: Path) -> int:
    """The day of the latest lesson page before lesson `number` (day 1 if there is none)."""
    day = 1
    for lesson in discover(root):
        page = lesson.path / "page.md"
        if lesson.number < number and page.is_file():
            found = re.search(r"^day:\s*(\d+)\s*$", page.read_text(encoding="utf-8"), re.MULTILINE)
            day = int(found.group(1)) if found else day
    return day


def create_lesson(number: str, name: str, root: Path = LESSONS_DIR) -> Path:
    """Write `lessons/NN-name/`: README, a runnable script, its course page and numbers, and the
    Makefile that passes `make TARGET` on to the kit's; return it."""
    if not re.fullmatch(r"\d{2}", number):
        raise FelabError(f"N must be two digits, like N=07 (got {number!r}).")
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name):
        raise FelabError(f"NAME must be lower-case words joined by '-', like NAME=batching (got {name!r}).")
    taken = [lesson.name for lesson in discover(root) if lesson.number == number]
    if taken:
        raise FelabError(f"lesson {number} already exists ({taken[0]}); pick another N.")
    folder = root / f"{number}-{name}"
    script = f"{name.replace('-', '_')}.py"
    fields = {
        "number": number,
        "title": name.replace("-", " ").capitalize(),
        "script": script,
        "key": f"{number}-{name}",
        "folder": f"{number}-{name}",
        "day": page_day(number, root),
    }
    folder.mkdir(parents=True)
    (folder / "README.md").write_text(README.format(**fields), encoding="utf-8")
    (folder / script).write_text(SCRIPT.format(**fields), encoding="utf-8")
    (folder / "page.md").write_text(PAGE.format(**fields), encoding="utf-8")
    (folder / NUMBERS_FILE).write_text(NUMBERS.format(**fields), encoding="utf-8")
    shutil.copy(LESSONS_DIR / "06-prefix-caching" / "Makefile", folder)  # `make check` works there too
    return folder
