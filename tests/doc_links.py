"""Check the links the docs make: every relative link names a file that exists, and every
`#anchor` into a Markdown page names one of its headings, as GitHub spells them; a pointer
written as text, `docs/page.md` ("Heading"), names a heading of that page too.

Links inside fenced code are not links. Links with a scheme (https:, mailto:) are left to
the reader: the kit checks nothing off this machine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from felab.paths import KIT_ROOT

FENCED = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
POINTER = re.compile(r"`(docs/[\w/.-]+\.md)` \(\"([^\"]+)\"\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)


def linked_pages(root: Path = KIT_ROOT) -> list[Path]:
    """README.md, the lesson READMEs, the lab book and every page under docs/."""
    return [
        root / "README.md",
        *sorted(root.glob("lessons/*/README.md")),
        *sorted(root.glob("03-labs/*.md")),
        *sorted(root.glob("docs/**/*.md")),
    ]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces to dashes
    (`The report card (`--check`)` is `the-report-card---check`)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    found: set[str] = set()
    for heading in HEADING.findall(FENCED.sub("", page.read_text(encoding="utf-8"))):
        name, n = slug(heading), 0
        while (f"{name}-{n}" if n else name) in found:
            n += 1
        found.add(f"{name}-{n}" if n else name)
    return found


def broken(page: Path, root: Path = KIT_ROOT) -> Iterator[str]:
    """Each link or pointer on `page` that leads nowhere, in a line naming it."""
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    where = page.relative_to(root)
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            yield f"{where}: ({target}): no file {path}"
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            yield f"{where}: ({target}): {path or where.name} has no heading #{anchor}"
    for path, heading in POINTER.findall(text):
        linked = root / path
        if not linked.exists():
            yield f'{where}: `{path}` ("{heading}"): no file {path}'
        elif slug(heading) not in anchors(linked):
            yield f'{where}: `{path}` ("{heading}"): {path} has no heading "{heading}"'
