"""`make docs`: the tables in the docs that restate code, written from the code.

A generated table sits between two marker lines in its file, and only what is between them
is rewritten; the prose around it stays the writer's:

    <!-- generated: practice-server-flags (make docs) -->
    ...
    <!-- end generated: practice-server-flags -->

(`# generated: NAME` / `# end generated: NAME` in `.env.example`.) Each block is a function of
the code: the practice server's flags from `Settings` (one description per setting, its
`setting()` declaration), its cost terms from the registry (`felab.mock_server.terms.TERMS`),
the targets table and `.env.example`'s addresses from the engine
registry, the troubleshooting page's index from the messages the code can print.
`python -m felab.docs_gen --check` changes nothing and exits 1 naming each block
that is out of date; `tests/test_docs_gen.py` runs that check, so a stale table fails the tests.

    python -m felab.docs_gen            # or: make docs (rewrites the blocks; a no-op when up to date)
    python -m felab.docs_gen --check    # exit 1 if a block is stale
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from felab.engine_families import ENGINES
from felab.message_scan import raised_messages
from felab.mock_server import terms
from felab.mock_server.config import DEFAULTS, SERVER, Settings, flag, spell, unit_of
from felab.paths import KIT_ROOT


def cell(text: str) -> str:
    """Text for a Markdown table cell: one line, `|` escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def flag_table(twin: bool) -> str:
    """The practice server's settings as flags, a learner's (`twin` False: what `--help` lists)
    or a calibrated twin's (`--help-twin`): default, unit, what it means, and whether replay takes
    it too (a model setting) or only the server (a server setting)."""
    rows = [
        "| flag | default | unit | meaning | replay |",
        "|---|---|---|---|---|",
    ]
    for f in dataclasses.fields(Settings):
        if f.metadata["twin"] != twin:
            continue
        default = spell(f, getattr(DEFAULTS, f.name))
        replay = "no (the server's own)" if f.metadata["scope"] == SERVER else "yes, a list sweeps"
        rows.append(
            f"| `{flag(f)}` | `{default}` | {unit_of(f) or ''} | {cell(f.metadata['help'])} | {replay} |"
        )
    return "\n".join(rows)


def practice_server_flags() -> str:
    """The flags a learner types (`python -m felab.mock_server --help`)."""
    return flag_table(twin=False)


def twin_flags() -> str:
    """The flags of a calibrated twin (`python -m felab.mock_server --help-twin`)."""
    return flag_table(twin=True)


def cost_terms() -> str:
    """The twin's cost terms, one row each, from the registry (`felab/mock_server/terms/`): the
    settings it reads, its part of a step's time (`Term.formula`), the calibrate probe that
    exposes it and what it means. Read at call time, so a term added to `TERMS` is a new row."""
    rows = [
        "| term | settings | its part of a step's time | probe | meaning |",
        "|---|---|---|---|---|",
    ]
    for term in terms.TERMS:
        settings = ", ".join(f"`{name}`" for name in term.settings)
        part = f"`{cell(term.formula)}`"
        rows.append(f"| {term.name} | {settings} | {part} | {cell(term.probe)} | {cell(term.meaning)} |")
    return "\n".join(rows)


def targets_table() -> str:
    """Every `--target`, from the engine registry: its address, model and how to start it."""
    rows = ["| target | default URL | model | start it with |", "|---|---|---|---|"]
    for name, engine in ENGINES.items():
        model = "asked from the server" if engine.model is None else f"`{engine.model}`"
        if engine.start is not None:
            start = f"`{cell(engine.start)}`"
        else:
            start = f"nothing: needs `{engine.key_env}`" + (" (paid)" if engine.paid else "")
        rows.append(f"| `{name}` | `{engine.url}` | {model} | {start} |")
    return "\n".join(rows)


def env_addresses() -> str:
    """`.env.example`'s FELAB_<TARGET>_URL and FELAB_<TARGET>_MODEL lines, with their defaults."""
    lines = []
    for name, engine in ENGINES.items():
        lines.append(f"# FELAB_{name.upper()}_URL={engine.url}")
        lines.append(f"# FELAB_{name.upper()}_MODEL={engine.model or ''}")
    return "\n".join(lines)


def troubleshooting_index(root: Path = KIT_ROOT) -> str:
    """The troubleshooting page's index: each section, and the files whose messages it holds (from
    the scan of every message the code can print, felab/message_scan.py). A message the page lacks
    is not indexed here: tests/test_troubleshooting.py fails on it."""
    page = (root / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    titles = re.findall(r"^## (.+)$", page, re.M)
    flat = " ".join(page.split())
    starts = [(flat.find(f"## {title}"), title) for title in titles]
    files: dict[str, set[str]] = {title: set() for title in titles}
    for where, text in raised_messages(root / "felab"):
        at = flat.find(" ".join(text.split()), flat.find("## "))
        before = [title for start, title in starts if 0 <= start <= at]
        if at >= 0 and before:
            files[before[-1]].add(where.split(":")[0])
    rows = ["| section | messages raised in |", "|---|---|"]
    for title in titles:
        shown = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", title)  # a link inside a heading: its text
        named = ", ".join(f"`{f}`" for f in sorted(files[title])) or "none of felab's own"
        rows.append(f"| {cell(shown)} | {named} |")  # no link: the bundle rewrites some headings' anchors
    return "\n".join(rows)


@dataclass(frozen=True)
class Block:
    """One generated block: the file (from the kit root), its name, the comment style, the writer."""

    path: str
    name: str
    write: Callable[[], str]
    comment: str = "html"

    def markers(self) -> tuple[str, str]:
        if self.comment == "hash":
            return f"# generated: {self.name} (make docs)", f"# end generated: {self.name}"
        return f"<!-- generated: {self.name} (make docs) -->", f"<!-- end generated: {self.name} -->"


BLOCKS = (
    Block("docs/practice-server.md", "practice-server-flags", practice_server_flags),
    Block("docs/practice-server.md", "twin-flags", twin_flags),
    Block("docs/practice-server.md", "cost-terms", cost_terms),
    Block("README.md", "targets", targets_table),
    Block(".env.example", "target-addresses", env_addresses, comment="hash"),
    Block("docs/troubleshooting.md", "index", troubleshooting_index),
)


class MissingMarkers(Exception):
    """A file lacks a block's marker lines (a writer removed them): nothing is rewritten."""


def render(text: str, block: Block) -> str:
    """`text` with the block's content written fresh between its markers."""
    start, end = block.markers()
    pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise MissingMarkers(f"{block.path}: no `{start}` ... `{end}` lines")
    return pattern.sub(lambda _: f"{start}\n{block.write()}\n{end}", text, count=1)


def stale(root: Path = KIT_ROOT) -> list[str]:
    """The blocks whose file does not hold what the code writes now, as `path: name`."""
    out = []
    for block in BLOCKS:
        text = (root / block.path).read_text(encoding="utf-8")
        if render(text, block) != text:
            out.append(f"{block.path}: {block.name}")
    return out


def update(root: Path = KIT_ROOT) -> list[str]:
    """Rewrite every stale block; the ones rewritten."""
    changed = []
    for block in BLOCKS:
        path = root / block.path
        text = path.read_text(encoding="utf-8")
        new = render(text, block)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(f"{block.path}: {block.name}")
    return changed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if "--check" in args:
            out_of_date = stale()
            for name in out_of_date:
                print(f"out of date: {name} (run `make docs`)")
            return 1 if out_of_date else 0
        for name in update():
            print(f"rewrote {name}")
    except MissingMarkers as exc:
        print(f"docs_gen: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
