"""The course bundle: it builds with warnings as errors, fills numbers from results/, stays offline.

The build runs against a results fixture (tests/bundle_fixtures.py) in a temporary folder,
never against the learner's own results/ or build/.
"""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from bundle_fixtures import LESSON06_SECTIONS, build_with_fixture, write_results

from felab.course import assemble, bundle, numbers
from felab.errors import FelabError
from felab.paths import KIT_ROOT

LESSON06 = KIT_ROOT / "lessons" / "06-prefix-caching"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_with_fixture(tmp_path_factory.mktemp("bundle"))


def page(site: Path, name: str) -> str:
    return (site / name).read_text(encoding="utf-8")


# ── The pages ──


def lesson_pages() -> list[str]:
    """Every lesson with a page source, as its built page, in course order (by day, then number)."""
    return [f"lessons/{p.lesson}.html" for p in assemble.collect_pages(KIT_ROOT) if p.lesson]


def test_every_page_is_built(site: Path) -> None:
    assert "lessons/06-prefix-caching.html" in lesson_pages()
    for name in ("index.html", "days/day-05.html", *lesson_pages()):
        assert (site / name).is_file(), name


def test_all_fixes_is_the_troubleshooting_page_without_links_out_of_the_bundle(site: Path) -> None:
    html = page(site, "all-fixes.html")
    assert "every message the kit prints" in html
    assert 'href="all-fixes.html"' in page(site, "index.html")
    plain = assemble.as_plain_links(
        "See [the engines](engines.md#build), [top](#top) or [docs](https://x.org)."
    )
    assert plain == "See the engines (`engines.md#build` in the kit), [top](#top) or [docs](https://x.org)."


def test_lesson06_has_every_section(site: Path) -> None:
    html = page(site, "lessons/06-prefix-caching.html")
    ids = re.findall(r'<h2 id="([^"]+)"', html)
    assert ids == list(LESSON06_SECTIONS)


def test_index_lists_the_pages_in_course_order(site: Path) -> None:
    html = page(site, "index.html")
    links = re.findall(
        r'href="((?:lessons|days)/[^"#]+\.html)"', html.split('id="course-order"')[1].split("</article>")[0]
    )
    assert links == [*lesson_pages(), "days/day-05.html"]


def test_answers_are_details_closed_until_opened(site: Path) -> None:
    html = page(site, "lessons/06-prefix-caching.html")
    answers = re.findall(r"<details class=\"answer\"( open)?>\s*<summary>([^<]+)</summary>", html)
    assert [title for _, title in answers] == [f"Show the answer to question {n}" for n in (1, 2, 3)]
    assert not any(opened for opened, _ in answers)


def test_video_has_chapters_and_no_stand_in_media(site: Path) -> None:
    html = page(site, "lessons/06-prefix-caching.html")
    assert "<video" not in html and "<iframe" not in html and ".mp4" not in html
    assert "The video is not in this copy of the kit" in html
    assert "How servers reuse the repeated part" in html


# ── Code in this step: the real files, with line numbers ──


def test_code_listings_are_the_lesson_files_with_line_numbers(site: Path) -> None:
    html = page(site, "lessons/06-prefix-caching.html")
    code = html.split('id="code-in-this-step"')[1]
    scripts = sorted(p.name for p in LESSON06.iterdir() if p.suffix in (".py", ".sh"))
    assert "prefix_bench.py" in scripts
    for script in scripts:
        lines = (LESSON06 / script).read_text(encoding="utf-8").splitlines()
        assert f"{len(lines)} lines" in code
        # anchor_linenums gives every line an anchor; the last one is the file's last line
        block = code.split(f'<span class="filename">{script}</span>')[1].split("</table>")[0]
        numbers = re.findall(r'<a href="#__codelineno-\d+-(\d+)"', block)
        assert numbers == [str(n) for n in range(1, len(lines) + 1)], script
    assert "lesson-06-session" in code


def test_a_change_to_a_script_shows_on_the_next_build(tmp_path: Path) -> None:
    root = copy_kit(tmp_path)
    script = root / "lessons" / "06-prefix-caching" / "prefix_bench.py"
    script.write_text(script.read_text(encoding="utf-8") + "# drift-check-7f3a\n", encoding="utf-8")
    site = bundle.build(root)
    assert "drift-check-7f3a" in (site / "lessons" / "06-prefix-caching.html").read_text(encoding="utf-8")


# ── Your numbers ──


def test_numbers_are_prefilled_with_when_and_where(site: Path) -> None:
    html = page(site, "lessons/06-prefix-caching.html")
    assert 'value="2890 / 41"' in html
    assert "the stable-first run of 2026-11-30 04:25 UTC on llamacpp" in html  # which run filled it
    assert 'value="1.0"' in html  # the latest variable-first row with a speed-up
    assert 'value="610 / 180"' in html and 'value="2944 / 3110"' in html
    for label in (
        "llama.cpp, opening first",
        "llama.cpp, time first",
        "Fireworks, opening first",
        "Fireworks: cached tokens / prompt tokens",
    ):
        assert re.search(rf'<label for="n-06-prefix-caching-[a-z-]+">\d\. {re.escape(label)}', html), label


def test_wrap_up_embeds_every_number_and_its_csv(site: Path) -> None:
    html = page(site, "days/day-05.html")
    data = json.loads(
        re.search(
            r'<script type="application/json" id="felab-all-numbers">(.*?)</script>', html, re.DOTALL
        ).group(1)
    )
    assert [d["field"] for d in data] == [f.key for f in numbers.declared()["06-prefix-caching"]]
    assert "2890 / 41,measured,2026-11-30 04:25 UTC,llamacpp" in html


def test_measured_takes_the_latest_complete_matching_row(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FELAB_RESULTS_DIR", str(tmp_path))
    rows = [
        {
            "ts": "2026-11-30T04:00:00+00:00",
            "target": "llamacpp",
            "order": "variable-first",
            "speedup_x": 1.1,
        },
        {"ts": "2026-11-30T04:10:00+00:00", "target": "mock", "order": "variable-first", "speedup_x": 1.0},
        {
            "ts": "2026-11-30T04:20:00+00:00",
            "target": "llamacpp",
            "order": "variable-first",
            "speedup_x": None,
        },
    ]
    (tmp_path / "06-prefix.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = numbers.Source("06-prefix", {"target": "llamacpp", "order": "variable-first"}, ("speedup_x",), 1)
    got = numbers.measured(source)
    assert got is not None
    assert (got["value"], got["when"], got["target"]) == ("1.1", "2026-11-30 04:00 UTC", "llamacpp")
    assert numbers.measured(numbers.Source("06-prefix", {"target": "fireworks"}, ("first_ms",))) is None
    assert numbers.measured(numbers.Source("nothing-here", {}, ("first_ms",))) is None


# ── Offline ──


class _Resources(HTMLParser):
    """Every address the browser would load by itself: scripts, styles, fonts, images, frames."""

    ATTRS = {
        "script": "src",
        "link": "href",
        "img": "src",
        "iframe": "src",
        "source": "src",
        "video": "src",
        "audio": "src",
        "embed": "src",
        "object": "data",
    }

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "link" and not set((values.get("rel") or "").split()) & {
            "stylesheet",
            "preload",
            "modulepreload",
            "icon",
            "preconnect",
            "dns-prefetch",
            "manifest",
        }:
            return
        if tag in self.ATTRS and values.get(self.ATTRS[tag]):
            self.found.append(values[self.ATTRS[tag]] or "")


def test_nothing_is_loaded_from_the_network(site: Path) -> None:
    remote = re.compile(r"^(https?:)?//", re.IGNORECASE)
    for html_file in site.rglob("*.html"):
        parser = _Resources()
        parser.feed(html_file.read_text(encoding="utf-8"))
        assert parser.found, html_file
        assert [u for u in parser.found if remote.match(u)] == [], html_file
    for css in site.rglob("*.css"):
        text = css.read_text(encoding="utf-8")
        assert not re.search(r"(url\(\s*['\"]?|@import\s+['\"])(https?:)?//", text), css


# ── Warnings are errors ──


def copy_kit(tmp_path: Path) -> Path:
    """The parts of the kit the bundle is built from, in a folder of their own."""
    root = tmp_path / "kit"
    root.mkdir()
    shutil.copy(KIT_ROOT / "mkdocs.yml", root)
    shutil.copytree(KIT_ROOT / "course", root / "course")
    shutil.copytree(KIT_ROOT / "docs", root / "docs")
    shutil.copytree(KIT_ROOT / "lessons", root / "lessons", ignore=shutil.ignore_patterns("__pycache__"))
    write_results(tmp_path / "results")
    return root


def test_the_kit_builds_from_a_copy(tmp_path: Path) -> None:
    site = bundle.build(copy_kit(tmp_path))
    assert (site / "lessons" / "06-prefix-caching.html").is_file()


def test_a_missing_include_fails_the_build(tmp_path: Path) -> None:
    root = copy_kit(tmp_path)
    page_md = root / "lessons" / "06-prefix-caching" / "page.md"
    page_md.write_text(page_md.read_text() + '\n```python\n--8<-- "lessons/06-prefix-caching/gone.py"\n```\n')
    with pytest.raises(FelabError, match="gone.py"):
        bundle.build(root)


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    root = copy_kit(tmp_path)
    page_md = root / "lessons" / "06-prefix-caching" / "page.md"
    page_md.write_text(page_md.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    with pytest.raises(FelabError, match="no-such-page.md"):
        bundle.build(root)


def test_a_missing_readme_fails_the_build(tmp_path: Path) -> None:
    root = copy_kit(tmp_path)
    (root / "lessons" / "06-prefix-caching" / "README.md").unlink()
    with pytest.raises(FelabError, match="README"):
        bundle.build(root)
