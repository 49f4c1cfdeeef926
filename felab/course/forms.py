"""Your numbers as HTML: a lesson page's form, and the wrap-up's table and CSV.

`numbers_form(lesson)` becomes the `<!-- felab:numbers -->` marker of a lesson page and
`all_numbers(titles)` the `<!-- felab:all-numbers -->` marker of a wrap-up (assemble.py
puts them there). Each field is prefilled from results/ where the kit can find it
(numbers.py reads each lesson's `numbers.toml`); course/assets/numbers.js keeps what the
learner types, per address, in the browser's local storage under
`felab:numbers:<lesson folder>:<field key>`, and typed values win over prefills.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
from typing import Any
from urllib.parse import quote

from felab.course.numbers import Field, nothing_usable, prefills
from felab.errors import FelabError


def _inline(text: str) -> str:
    """Escape `text` for HTML and turn `backticks` into <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _json_for_script(data: Any) -> str:
    """JSON safe inside <script type="application/json">."""
    return json.dumps(data, ensure_ascii=False).replace("</", "<\\/")


NOTHING_YET = "Nothing recorded for this yet: run the command, then type it."


def measured_note(m: dict[str, Any]) -> str:
    """Which run a prefilled number came from, and whether it is a cold run's (as numbers.js says it)."""
    model = f" ({m['model']})" if m.get("model") else ""
    note = f" {m['note']}" if m.get("note") else ""
    run = m.get("run") or f"the run of {m['when']}"
    return f"Filled from your run: {run} on {m['target']}{model}, in {m['file']}.{note}"


def numbers_form(lesson: str, fields: list[Field]) -> str:
    """The labelled inputs for `lesson`'s `fields`, each with its hint and, where results/ has it,
    its prefill.

    Works without JavaScript (the prefill is the input's value); assets/numbers.js keeps what
    the learner types in the browser's local storage, and typed values win over prefills.
    """
    if not fields:
        raise FelabError(
            f"lesson {lesson} has a numbers marker but declares no numbers: add "
            f"lessons/{lesson}/numbers.toml (see docs/bundle.md)."
        )
    found = prefills(fields)
    parts = [f'<form class="felab-numbers" data-lesson="{lesson}" autocomplete="off">']
    for n, f in enumerate(fields, start=1):
        ident = f"n-{lesson}-{f.key}"
        m = found[f.key]
        value = f' value="{html.escape(m["value"])}"' if m else ""
        data = f" data-prefill='{html.escape(_json_for_script(m))}'" if m else ""
        left_out = nothing_usable(f.source) if f.source and not m else ""  # a run, but not the step
        status = html.escape(measured_note(m)) if m else html.escape(f"{NOTHING_YET} {left_out}".strip())
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


def all_numbers(declared: dict[str, list[Field]], titles: dict[str, str]) -> str:
    """The wrap-up's table of every lesson's numbers and its CSV (prefills; numbers.js adds typed values)."""
    items: list[dict[str, Any]] = []
    for lesson, fields in declared.items():
        found = prefills(fields)
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
        if m and m.get("note"):
            source += f" ({m['note']})"
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
