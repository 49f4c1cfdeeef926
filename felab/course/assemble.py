"""Assembling the course pages: page sources, their markers filled in, into a staging folder.

    lessons/NN-slug/page.md  ->  <staging>/lessons/NN-slug.md
    course/index.md          ->  <staging>/index.md
    course/days/day-NN.md    ->  <staging>/days/day-NN.md    (a day's wrap-up)
    course/assets/*          ->  <staging>/assets/

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
MkDocs resolves against the lesson's real file (render.py), so the page always
shows what the learner runs. A lesson's numbers are declared in its folder
(`numbers.toml`, read by numbers.py); forms.py writes them as HTML.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from felab.course.forms import all_numbers, numbers_form
from felab.course.lessons import discover
from felab.course.numbers import Field, declared
from felab.errors import FelabError

MARKER = re.compile(r"^<!-- felab:([a-z-]+) -->\s*$", re.MULTILINE)
LANGUAGES = {".py": ("python", "Python"), ".sh": ("bash", "Bash")}

# ── What a lesson's markers become ───────────────────────────────────────────


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


# ── Pages, in course order ───────────────────────────────────────────────────


@dataclass
class Page:
    source: Path
    dest: str
    """Path inside the staging folder, for example `lessons/06-prefix-caching.md`."""
    meta: dict[str, Any]
    body: str
    lesson: str | None = None
    kind: str = "lesson"

    @property
    def title(self) -> str:
        return str(self.meta.get("title") or self.dest)


def read_page(path: Path, dest: str, *, lesson: str | None = None, kind: str = "lesson") -> Page:
    """A page source: YAML front matter between `---` lines, then Markdown."""
    text = path.read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n", text, re.DOTALL)
    if not match:
        raise FelabError(f"{path} needs front matter (a `---` block with at least `title` and `day`).")
    meta = yaml.safe_load(match.group(1)) or {}
    for need in ("title",) if kind == "index" else ("title", "day"):
        if need not in meta:
            raise FelabError(f"{path}: its front matter has no `{need}`.")
    return Page(path, dest, meta, text, lesson, kind)


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


def fill(
    page: Page, root: Path, pages: list[Page], numbers: dict[str, list[Field]], course: dict[str, Any]
) -> str:
    """A page's source with each felab: marker replaced by what it stands for (the lesson list,
    the numbers, a lesson's README, video, form or code)."""
    titles = {p.lesson: f"{p.lesson[:2]} · {p.title}" for p in pages if p.lesson}
    folder = root / "lessons" / page.lesson if page.lesson else None

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "lessons":
            return _index_list(pages)
        if name == "all-numbers":
            return all_numbers(numbers, titles)
        if folder is None:
            raise FelabError(f"{page.source}: the marker felab:{name} belongs on a lesson page.")
        makers = {
            "video": lambda: video_block(page.lesson or "", course),
            "readme": lambda: readme_block(folder),
            "numbers": lambda: numbers_form(page.lesson or "", numbers.get(page.lesson or "", [])),
            "code": lambda: code_block(folder),
        }
        if name not in makers:
            raise FelabError(f"{page.source}: unknown marker felab:{name} (see felab/course/assemble.py).")
        return makers[name]()

    return MARKER.sub(one, page.body)


def assemble(root: Path, staging: Path) -> list[Any]:
    """Write the kit's page sources under `root`, filled in, to `staging` (emptied first);
    return the navigation, in course order."""
    course_dir = root / "course"
    numbers = declared(root / "lessons")
    course = yaml.safe_load((course_dir / "course.yml").read_text(encoding="utf-8")) or {}
    pages = collect_pages(root)
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "lessons").mkdir(parents=True)
    (staging / "days").mkdir()
    shutil.copytree(course_dir / "assets", staging / "assets")

    for page in pages:
        (staging / page.dest).write_text(fill(page, root, pages, numbers, course), encoding="utf-8")
    index = read_page(course_dir / "index.md", "index.md", kind="index")
    (staging / "index.md").write_text(fill(index, root, pages, numbers, course), encoding="utf-8")
    nav = _nav(pages)
    for extra in course.get("kit_pages") or []:
        source = root / extra["source"]
        if not source.is_file():
            raise FelabError(f"course/course.yml lists {extra['source']} in kit_pages; it does not exist.")
        text = as_plain_links(source.read_text(encoding="utf-8"))
        (staging / extra["dest"]).write_text(text, encoding="utf-8")
        nav.append({extra["title"]: extra["dest"]})
    return nav


LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|#)([^)\s]+)\)")


def as_plain_links(markdown: str) -> str:
    """A kit page's relative links, which point outside the bundle, as their text and path."""
    return LINK.sub(lambda m: f"{m.group(1)} (`{m.group(2)}` in the kit)", markdown)
