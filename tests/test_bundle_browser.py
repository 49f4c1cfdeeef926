"""The course bundle in a real browser: Debian's chromium, driven by Playwright for Python.

The bundle is built from a results fixture and served on loopback. Never downloads a
browser: it uses the system's `chromium` (`.ci/run` installs it from Debian), and skips
with one line when there is none. Screenshots of lesson 06's page go to build/screenshots/.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from bundle_fixtures import LESSON06_SECTIONS, build_with_fixture

from felab.course.serve import served
from felab.paths import KIT_ROOT

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")

CHROMIUM = shutil.which("chromium") or next(
    (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None
)
if CHROMIUM is None:
    pytest.skip("no chromium found (apt-get install chromium runs this test)", allow_module_level=True)

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
SHOTS = KIT_ROOT / "build" / "screenshots"
LESSON = "lessons/06-prefix-caching.html"
FIELD_TIME_FIRST = "#n-06-prefix-caching-llamacpp-time-first"
FIELD_OPENING_FIRST = "#n-06-prefix-caching-llamacpp-opening-first"


@pytest.fixture(scope="module")
def site_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    site = build_with_fixture(tmp_path_factory.mktemp("bundle"))
    with served(site) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (its own local storage); fails the test on any script error."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    # a request the page's own navigation cut short (net::ERR_ABORTED) is not a failure
    tab.on(
        "requestfailed",
        lambda req: "ERR_ABORTED" in (req.failure or "") or errors.append(f"{req.url}: {req.failure}"),
    )
    yield tab
    context.close()
    assert errors == []


def test_lesson06_has_every_section_and_a_screenshot(page: Any, site_url: str) -> None:
    page.goto(site_url + LESSON)
    for section in LESSON06_SECTIONS:
        assert page.locator(f"h2#{section}").is_visible(), section
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "lesson-06.png"))
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(SHOTS / "lesson-06-phone.png"))
    page.locator("h2#your-numbers").scroll_into_view_if_needed()
    page.screenshot(path=str(SHOTS / "lesson-06-phone-numbers.png"))


def test_an_answer_opens_and_closes_by_mouse_and_keyboard(page: Any, site_url: str) -> None:
    page.goto(site_url + LESSON)
    answer = page.locator("details.answer").first
    summary = answer.locator("> summary")
    body = answer.get_by_text("Move the time to the end.")
    assert answer.evaluate("d => d.open") is False and not body.is_visible()
    summary.click()
    assert answer.evaluate("d => d.open") is True and body.is_visible()
    summary.click()
    assert answer.evaluate("d => d.open") is False
    summary.focus()
    page.keyboard.press("Enter")
    assert answer.evaluate("d => d.open") is True
    page.keyboard.press("Space")
    assert answer.evaluate("d => d.open") is False


def test_a_prefilled_number_shows_with_when_and_where(page: Any, site_url: str) -> None:
    page.goto(site_url + LESSON)
    field = page.locator(FIELD_OPENING_FIRST)
    assert field.input_value() == "2890 / 41"
    status = page.locator(FIELD_OPENING_FIRST + "-status")
    said = status.inner_text()  # which run filled it: its order, when, where, and the file
    assert "the stable-first run of 2026-11-30 04:25 UTC on llamacpp" in said
    assert "results/06-prefix.jsonl" in said
    # the input is named by its label, and described by its hint and where its value came from
    assert page.get_by_label("1. llama.cpp, opening first").input_value() == "2890 / 41"


def test_typed_numbers_survive_a_reload_win_over_prefills_and_reach_the_csv(page: Any, site_url: str) -> None:
    page.goto(site_url + LESSON)
    field = page.locator(FIELD_TIME_FIRST)
    assert field.input_value() == "1.0"  # prefilled from the fixture
    field.fill("1.04")
    page.reload()
    field = page.locator(FIELD_TIME_FIRST)
    assert field.input_value() == "1.04"
    assert "Your own entry" in page.locator(FIELD_TIME_FIRST + "-status").inner_text()

    page.goto(site_url + "days/day-05.html")
    csv = page.locator("#felab-csv").input_value()
    assert '06-prefix-caching,llamacpp-time-first,"llama.cpp, time first: speed-up",1.04,typed,,' in csv
    assert "2890 / 41,measured,2026-11-30 04:25 UTC,llamacpp" in csv
    assert "2944 / 3110,measured,2026-11-30 04:30 UTC,fireworks" in csv
    assert page.locator('tr[data-field="llamacpp-time-first"] .felab-value').inner_text() == "1.04"
    href = page.locator("#felab-csv-download").get_attribute("href")
    assert href.startswith("data:text/csv") and "1.04" in href

    # back on the lesson, the recorded value can be taken again
    page.goto(site_url + LESSON)
    page.get_by_role("button", name="Use the recorded 1.0").click()
    page.reload()
    assert page.locator(FIELD_TIME_FIRST).input_value() == "1.0"


CONTRAST = """
() => {
  const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (el) => {
    for (; el; el = el.parentElement) {
      const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length < 4 || c[3] > 0) return c.slice(0, 3);
    }
    return [255, 255, 255];
  };
  const blend = (fg, bg) =>
    fg.length < 4 ? fg : fg.slice(0, 3).map((v, i) => v * fg[3] + bg[i] * (1 - fg[3]));
  const texts = ["p", "li", "dt", "dd", "label", "summary", "h1", "h2", "h3", "td", "th"];
  const shown = [...document.querySelectorAll(texts.map((t) => "article " + t).join(","))]
    .filter((el) => el.offsetParent && el.innerText.trim());
  return shown.map((el) => {
    const bg = background(el);
    const a = lum(blend(rgb(getComputedStyle(el).color), bg)), b = lum(bg);
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    return [el.tagName + " " + el.innerText.trim().slice(0, 40), ratio];
  });
}
"""


@pytest.mark.parametrize("name", [LESSON, "days/day-05.html", "index.html"])
def test_pages_are_readable_on_a_phone_labelled_and_in_contrast(page: Any, site_url: str, name: str) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(site_url + name)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # no sideways scrolling
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('article input, article textarea')].filter(e => !e.labels.length)"
        ".map(e => e.id)"
    )
    assert unlabelled == []
    levels = page.evaluate(
        "[...document.querySelectorAll('article h1, article h2, article h3, article h4')]"
        ".map(h => Number(h.tagName[1]))"
    )
    assert levels[0] == 1 and levels.count(1) == 1
    assert all(b - a <= 1 for a, b in zip(levels, levels[1:], strict=False)), (
        levels
    )  # no skipped heading level
    ratios = page.evaluate(CONTRAST)
    assert len(ratios) > 5
    low = [(what, round(ratio, 2)) for what, ratio in ratios if ratio < 4.5]  # WCAG AA for body text
    assert low == []
