"""Docs that cannot drift: the commands in README.md, the lesson READMEs and the lab book
run as shown (make targets exist, scripts exist, their flags are accepted)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from doc_commands import check, commands, documented_files, options_part
from doc_links import broken, linked_pages

from felab.paths import KIT_ROOT


@pytest.mark.parametrize("doc", documented_files(), ids=lambda p: str(p.relative_to(KIT_ROOT)))
def test_every_documented_command_exists_and_its_flags_are_accepted(doc: Path) -> None:
    found = list(commands(doc))
    problems = [problem for cmd in found for problem in check(cmd)]
    assert not problems, "\n".join(problems)


def test_the_docs_show_the_commands_that_matter() -> None:
    shown = {" ".join(c.words) for doc in documented_files() for c in commands(doc)}
    assert "make demo" in shown and "make test" in shown
    assert "python prefix_bench.py --target llamacpp --order variable-first" in shown
    assert "python prefix_bench.py --target fireworks --usage" in shown


def test_the_checker_catches_a_removed_target_flag_or_script(tmp_path: Path) -> None:
    doc = tmp_path / "drifted.md"
    doc.write_text(
        "```bash\n"
        "make no-such-target\n"
        "cd lessons/06-prefix-caching\n"
        "python prefix_bench.py --target mock --no-such-flag\n"
        "python prefix_bench.py --order sideways\n"
        "python gone.py\n"
        "make -C ../.. demo && frobnicate --now\n"
        "```\n"
    )
    problems = [p for cmd in commands(doc) for p in check(cmd)]
    assert len(problems) == 5, problems
    text = "\n".join(problems)
    assert "no make target 'no-such-target'" in text
    assert "--no-such-flag is not in its --help" in text
    assert "'sideways' is not a choice of --order" in text

    assert "no script gone.py" in text
    assert "unknown command 'frobnicate'" in text


def test_a_flag_counts_only_where_help_defines_options() -> None:
    # A description may quote a command with a flag the script no longer has.
    import argparse

    parser = argparse.ArgumentParser(
        description="Run it:\n\n    python x.py --ghost\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--real", help="a real flag")
    part = options_part(parser.format_help())
    assert "--real" in part and "--ghost" not in part


def test_the_architecture_table_names_every_module_and_only_those() -> None:
    page = (KIT_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(felab/[\w/]+\.py)` \|", page, re.MULTILINE)
    listed = set(rows)
    twice = sorted({r for r in rows if rows.count(r) > 1})
    assert not twice, f"docs/architecture.md lists these twice: {twice}"
    on_disk = {str(p.relative_to(KIT_ROOT)) for p in (KIT_ROOT / "felab").rglob("*.py")}
    # A folder's row (`felab/x/y/`) covers the modules in it: a registry, whose files are one
    # entry each (a cost term is its own file and a line of the registry, nothing more).
    folders = re.findall(r"^\| `(felab/[\w/]+/)` \|", page, re.MULTILINE)
    on_disk = {m for m in on_disk if not any(m.startswith(f) for f in folders)}
    assert folders == [f for f in folders if (KIT_ROOT / f).is_dir()], "a folder row names no folder"
    assert not on_disk - listed, f"modules missing from docs/architecture.md: {sorted(on_disk - listed)}"
    assert not listed - on_disk, (
        f"docs/architecture.md lists modules that do not exist: {sorted(listed - on_disk)}"
    )


def test_the_practice_server_imports_nothing_of_the_learners_library_or_the_sdk() -> None:
    # Its start stays light (no openai import), and the layout's boundary holds: only
    # launch.py (which waits with the SDK) may; the bench that measures the SDK is felab/bench/.
    allowed = {"launch.py"}
    for path in (KIT_ROOT / "felab" / "mock_server").glob("*.py"):
        if path.name in allowed:
            continue
        imports = re.findall(r"^\s*(?:from|import) ([\w.]+)", path.read_text(encoding="utf-8"), re.MULTILINE)
        outside = [
            m
            for m in imports
            if m == "openai" or (m.startswith("felab") and not m.startswith("felab.mock_server"))
        ]
        assert not outside, f"{path.name} imports {outside}"


@pytest.mark.parametrize("page", linked_pages(), ids=lambda p: str(p.relative_to(KIT_ROOT)))
def test_every_link_and_pointer_in_the_docs_leads_somewhere(page: Path) -> None:
    problems = list(broken(page))
    assert not problems, "\n".join(problems)


def test_the_link_checker_catches_a_missing_file_heading_or_pointed_section(tmp_path: Path) -> None:
    (tmp_path / "docs" / "runs").mkdir(parents=True)
    (tmp_path / "docs" / "page.md").write_text(
        "# The page\n\n## The report card (`--check`)\n\n## Twice\n\n## Twice\n\n"
        "```bash\n# not a heading\n```\n"
    )
    (tmp_path / "docs" / "runs" / "run.md").write_text(
        "# A run\n\n"
        "[ok](../page.md#the-report-card---check) [ok](../page.md#twice-1) [ok](https://example.com/x#y)\n"
        "[gone](../gone.md) [no heading](../page.md#the-report-card) [fenced](../page.md#not-a-heading)\n"
        'Pointers: `docs/page.md` ("Twice"), `docs/page.md` ("A calibrated twin"), `docs/gone.md` ("X").\n'
    )
    problems = list(broken(tmp_path / "docs" / "runs" / "run.md", root=tmp_path))
    assert len(problems) == 5, problems
    text = "\n".join(problems)
    assert "no file ../gone.md" in text and "no heading #the-report-card\n" in text + "\n"
    assert "no heading #not-a-heading" in text
    assert 'docs/page.md has no heading "A calibrated twin"' in text and "no file docs/gone.md" in text


def test_the_runs_index_names_every_run_and_every_file_beside_them() -> None:
    # docs/runs/README.md is the way in: each run page is a row of its index, and each profile
    # or picture a run made is linked from its run's page, so nothing there is left unfound.
    runs = KIT_ROOT / "docs" / "runs"
    linked_from = {
        page.name: set(re.findall(r"\]\(([^)#\s]+)", page.read_text(encoding="utf-8")))
        for page in runs.glob("*.md")
    }
    indexed = linked_from.pop("README.md")
    found = indexed | {name for page in indexed & set(linked_from) for name in linked_from[page]}
    unfound = sorted(p.name for p in runs.iterdir() if p.name != "README.md" and p.name not in found)
    assert not unfound, f"docs/runs/README.md leads to none of {unfound}: add a row (or a link from its run)"
