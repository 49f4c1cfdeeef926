"""Docs that restate code, checked against it (issue 20): the README's target table against the
target table of felab.targets (through its public functions, whichever way they are stored), and
.env.example against the variables the kit reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from felab import paths, targets
from felab.paths import KIT_ROOT

ROW = re.compile(r"^\| `(\w+)` \| `([^`]+)` \| (.+?) \| (.+?) \|$", re.M)


def readme_targets() -> dict[str, tuple[str, str, str]]:
    text = (KIT_ROOT / "README.md").read_text(encoding="utf-8")
    return {name: (url, model, start) for name, url, model, start in ROW.findall(text)}


@pytest.fixture
def kit_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The table's defaults: no .env, no FELAB_*_URL, commands written for the kit's folder."""
    monkeypatch.setattr(paths, "ENV_FILE", tmp_path / "no.env")
    monkeypatch.setattr(paths, "LAB_ENV_FILE", tmp_path / "no-lab.env")
    monkeypatch.setenv("FELAB_CALLER_DIR", str(KIT_ROOT))


def test_the_readmes_target_table_is_the_codes(kit_defaults: None) -> None:
    shown = readme_targets()
    assert set(shown) == set(targets.TARGETS), "README.md's target table lists other targets than the code"
    for name, (url, model, start) in shown.items():
        assert url == targets.default_url(name), name
        default_model = targets.configured_model(name)
        if default_model is None:
            assert model == "asked from the server", name
        else:
            assert f"`{default_model}`" in model, name
        command = targets.start_command(name, url)
        if command is None:  # a cloud API: nothing to start, a key to set
            assert start.startswith("nothing") and f"`{name.upper()}_API_KEY`" in start, name
        else:
            assert start == f"`{command}`", name


def test_env_example_lists_every_variable_the_kit_reads_with_its_default(kit_defaults: None) -> None:
    example = (KIT_ROOT / ".env.example").read_text(encoding="utf-8")
    listed = dict(re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=(.*)$", example, re.M))
    for name in targets.TARGETS:
        assert listed.get(f"FELAB_{name.upper()}_URL") == targets.default_url(name), name
        assert listed.get(f"FELAB_{name.upper()}_MODEL") == (targets.configured_model(name) or ""), name
    read = set()
    for path in (KIT_ROOT / "felab").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        read |= set(
            re.findall(
                r"""(?:environ\.get|getenv|env_value|environ)\(?\[?["'](FELAB_\w+|FIREWORKS_\w+)["']""", text
            )
        )
    read -= {"FELAB_CALLER_DIR", "FELAB_MAKE_TARGET"}  # set by the Makefile, not by a learner
    assert read, "the scan found no variables"
    missing = sorted(v for v in read if v not in listed)
    assert not missing, f".env.example does not list {missing}"


# The practice server's flag table (docs/practice-server.md) is written from Settings: tests/test_docs_gen.py.


def test_the_command_lines_docstring_lists_every_command() -> None:
    from felab import cli

    listed = set(re.findall(r"^    felab ([\w-]+) ", cli.__doc__ or "", re.M))
    assert listed == set(cli.cli.commands), "felab/cli.py's docstring and its commands differ"
