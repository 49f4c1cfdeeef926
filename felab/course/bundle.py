"""The course bundle: the lesson pages as an offline site, built with MkDocs and Material.

`make bundle` runs `build()`. It assembles the page sources into a staging
folder, fills "your numbers" from what the scripts recorded in `results/`,
then runs MkDocs with warnings as errors (a broken link or a missing include
stops the build):

    lessons/NN-slug/page.md  ->  build/bundle-src/lessons/NN-slug.md
    course/index.md          ->  build/bundle-src/index.md
    course/days/day-NN.md    ->  build/bundle-src/days/day-NN.md    (a day's wrap-up)
    course/assets/*          ->  build/bundle-src/assets/
                                 build/bundle/                      (the site, git-ignored)

A page source is Markdown with front matter (`title`, `day`, and for a lesson
`minutes` and `cost`). Lines that are exactly one of these markers are
replaced while assembling:

    <!-- felab:video -->        the lesson's video: chapters and a link, set in course/course.yml
    <!-- felab:readme -->       the lesson's README.md, its headings one level down
    <!-- felab:numbers -->      the "your numbers" form, each field filled from results/ where it can be
    <!-- felab:code -->         every script of the lesson, included at build time with line numbers
    <!-- felab:lessons -->      (index) the pages in course order
    <!-- felab:all-numbers -->  (wrap-up) every lesson's numbers, with a CSV to download or copy

Code listings are not copied here: each becomes a `pymdownx.snippets` line that
MkDocs resolves against the lesson's real file, so the page always shows what
the learner runs.

`NUMBERS` in felab/course/numbers.py is the one table that says which recorded value fills which field.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import html
import http.server
import io
import json
import logging
import os
import re
import shutil
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from felab.course.lessons import discover
from felab.course.numbers import NUMBERS, prefills
from felab.errors import FelabError
from felab.paths import KIT_ROOT, from_here

STAGING = Path("build") / "bundle-src"
SITE = Path("build") / "bundle"
SERVE_PORT = 8770
"""`make bundle-serve`'s port, always the same: the browser keeps typed numbers per address."""

STORAGE_PREFIX = "felab:numbers:"
"""localStorage key of a typed value: `felab:numbers:<lesson folder>:<field key>` (assets/numbers.js)."""

# ── Pieces of pages ───────────────────────────────────────────────────────────

MARKER = re.compile(r"^<!-- felab:([a-z-]+) -->\s*$", re.MULTILINE)
LANGUAGES = {".py": ("python", "Python"), ".sh": ("bash", "Bash")}


def _inline(text: str) -> str:
    """Escape `text` for HTML and turn `backticks` into <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _json_for_script(data: Any) -> str:
    """JSON safe inside <script type="application/json">."""
    return json.dumps(data, ensure_ascii=False).replace("</", "<\\/")


NOTHING_YET = "Nothing recorded for this yet: run the command, then type it."


def measured_note(m: dict[str, Any]) -> str:
    """Where a prefilled number came from, and whether it is a cold run's (as numbers.js says it)."""
    model = f" ({m['model']})" if m.get("model") else ""
    note = f" {m['note']}" if m.get("note") else ""
    return f"Filled from your run: measured {m['when']} on {m['target']}{model}, in {m['file']}.{note}"


def numbers_form(lesson: str) -> str:
    """The labelled inputs for `lesson`, each with its hint and, where results/ has it, its prefill.

    Works without JavaScript (the prefill is the input's value); assets/numbers.js keeps what
    the learner types in the browser's local storage, and typed values win over prefills.
    """
    fields = NUMBERS.get(lesson)
    if not fields:
        raise FelabError(
            f"lesson {lesson} has a numbers marker but no fields in NUMBERS (felab/course/numbers.py)."
        )
    found = prefills(lesson)
    parts = [f'<form class="felab-numbers" data-lesson="{lesson}" autocomplete="off">']
    for n, f in enumerate(fields, start=1):
        ident = f"n-{lesson}-{f.key}"
        m = found[f.key]
        value = f' value="{html.escape(m["value"])}"' if m else ""
        data = f" data-prefill='{html.escape(_json_for_script(m))}'" if m else ""
        status = html.escape(measured_note(m)) if m else NOTHING_YET
        parts += [
            '<div class="felab-field">',
            f'<label for="{ident}">{n}. {html.escape(f.label)}</label>',
            f'<input type="text" id="{ident}" name="{f.key}" data-field="{f.key}"{value}{data}'
            f' aria-describedby="{ident}-hint {ident}-status" spellcheck="false">',
            f'<p class="felab-hint" id="{ident}-hint">Hint: {_inline(f.hint)}</p>',
            f'<p class="felab-status" id="{ident}-status" aria-live="polite">{status}</p>',
            "</div>",
        ]
    parts.append("</form>")
    return "\n".join(parts)


def all_numbers(titles: dict[str, str]) -> str:
    """The wrap-up's table of every lesson's numbers and its CSV (prefills; numbers.js adds typed values)."""
    items: list[dict[str, Any]] = []
    for lesson, fields in NUMBERS.items():
        found = prefills(lesson)
        for f in fields:
            items.append(
                {
                    "lesson": lesson,
                    "title": titles.get(lesson, lesson),
                    "field": f.key,
                    "label": f.label,
                    "measured": found[f.key],
                }
            )
    rows = []
    for it in items:
        m = it["measured"]
        value = html.escape(m["value"]) if m else ""
        source = f"measured {m['when']} on {m['target']}" if m else "not recorded yet"
        if m and m.get("warm"):
            source += " (a warm start: not a cold figure)"
        rows.append(
            f'<tr data-lesson="{it["lesson"]}" data-field="{it["field"]}"><td>{html.escape(it["title"])}</td>'
            f'<td>{html.escape(it["label"])}</td><td class="felab-value">{value}</td>'
            f'<td class="felab-source">{html.escape(source)}</td></tr>'
        )
    csv_text = html.escape(csv_of(items))
    return "\n".join(
        [
            f'<script type="application/json" id="felab-all-numbers">{_json_for_script(items)}</script>',
            '<div class="felab-all-numbers">',
            "<table><caption>Your numbers, every lesson</caption>",
            '<thead><tr><th scope="col">Lesson</th><th scope="col">Number</th>'
            '<th scope="col">Value</th><th scope="col">Where it came from</th></tr></thead>',
            "<tbody>",
            *rows,
            "</tbody></table>",
            '<label for="felab-csv">The same as CSV</label>',
            f'<textarea id="felab-csv" rows="8" readonly spellcheck="false">{csv_text}</textarea>',
            '<p class="felab-csv-actions">',
            '<a class="md-button" id="felab-csv-download" download="felab-numbers.csv" '
            f'href="data:text/csv;charset=utf-8,{_data_url(csv_of(items))}">Download CSV</a> ',
            '<button type="button" class="md-button" id="felab-csv-copy" hidden>Copy CSV</button> ',
            '<span id="felab-csv-said" role="status"></span>',
            "</p>",
            "</div>",
        ]
    )


def _data_url(text: str) -> str:
    return quote(text, safe="")


def csv_of(items: list[dict[str, Any]]) -> str:
    """One line per number: lesson, field, label, value, source, measured_at, target (as numbers.js)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["lesson", "field", "label", "value", "source", "measured_at", "target"])
    for it in items:
        m = it["measured"]
        writer.writerow(
            [
                it["lesson"],
                it["field"],
                it["label"],
                m["value"] if m else "",
                "measured" if m else "",
                m["when"] if m else "",
                m["target"] if m else "",
            ]
        )
    return out.getvalue()


def video_block(lesson: str, course: dict[str, Any]) -> str:
    """The lesson's video as Markdown: what it covers, its chapters, and a link if one is set.

    We never ship a stand-in video: with no URL set, the page says so.
    """
    video = (course.get("videos") or {}).get(lesson)
    if not video:
        raise FelabError(f"lesson {lesson} has a video marker but course/course.yml has no videos.{lesson}.")
    lines = [f"**{video['title']}** · video, {video['length']}", ""]
    if video.get("summary"):
        lines += [f"In this video: {video['summary']}", ""]
    url = (video.get("url") or "").strip()
    if url:
        lines += [f"[Watch the video]({url}){{ .md-button }}", ""]
        if video.get("download"):
            lines += [f"[Download the video]({video['download']})", ""]
    else:
        lines += [
            '!!! info "The video is not in this copy of the kit"',
            "    Its link appears here once the course sets it (`videos` in `course/course.yml`). "
            "Everything below stands on its own without it.",
            "",
        ]
    lines += ["Chapters:", ""]
    lines += [f"{i}. {chapter}" for i, chapter in enumerate(video.get("chapters") or [], start=1)]
    return "\n".join(lines) + "\n"


def readme_block(folder: Path) -> str:
    """The lesson's README without its title, every heading one level down, code blocks untouched."""
    readme = folder / "README.md"
    if not readme.is_file():
        raise FelabError(f"the page of {folder.name} includes its README, but {readme} does not exist.")
    out: list[str] = []
    fence: str | None = None
    for line in readme.read_text(encoding="utf-8").splitlines():
        opening = re.match(r"^\s*(`{3,}|~{3,})", line)
        if opening and (fence is None or opening.group(1).startswith(fence)):
            fence = None if fence else opening.group(1)
        elif fence is None and line.startswith("# ") and not out:
            continue  # the README's own title: the page already has one
        elif fence is None and re.match(r"^#{1,5} ", line):
            line = "#" + line
        out.append(line)
    return "\n".join(out).strip() + "\n"


def code_block(folder: Path) -> str:
    """Every script of the lesson, each a snippets include that MkDocs resolves with line numbers.

    The scripts a learner runs come first, by name; shared helpers (`_name.sh`) after them.
    """
    parts = []
    scripts = (p for p in folder.iterdir() if p.suffix in LANGUAGES and p.is_file())
    for script in sorted(scripts, key=lambda p: (p.name.startswith("_"), p.name)):
        lang, name = LANGUAGES[script.suffix]
        count = len(script.read_text(encoding="utf-8").splitlines())
        where = f"lessons/{folder.name}/{script.name}"
        parts += [
            f"### {script.name}",
            "",
            f"{name} · {count} lines · `{where}`",
            "",
            f'```` {{ .{lang} linenums="1" title="{script.name}" }}',
            f'--8<-- "{where}"',
            "````",
            "",
        ]
    if not parts:
        raise FelabError(f"the page of {folder.name} lists its code, but the folder has no .py or .sh files.")
    return "\n".join(parts)


# ── Assembling and building ───────────────────────────────────────────────────


@dataclass
class Page:
    source: Path
    dest: str
    """Path inside the staging folder, for example `lessons/06-prefix-caching.md`."""
    meta: dict[str, Any]
    body: str
    lesson: str | None = None
    kind: str = "lesson"
    markers: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return str(self.meta.get("title") or self.dest)


def read_page(path: Path, dest: str, *, lesson: str | None = None, kind: str = "lesson") -> Page:
    """A page source: YAML front matter between `---` lines, then Markdown."""
    import yaml

    text = path.read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n", text, re.DOTALL)
    if not match:
        raise FelabError(f"{path} needs front matter (a `---` block with at least `title` and `day`).")
    meta = yaml.safe_load(match.group(1)) or {}
    for need in ("title",) if kind == "index" else ("title", "day"):
        if need not in meta:
            raise FelabError(f"{path}: its front matter has no `{need}`.")
    return Page(path, dest, meta, text, lesson, kind, MARKER.findall(text))


def collect_pages(root: Path) -> list[Page]:
    """Every page source under `root`, in course order: by day, lessons by number, then the day's wrap-up."""
    pages = [
        read_page(lesson.path / "page.md", f"lessons/{lesson.name}.md", lesson=lesson.name)
        for lesson in discover(root / "lessons")
        if (lesson.path / "page.md").is_file()
    ]
    days = root / "course" / "days"
    pages += [read_page(p, f"days/{p.name}", kind="wrap-up") for p in sorted(days.glob("*.md"))]
    return sorted(pages, key=lambda p: (int(p.meta["day"]), p.kind == "wrap-up", p.dest))


def _index_list(pages: list[Page]) -> str:
    lines, day = [], None
    for p in pages:
        if p.meta["day"] != day:
            day = p.meta["day"]
            lines += ["", f"### Day {day}", ""]
        what = f"lesson {p.lesson[:2]} · " if p.lesson else ""
        extra = " · ".join(
            x for x in (f"{p.meta['minutes']} min" if p.meta.get("minutes") else "", p.meta.get("cost")) if x
        )
        lines.append(f"- {what}[{p.title}]({p.dest})" + (f" ({extra})" if extra else ""))
    return "\n".join(lines).strip() + "\n"


def _nav(pages: list[Page]) -> list[Any]:
    nav: list[Any] = [{"Start here": "index.md"}]
    for p in pages:
        label = f"Day {p.meta['day']}"
        if not nav or not isinstance(nav[-1], dict) or label not in nav[-1]:
            nav.append({label: []})
        nav[-1][label].append({p.title: p.dest})
    return nav


def assemble(root: Path = KIT_ROOT, staging: Path | None = None) -> tuple[Path, list[Any]]:
    """Write the page sources, filled in, to the staging folder; return it and the navigation."""
    import yaml

    staging = staging or root / STAGING
    course_dir = root / "course"
    course = yaml.safe_load((course_dir / "course.yml").read_text(encoding="utf-8")) or {}
    pages = collect_pages(root)
    titles = {p.lesson: f"{p.lesson[:2]} · {p.title}" for p in pages if p.lesson}
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "lessons").mkdir(parents=True)
    (staging / "days").mkdir()
    shutil.copytree(course_dir / "assets", staging / "assets")

    def fill(page: Page) -> str:
        folder = root / "lessons" / page.lesson if page.lesson else None

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name == "lessons":
                return _index_list(pages)
            if name == "all-numbers":
                return all_numbers(titles)
            if folder is None:
                raise FelabError(f"{page.source}: the marker felab:{name} belongs on a lesson page.")
            makers = {
                "video": lambda: video_block(page.lesson or "", course),
                "readme": lambda: readme_block(folder),
                "numbers": lambda: numbers_form(page.lesson or ""),
                "code": lambda: code_block(folder),
            }
            if name not in makers:
                raise FelabError(f"{page.source}: unknown marker felab:{name} (see felab/course/bundle.py).")
            return makers[name]()

        return MARKER.sub(one, page.body)

    for page in pages:
        (staging / page.dest).write_text(fill(page), encoding="utf-8")
    index = read_page(course_dir / "index.md", "index.md", kind="index")
    (staging / "index.md").write_text(fill(index), encoding="utf-8")
    nav = _nav(pages)
    for extra in course.get("kit_pages") or []:
        source = root / extra["source"]
        if not source.is_file():
            raise FelabError(f"course/course.yml lists {extra['source']} in kit_pages; it does not exist.")
        text = as_plain_links(source.read_text(encoding="utf-8"))
        (staging / extra["dest"]).write_text(text, encoding="utf-8")
        nav.append({extra["title"]: extra["dest"]})
    return staging, nav


LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|#)([^)\s]+)\)")


def as_plain_links(markdown: str) -> str:
    """A kit page's relative links, which point outside the bundle, as their text and path."""
    return LINK.sub(lambda m: f"{m.group(1)} (`{m.group(2)}` in the kit)", markdown)


class _Collect(logging.Handler):
    """Keeps MkDocs' warnings so the error can list them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def build(root: Path = KIT_ROOT, site: Path | None = None, staging: Path | None = None) -> Path:
    """Assemble and build the bundle with warnings as errors; return the site folder.

    `site` and `staging` default to `build/bundle/` and `build/bundle-src/` under `root`.
    """
    try:
        from mkdocs.commands.build import build as mkdocs_build
        from mkdocs.config import load_config
        from mkdocs.exceptions import Abort, MkDocsException
    except ImportError as exc:
        raise FelabError(
            f"building the course pages needs MkDocs ({exc.name} is missing): run "
            f"`{from_here('make bundle')}`, which installs the kit's course extra into .venv once."
        ) from None
    staging, nav = assemble(root, staging)
    site = site or root / SITE
    collect = _Collect()
    logger = logging.getLogger("mkdocs")
    logger.addHandler(collect)
    try:
        config = load_config(
            str(root / "mkdocs.yml"), docs_dir=str(staging), site_dir=str(site), nav=nav, strict=True
        )
        mkdocs_build(config)
    except (Abort, MkDocsException, OSError) as exc:
        said = "\n".join(f"  - {m}" for m in collect.messages) or f"  - {exc}"
        raise FelabError(f"the course pages did not build ({exc}):\n{said}") from None
    except Exception as exc:  # a Markdown extension's own error, e.g. a snippet file that is missing
        raise FelabError(f"the course pages did not build: {type(exc).__name__}: {exc}") from None
    finally:
        logger.removeHandler(collect)
    return site


# ── Serving ───────────────────────────────────────────────────────────────────


SERVE_TIMEOUT_S = 10.0
"""A connection must send its whole request within this, and is closed after this long idle."""


class _Site(http.server.SimpleHTTPRequestHandler):
    """The built site's files and nothing else: no folder listings, no symlinks, no odd paths.

    Python's handler lists a folder without an index.html, follows symlinks out of the site,
    and stops with a traceback on a path holding a NUL byte (`/..%00/x`); each is a 404 here.
    A client gets SERVE_TIMEOUT_S for its request line and headers, however slowly it sends
    them (the socket timeout alone is re-armed by every byte).
    """

    timeout = SERVE_TIMEOUT_S  # an idle connection: socket timeout, then closed

    def handle_one_request(self) -> None:
        slow = threading.Timer(self.timeout, self._hang_up)
        slow.start()
        self.slow = slow
        try:
            super().handle_one_request()
        finally:
            slow.cancel()

    def parse_request(self) -> bool:
        self.slow.cancel()  # the head arrived in time
        return super().parse_request()

    def _hang_up(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def send_head(self) -> Any:
        path = self.translate_path(self.path)
        if "\x00" in path:  # os.stat and open() would raise ValueError: a traceback
            self.send_error(404)
            return None
        inside = os.path.relpath(path, self.directory)
        real = os.path.join(os.path.realpath(self.directory), inside)
        if inside.startswith("..") or os.path.realpath(path) != os.path.normpath(real):
            self.send_error(404)  # outside the site, or a symlink anywhere on the way
            return None
        return super().send_head()

    def list_directory(self, path: Any) -> None:
        self.send_error(404)  # a folder without index.html: not listed
        return None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up or was too slow is not an error worth a traceback."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def served(site: Path, port: int = 0) -> Iterator[str]:
    """Serve `site` on 127.0.0.1 (a free port when `port` is 0) in a thread; yield its URL."""
    if not (site / "index.html").is_file():
        raise FelabError(f"there is no built bundle in {site}: run `{from_here('make bundle')}` first.")
    handler = functools.partial(_Site, directory=str(site))
    try:
        server = _Server(("127.0.0.1", port), handler)
    except OSError as exc:
        raise FelabError(
            f"could not serve the bundle on 127.0.0.1:{port} ({exc.strerror}): most often an earlier "
            f"`make bundle-serve` still runs (Ctrl+C in its terminal stops it; or use it, it serves the "
            f"same pages). To serve on another port instead: "
            f"`{from_here('.venv/bin/python')} -m felab bundle serve --port {port + 1}` (numbers you "
            f"typed are kept per address, so they will not show there)."
        ) from None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
