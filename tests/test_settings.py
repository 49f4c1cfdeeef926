"""Each setting is declared once (config.py), and every flag is written from that declaration."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import click
import httpx
import pytest
from click.testing import CliRunner

from felab.mock_server import serve
from felab.mock_server.config import DEFAULTS, MODEL, UNLIMITED, Settings
from felab.mock_server.flags import command_line, fields, flag, read, spell, sweep_values, twin_fields
from felab.mock_server.launch import practice_server
from felab.mock_server.profile import END_LINE, SCHEMA
from felab.replay.command import replay_command
from felab.replay.sweep import KNOBS

SERVER_FLAGS = {o for p in serve.main.params for o in p.opts}
REPLAY_FLAGS = {o for p in replay_command.params for o in p.opts}


def test_every_setting_is_a_server_flag_and_every_model_setting_a_replay_flag() -> None:
    for f in dataclasses.fields(Settings):
        assert flag(f) in SERVER_FLAGS, f.name
        assert f.metadata["help"], f"{f.name} has no help text"
        if f.metadata["scope"] == MODEL:
            assert flag(f) in REPLAY_FLAGS, f.name
    assert {k.field for k in KNOBS} == {f.name for f in fields(MODEL)}


@pytest.mark.parametrize("f", fields(), ids=lambda f: f.name)
def test_a_default_spelled_is_read_back_as_itself(f: dataclasses.Field) -> None:
    value = getattr(DEFAULTS, f.name)
    assert read(f, spell(f, value)) == value


def test_the_server_command_line_for_some_settings_starts_those_settings() -> None:
    wanted = Settings(
        prefill_tps=1050.5, cache_blocks=UNLIMITED, cache_ttl_s=60.0, replicas=18, route="prefix",
        fail_types=("429", "cut"), seed=7,
    )  # fmt: skip
    seen: list[Settings] = []
    cmd = click.Command("probe", params=serve.main.params, callback=lambda host, port, **v: seen.append(
        serve.to_settings(v)))  # fmt: skip
    out = CliRunner().invoke(cmd, command_line(wanted))
    assert out.exit_code == 0, out.output
    assert seen == [wanted]
    assert "--cache-blocks" in command_line(wanted) and "unlimited" in command_line(wanted)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prefill_tps": 0.0}, "--prefill-tps must be above 0, not 0"),
        ({"replicas": 10_000_000}, "--replicas must be at most 256, not 10000000"),
        (
            {"route": "nearest"},
            "--route must be one of random, round-robin, affinity, prefix, sglang-cache-aware, "
            + "not 'nearest'",
        ),
        ({"fail_types": ("429", "418")}, "--fail-types must be some of 429, 503, 500, cut, not 429,418"),
        ({"overhead_ms": float("nan")}, "--overhead-ms must be a finite number, not nan"),
        ({"cache_blocks": 2.5}, "--cache-blocks must be a whole number, not 2.5"),
        ({"cache_ttl_s": 0.0}, "--cache-ttl must be above 0, not 0"),
        ({"seats": 0}, "--seats must be at least 1, not 0"),
        (
            {"cache_mode": "seat-prefix"},
            "--cache-mode seat-prefix keeps a prompt per seat: give it --seats N, a number",
        ),
        ({"route_cache_threshold": 1.5}, "--route-cache-threshold must be at most 1, not 1.5"),
        (
            {"ubatch_tokens": 32, "tile_tokens": 64},
            "--tile-tokens 64 is more than --ubatch-tokens 32: every piece would be read a row at a "
            "time; give a tile size up to the piece size",
        ),
    ],
)
def test_every_check_lives_in_settings_and_names_the_flag(changes: dict, message: str) -> None:
    with pytest.raises(ValueError) as err:
        dataclasses.replace(DEFAULTS, **changes)
    assert str(err.value) == message


def test_a_sweep_refuses_an_empty_item_instead_of_dropping_it() -> None:
    blocks = next(f for f in fields() if f.name == "cache_blocks")
    assert sweep_values(blocks, "1000, unlimited") == [1000, UNLIMITED]
    with pytest.raises(ValueError, match="--cache-blocks has an empty item in '1000,,2000'"):
        sweep_values(blocks, "1000,,2000")
    route = next(f for f in fields() if f.name == "route")
    with pytest.raises(ValueError, match=r"give each value, e\.g\. random,") as err:
        sweep_values(route, "random,,prefix")  # an example of routes, not of numbers (1,8,18)
    assert all(sweep_values(route, item) for item in str(err.value).split("e.g. ")[1].split(","))


def test_the_tiny_models_install_advice_works_from_a_lesson_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    # It said `make engines` and `.venv/bin/pip install -e '.[engines]'`, which work at the kit's root only.
    from felab.paths import KIT_ROOT
    from felab.tiny_model.build import missing_extra

    lesson = KIT_ROOT / "lessons" / "06-prefix-caching"
    monkeypatch.setenv("FELAB_CALLER_DIR", str(lesson))
    said = missing_extra()
    assert "make -C ../.. engines" in said
    pip, extra = said.split("(or: ")[1].split(" install -e ")
    assert (lesson / pip).resolve() == (KIT_ROOT / ".venv" / "bin" / "pip").resolve()
    assert (lesson / extra.split("[")[0].strip("'")).resolve() == KIT_ROOT


# ── the calibrated twin's settings: out of --help, in --help-twin, working as ever ──

TWIN = {
    "prefill_attention_ns", "masked_attention_ns", "decode_slowdown", "cached_token_us", "decode_context_ns",
    "ubatch_tokens",
    "tile_tokens", "untiled_ns", "chars_per_token", "batch_slowdown", "host_cache_tokens",
    "host_restore_us", "tokenizer", "template_tokens", "template_message_tokens", "template_reply_tokens",
}  # fmt: skip
"""The settings only `felab calibrate` writes: no lesson, lab page or README types them."""


def listed_flags(text: str) -> set[str]:
    """The flags a help text lists as options (at a line's start), not those its prose mentions."""
    return set(re.findall(r"^  (--[\w-]+)", text, re.M))


def test_the_twins_settings_are_the_declared_ones() -> None:
    assert {f.name for f in twin_fields()} == TWIN


def test_help_lists_no_twin_setting_and_help_twin_lists_each() -> None:
    runner = CliRunner()
    plain = runner.invoke(serve.main, ["--help"], terminal_width=100)
    twin = runner.invoke(serve.main, ["--help-twin"], terminal_width=100)
    assert plain.exit_code == 0 and twin.exit_code == 0, plain.output + twin.output
    twin_flags = {flag(f) for f in fields() if f.name in TWIN}
    assert twin_flags <= SERVER_FLAGS
    assert listed_flags(plain.output) == SERVER_FLAGS - twin_flags  # every other flag, --help-twin too
    assert listed_flags(twin.output) == twin_flags
    for f in twin_fields():  # each with its own help, as --help shows a flag
        assert " ".join(f.metadata["help"].split()[:3]) in " ".join(twin.output.split()), f.name


TWIN_VALUES = Settings(
    prefill_attention_ns=35.3, masked_attention_ns=12.0, decode_slowdown=0.477, cached_token_us=2.5,
    decode_context_ns=623.0,
    ubatch_tokens=512, tile_tokens=64, untiled_ns=560.0, chars_per_token=3.87, batch_tokens=2048,
    batch_slowdown=0.05, cache_mode="seat-prefix", seats=4, host_cache_tokens=32768, host_restore_us=0.3,
    tokenizer="/models/tiny-model.gguf", template_tokens=-7, template_message_tokens=-3,
    template_reply_tokens=-1,
)  # fmt: skip
"""A llama.cpp twin's terms (docs/runs/2026-12-01-calibrate-llamacpp-tiny-final.toml's, with the rows,
and llama-server's host-memory cache), and MLX's masked attention, so that every twin setting is set."""


def probe_command(seen: list[Settings]) -> click.Command:
    """The server's own options, on a command that records the settings instead of serving."""
    return click.Command(
        "probe", params=serve.main.params, callback=lambda host, port, **v: seen.append(serve.to_settings(v))
    )


def test_each_twin_setting_still_works_as_a_flag() -> None:
    seen: list[Settings] = []
    line = command_line(TWIN_VALUES)
    assert {flag(f) for f in twin_fields()} <= set(line)
    out = CliRunner().invoke(probe_command(seen), line)
    assert out.exit_code == 0, out.output
    assert seen == [TWIN_VALUES]


def test_each_twin_setting_still_works_in_a_profile(tmp_path: Path) -> None:
    lines = [f"{f.name} = {getattr(TWIN_VALUES, f.name)!r}" for f in fields() if f.name in TWIN]
    profile = tmp_path / "twin.toml"
    settings = "\n".join(["batch_tokens = 2048", 'cache_mode = "seat-prefix"', "seats = 4", *lines])
    profile.write_text(f"[profile]\nschema = {SCHEMA}\n\n[settings]\n{settings}\n\n{END_LINE}\n")
    seen: list[Settings] = []
    out = CliRunner().invoke(probe_command(seen), ["--profile", str(profile)])
    assert out.exit_code == 0, out.output
    assert seen == [TWIN_VALUES]


def test_a_practice_server_started_with_the_twins_flags_books_by_them() -> None:
    # One cold prompt of 4,050 characters: 1,047 tokens at --chars-per-token 3.87, 23
    # past 1,024, a last piece of few rows, so the attention and the rows terms both count.
    # Counted from characters here (the tokenizer's own count: tests/test_tokens.py).
    twin = dataclasses.replace(TWIN_VALUES, tokenizer=None, template_tokens=0)
    body = {"model": DEFAULTS.model, "prompt": "A fresh opening, not seen. " * 150, "max_tokens": 1}
    with practice_server(*command_line(twin)) as base:
        reply = httpx.post(f"{base}/completions", json=body, timeout=30)
    tokens = reply.json()["usage"]["prompt_tokens"]
    assert tokens == 1047 and twin.timing.untiled_rows(tokens) == 23
    assert reply.headers["x-felab-predicted-ttft-ms"] == f"{twin.timing.alone_ms(tokens):.3f}"
    untwinned = dataclasses.replace(twin, **{f.name: getattr(DEFAULTS, f.name) for f in twin_fields()})
    attention_ms, rows_ms = 35.3e-6 * 1047 * 1047 / 2, 560e-6 * 23 * 1047  # 19.3 and 13.5 ms, by hand
    masked_ms = 12e-6 * 1047 * 1047 / 2  # 6.6 ms: the square's masked half, one piece
    twin_ms = twin.timing.alone_ms(tokens) - untwinned.timing.alone_ms(tokens)
    assert twin_ms == pytest.approx(attention_ms + masked_ms + rows_ms)


def test_paths_in_messages_are_written_for_a_lesson_folder(isolated: Path, tmp_path: Path) -> None:
    # `make check` said "(see .env.example)" and a TOML file that is not a profile "(results/profiles/)"
    # in a lesson folder, where neither is.
    from felab.mock_server.profile import ProfileError, read_settings
    from felab.paths import KIT_ROOT
    from felab.targets import key_status

    lesson = KIT_ROOT / "lessons" / "06-prefix-caching"
    os.environ["FELAB_CALLER_DIR"] = str(lesson)  # (isolated's monkeypatch restores the environment)
    said, _ = key_status("FIREWORKS_API_KEY")
    assert "(see ../../.env.example)" in said and (lesson / "../../.env.example").is_file()
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "x"\n')
    with pytest.raises(ProfileError, match=r"one calibrate saved \(\.\./\.\./results/profiles/\)"):
        read_settings(other)
