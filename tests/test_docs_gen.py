"""The docs' tables that restate code are written from it (felab/docs_gen.py, `make docs`): each is
up to date, a stale one is found (a term added to the registry too), and the flag table is
complete (every flag of the server, every setting; the settings replay takes, replay's flags).
One description per setting: a profile's meanings are the settings' own help and unit."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from felab import docs_gen
from felab.mock_server import terms
from felab.mock_server.config import Settings, flag, unit_of
from felab.paths import KIT_ROOT


def test_every_generated_block_is_up_to_date() -> None:
    assert docs_gen.stale() == [], "run `make docs` and commit what it rewrote"


@pytest.fixture
def copy_of_the_kit(tmp_path: Path) -> Path:
    for block in docs_gen.BLOCKS:
        (tmp_path / block.path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(KIT_ROOT / block.path, tmp_path / block.path)
    return tmp_path


def test_a_stale_block_is_named_and_make_docs_rewrites_only_it(copy_of_the_kit: Path) -> None:
    docs_gen.update(copy_of_the_kit)  # every block fresh first: only the one changed below is stale
    readme = copy_of_the_kit / "README.md"
    before = readme.read_text(encoding="utf-8")
    readme.write_text(before.replace("| `mock` | `http://127.0.0.1:8765/v1`", "| `mock` | `http://x:1/v1`"))
    assert docs_gen.stale(copy_of_the_kit) == ["README.md: targets"]
    assert docs_gen.update(copy_of_the_kit) == ["README.md: targets"]
    assert readme.read_text(encoding="utf-8") == before and docs_gen.stale(copy_of_the_kit) == []


def test_a_file_without_its_markers_is_refused_not_rewritten(copy_of_the_kit: Path) -> None:
    env = copy_of_the_kit / ".env.example"
    env.write_text(env.read_text(encoding="utf-8").replace("# end generated: target-addresses\n", ""))
    with pytest.raises(docs_gen.MissingMarkers, match="end generated: target-addresses"):
        docs_gen.stale(copy_of_the_kit)


def test_a_term_added_to_the_registry_makes_the_cost_term_table_stale(
    copy_of_the_kit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The page's term table is the registry's (felab/mock_server/terms/): one row per term, in
    # its order, with its formula; a new term is a new row, and the tests fail until `make docs`.
    docs_gen.update(copy_of_the_kit)
    page = (copy_of_the_kit / "docs" / "practice-server.md").read_text(encoding="utf-8")
    block = page.split("<!-- generated: cost-terms", 1)[1].split("<!-- end generated", 1)[0]
    rows = re.findall(r"^\| (\w+) \| .* \| `(.+)` \| .+ \| .+ \|$", block, re.M)
    assert rows == [(t.name, docs_gen.cell(t.formula)) for t in terms.TERMS]
    new = dataclasses.replace(terms.TERMS[0], name="host_restore", formula="host_restore_us · restored")
    monkeypatch.setattr(terms, "TERMS", (*terms.TERMS, new))
    assert docs_gen.stale(copy_of_the_kit) == ["docs/practice-server.md: cost-terms"]
    assert docs_gen.update(copy_of_the_kit) == ["docs/practice-server.md: cost-terms"]
    assert "| host_restore |" in (copy_of_the_kit / "docs" / "practice-server.md").read_text(encoding="utf-8")


def flags_in_table(name: str = "practice-server-flags") -> dict[str, str]:
    """One of the practice-server page's generated flag tables: flag -> its replay column."""
    page = (KIT_ROOT / "docs" / "practice-server.md").read_text(encoding="utf-8")
    block = page.split(f"<!-- generated: {name}", 1)[1].split("<!-- end generated", 1)[0]
    return dict(re.findall(r"^\| `(--[\w-]+)` \|.*\| ([^|]+) \|$", block, re.M))


def test_the_flag_table_lists_every_flag_of_the_practice_server() -> None:
    from felab.mock_server.serve import main as server

    # The learner's table holds what --help shows; the twin's what --help-twin shows; together,
    # every setting, once.
    learner, twin = flags_in_table(), flags_in_table("twin-flags")
    assert not set(learner) & set(twin)
    shown = learner | twin
    options = {opt for p in server.params for opt in p.opts if opt.startswith("--")}
    not_settings = {"--host", "--port", "--profile", "--help-twin"}  # the command's own, in the prose
    assert set(shown) == options - not_settings
    page = (KIT_ROOT / "docs" / "practice-server.md").read_text(encoding="utf-8")
    assert all(f"`{o}" in page for o in not_settings)
    assert set(shown) == {flag(f) for f in dataclasses.fields(Settings)}
    assert set(twin) == {flag(f) for f in dataclasses.fields(Settings) if f.metadata["twin"]}


def test_the_flag_tables_replay_column_is_replays_flags() -> None:
    from felab.replay.command import replay_command as replay

    shown = flags_in_table()
    replay_flags = {opt for p in replay.params for opt in p.opts}
    for name, column in shown.items():
        if name == "--model":  # replay's own --model names a real-time target's model, not this setting
            continue
        assert (name in replay_flags) == column.startswith("yes"), name


def test_a_profiles_meanings_are_the_settings_own_help_and_unit() -> None:
    from felab.calibrate import profile

    assert not hasattr(profile, "MEANINGS")  # one description per setting: config.py's
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    assert profile.meaning("overhead_ms") == ("ms", fields["overhead_ms"].metadata["help"])
    assert profile.meaning("not_a_setting") == ("", "")


def test_a_settings_unit_is_read_from_its_name_unless_declared() -> None:
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    expected = {
        "overhead_ms": "ms", "prefill_tps": "tokens/s", "cached_token_us": "µs", "untiled_ns": "ns",
        "idle_timeout_s": "s", "cache_ttl_s": "s", "context_tokens": "tokens", "max_body_bytes": "bytes",
        "cache_blocks": "blocks", "replicas": "", "route": "",
    }  # fmt: skip
    assert {name: unit_of(fields[name]) for name in expected} == expected


def test_the_troubleshooting_index_puts_each_file_under_the_section_of_its_messages() -> None:
    index = docs_gen.troubleshooting_index()
    replay = next(line for line in index.splitlines() if line.startswith("| Replaying a trace"))
    assert "`felab/replay/command.py`" in replay and "replay.md" in replay and "](" not in replay


def test_the_fleet_pages_route_table_has_every_route_and_the_default() -> None:
    # A table kept by hand (its text is prose about each route), checked complete against the code.
    from felab.mock_server.config import DEFAULTS
    from felab.mock_server.fleet import ROUTES

    page = (KIT_ROOT / "docs" / "fleet.md").read_text(encoding="utf-8")
    page = page.split("| `--route` | a request goes to |", 1)[1].split("\n\n", 1)[0]  # that table
    shown = re.findall(r"^\| `([a-z][\w-]*)`( \(default\))? \|", page, re.M)
    assert [name for name, _ in shown] == list(ROUTES)
    assert [name for name, default in shown if default] == [DEFAULTS.route]
