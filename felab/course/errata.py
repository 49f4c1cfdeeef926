"""`make course-errata`: where a course page (the instructor's text) and the kit now differ.

The course pages live outside the kit (the course's `shared/seeds/`, the instructor's to
change); the kit moves on under them. This reads a page as it is published (plain text, code
listings with their line numbers) and lists, for the instructor, each place where typing the
page into the kit would no longer give what it says, worked out from the page and the kit's
own files, never from a list kept by hand:

    code listings   a listing (`prefix_bench.py Python · 88 lines`, then each line after its
                    number) against the kit's file of that name: the lines that differ
    file names      a file the page names (`serve_llamacpp.sh`, `results/06-prefix.jsonl`)
                    that is nowhere in the kit
    commands        a `make` target the Makefile does not have; a flag a lesson script does not
                    take; a command the kit no longer advises (`pkill -f ...`: it stops every
                    process of that name, other servers and the tests' too)
    missing steps   commands the kit's lab book page for the lesson gives that the page does not
                    (Day 5's twin step: calibrate, check, serve, compare)

    python -m felab.course.errata [PAGE ...]     # default: ../shared/seeds/*.txt beside the kit
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from felab.errors import FelabError, run
from felab.paths import KIT_ROOT

LISTING = re.compile(r"^(?P<name>[\w.-]+\.\w+) (?P<lang>[\w+]+) · (?P<count>\d+) lines$")
"""The head of a code listing on a published page: `prefix_bench.py Python · 88 lines`."""

FILE_NAME = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[\w-]+\.(?:py|sh|toml|jsonl|md|png))\b")
"""A file a page names in its text (`prefix_bench.py`, `results/06-prefix-ttft.png`)."""

NOT_ADVISED = {
    "pkill -f": (
        "stops every process whose command line holds the name: another learner's server, the "
        "tests' servers, an editor. The kit says Ctrl+C in the server's terminal, or `kill PID` "
        "with the process id its own message names (docs/troubleshooting.md)"
    ),
}
"""Commands a page may still show that the kit replaced, and why."""


@dataclass(frozen=True)
class Erratum:
    """One place where the page and the kit differ: what the page says, and what the kit has."""

    kind: str
    page: str
    kit: str


def lesson_folder(text: str, kit: Path) -> Path | None:
    """The kit's folder of the lesson a page teaches (`lesson 06 · lessons/06-prefix-caching`)."""
    found = re.search(r"\blessons/(\d\d-[\w-]+)", text)
    return kit / "lessons" / found.group(1) if found and (kit / "lessons" / found.group(1)).is_dir() else None


def listings(text: str) -> dict[str, list[str]]:
    """Each code listing of the page by file name: its lines, without the numbers between them."""
    lines = text.splitlines()
    found: dict[str, list[str]] = {}
    for i, line in enumerate(lines):
        head = LISTING.match(line.strip())
        if not head:
            continue
        code: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        expected = 1
        while j < len(lines) and lines[j].strip() == str(expected) and len(code) < int(head["count"]):
            code.append(lines[j + 1] if j + 1 < len(lines) else "")
            j += 2
            expected += 1
        found[head["name"]] = code
    return found


def listing_errata(text: str, folder: Path) -> list[Erratum]:
    """A listing whose lines are not the kit's file's, line by line."""
    errata = []
    for name, code in listings(text).items():
        path = folder / name
        if not path.is_file():
            errata.append(
                Erratum("code listing", f"{name} ({len(code)} lines)", "no such file in the lesson's folder")
            )
            continue
        kit_lines = path.read_text(encoding="utf-8").splitlines()
        differ = [
            n
            for n, (a, b) in enumerate(zip(code, kit_lines, strict=False), start=1)
            if a.rstrip() != b.rstrip()
        ]
        if differ or len(code) != len(kit_lines):
            first = differ[0] if differ else min(len(code), len(kit_lines)) + 1
            errata.append(
                Erratum(
                    "code listing",
                    f"{name}: {len(code)} lines",
                    f"{path.relative_to(folder.parent.parent)}: {len(kit_lines)} lines, {len(differ)} of the "
                    f"first {min(len(code), len(kit_lines))} differ (the first at line {first}): list the "
                    f"kit's file again",
                )
            )
    return errata


def file_errata(text: str, kit: Path, folder: Path | None) -> list[Erratum]:
    """File names the page gives that are nowhere in the kit (the lesson's folder, its root, any
    lesson, 03-labs/, or results/ and data/ for what a run writes)."""
    prose = text.split("\nCode in this step", 1)[0]
    places = [p for p in (folder, kit, kit / "03-labs", *sorted((kit / "lessons").glob("*"))) if p]
    written = ("results/", "data/", "build/")  # a run or a build writes these: named, not shipped
    missing = []
    for name in dict.fromkeys(FILE_NAME.findall(prose)):
        if name.startswith(written) or any((p / name).exists() for p in places):
            continue
        if any(found for d in shipped(kit) for found in d.rglob(Path(name).name)):  # elsewhere than said
            continue
        missing.append(Erratum("file name", name, now_where(name, kit)))
    return missing


def now_where(name: str, kit: Path) -> str:
    """What the kit has in place of a file it lacks: a package of that name (`felab/mock_server.py`
    became `felab/mock_server/`), or nothing."""
    stem = Path(name).with_suffix("")
    found = (p for d in shipped(kit) for p in d.rglob(stem.name))
    packages = sorted(p for p in found if p.is_dir() and (p / "__init__.py").is_file())
    if packages:
        return f"no file of that name in the kit: it is now a package, {packages[0].relative_to(kit)}/"
    return "no file of that name in the kit"


def shipped(kit: Path) -> list[Path]:
    """The kit's own folders, searched for a file a page names (not .venv, results/ or build/)."""
    return [kit / d for d in ("felab", "lessons", "data", "docs", "course", "scripts") if (kit / d).is_dir()]


def make_targets(kit: Path) -> set[str]:
    """The targets the kit's Makefile declares."""
    text = (kit / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([a-zA-Z0-9_-]+):", text, re.M))


def script_flags(script: Path) -> set[str]:
    """The flags a lesson script takes: its own `add_argument("--x")`, and the kit's target flags."""
    text = script.read_text(encoding="utf-8")
    own = set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", text))
    return own | {"--target", "--base-url", "--model", "--help"}


def command_errata(text: str, kit: Path, folder: Path | None) -> list[Erratum]:
    """Commands on the page the kit no longer has, or no longer advises."""
    errata = []
    targets = make_targets(kit)
    for target in dict.fromkeys(re.findall(r"\bmake ([a-z][a-z-]*)\b", text)):
        if target not in targets:
            errata.append(Erratum("command", f"make {target}", "the kit's Makefile has no such target"))
    for command, why in NOT_ADVISED.items():
        for shown in dict.fromkeys(re.findall(rf"{re.escape(command)} [\w./-]+", text)):
            errata.append(Erratum("command", shown.strip(), f"no longer advised: it {why}"))
    for script, flags in re.findall(r"\bpython ([\w/.-]+\.py)((?: --?[\w-]+(?: [^\s-][^\s]*)?)*)", text):
        path = next((p / script for p in (folder, kit) if p and (p / script).is_file()), None)
        if path is None:
            continue  # a missing script is a file name's erratum
        unknown = sorted(set(re.findall(r"--[\w-]+", flags)) - script_flags(path))
        if unknown:
            errata.append(
                Erratum(
                    "command",
                    f"python {script} ... {' '.join(unknown)}",
                    f"{script} takes no {', '.join(unknown)}",
                )
            )
    return errata


def lab_book_commands(kit: Path, lesson: str) -> list[str]:
    """The commands of the lab book page that teaches `lesson` (its fenced blocks), in order: the
    day whose opening lines say `Lesson 06` (another day may run the lesson's script too)."""
    for page in sorted((kit / "03-labs").glob("day-*.md")):
        text = page.read_text(encoding="utf-8")
        if f"Lesson {lesson[:2]}" in "\n".join(text.splitlines()[:4]):
            blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
            lines = [
                re.split(r"\s+#", line, maxsplit=1)[0].strip() for b in blocks for line in b.splitlines()
            ]
            return [line for line in lines if line]
    return []


def missing_steps(text: str, kit: Path, folder: Path | None) -> list[Erratum]:
    """The lab book's twin step (calibrate, check, serve, compare), where the page lacks it."""
    if folder is None:
        return []
    flat = " ".join(text.split())
    twin = [c for c in lab_book_commands(kit, folder.name) if "calibrate" in c or "PROFILE=" in c]
    absent = [c for c in twin if c not in flat]
    if not absent:
        return []
    return [
        Erratum(
            "missing step",
            "no twin step (calibrate, check, serve, compare)",
            "the kit's lab book gives: " + "; ".join(f"`{c}`" for c in absent),
        )
    ]


def errata(page: Path, kit: Path = KIT_ROOT) -> list[Erratum]:
    """Every place where `page` and the kit differ (see the module's docstring)."""
    text = page.read_text(encoding="utf-8")
    folder = lesson_folder(text, kit)
    found = listing_errata(text, folder) if folder else []
    return (
        found
        + file_errata(text, kit, folder)
        + command_errata(text, kit, folder)
        + missing_steps(text, kit, folder)
    )


def report(pages: list[Path], kit: Path = KIT_ROOT) -> str:
    """The errata of each page, for the instructor: a heading per page, a line per difference."""
    parts = []
    for page in pages:
        found = errata(page, kit)
        parts.append(f"{page.name}: {len(found)} difference{'s' if len(found) != 1 else ''} from the kit")
        parts += [f"  - {e.kind}: the page has {e.page}; {e.kit}" for e in found]
        parts.append("")
    return "\n".join(parts)


def default_pages(kit: Path = KIT_ROOT) -> list[Path]:
    """The course pages beside the kit: `shared/seeds/*.txt` next to it (or one folder further up)."""
    for seeds in (kit.parent / "shared" / "seeds", kit.parent.parent / "shared" / "seeds"):
        if seeds.is_dir():
            return sorted(seeds.glob("*.txt"))
    return []


def main() -> None:
    pages = [Path(a) for a in sys.argv[1:]] or default_pages()
    if not pages:
        raise FelabError(
            "no course page found: the course's shared/seeds/ is not beside the kit. Name the page: "
            "`make course-errata PAGES=path/to/lesson-06-prefix-caching.txt`."
        )
    absent = [str(p) for p in pages if not p.is_file()]
    if absent:
        raise FelabError(f"no course page at {', '.join(absent)}: name a page's text file (.txt).")
    print(report(pages), end="")


if __name__ == "__main__":
    run(main)
