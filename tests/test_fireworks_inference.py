"""`prefix_bench.py --target fireworks --usage` against a fake Fireworks, through the real openai client.

Checks the paid path end to end over loopback HTTP: one root URL, the same
`user` on every call, usage read from the last streamed chunk (empty
`choices`), the usage and cost lines, and one paragraph (exit 2) for each
error Fireworks sends.
"""

from __future__ import annotations

import argparse

import pytest
from conftest import PREFIX_BENCH, run_script
from fake_fireworks import (
    ECHO_FORMS,
    KEY,
    MODEL,
    RATE_LIMITED,
    SCALING_UP,
    FakeFireworks,
    leaked,
)

from felab.prices import PRICES, Price, cost_line, price_for
from felab.targets import Target

CHAT = "/inference/v1/chat/completions"


def bench(*args: str):
    out = run_script(PREFIX_BENCH, "--target", "fireworks", "--quick", *args, timeout=60)
    assert KEY not in out.stdout + out.stderr
    return out


def test_usage_and_cost_lines_and_one_session_for_every_call(fake: FakeFireworks) -> None:
    out = bench("--usage")
    assert out.returncode == 0, out.stderr
    calls = fake.seen(CHAT)
    assert len(calls) == 4  # 3 streamed questions, then the usage call
    assert {c.body["user"] for c in calls} == {"lesson-06-session"}
    assert all(c.body["model"] == MODEL for c in calls)
    assert [c.body.get("stream", False) for c in calls] == [True, True, True, False]
    assert all(c.body["stream_options"] == {"include_usage": True} for c in calls[:3])

    lines = out.stdout.splitlines()
    # usage arrived in the last streamed chunk (empty `choices`) and was read: calls 2 and 3 hit the cache
    call_lines = [line for line in lines if line.strip().startswith("call")]
    assert "cached     0 of" in call_lines[0] and "cached 3,024 of" in call_lines[1]
    assert "usage: prompt_tokens=3039  cached_tokens=3024" in lines
    cost = next(line for line in lines if line.startswith("cost:"))
    assert "$0.000456 (3,039 tokens × $0.15/M)" in cost
    assert "with 3,024 of them cached at $0.015/M: $0.000048" in cost
    assert "fireworks.ai/pricing, checked 2026-11" in cost
    assert "no cached tokens" not in out.stdout


def test_price_flags_override_the_table(fake: FakeFireworks) -> None:
    out = bench("--usage", "--price-in", "2", "--price-cached", "0.5")
    assert out.returncode == 0, out.stderr
    cost = next(line for line in out.stdout.splitlines() if line.startswith("cost:"))
    assert "× $2/M" in cost and "cached at $0.5/M" in cost and "--price-in/--price-cached" in cost


def test_no_cached_tokens_says_what_the_lesson_says(fake: FakeFireworks) -> None:
    out = bench("--usage", "--order", "variable-first")  # the time first: nothing to reuse
    assert out.returncode == 0, out.stderr
    assert "cached_tokens=0" in out.stdout
    note = out.stdout.split("note: no cached tokens reported.")[1]
    assert "again at once" in note and "expire when idle" in note and "--model" in note
    assert "with 0 of them cached" in out.stdout


@pytest.mark.parametrize(
    ("problem", "says"),
    [
        ("bad-key", ["HTTP 401", "The API key you provided is invalid.", "FIREWORKS_API_KEY"]),
        ("bad-model", ["HTTP 404", "Model not found", "--model"]),
        ("rate-limited", ["HTTP 429", "Wait 7 s"]),
        ("scaling-up", ["HTTP 503", "scaling up"]),
    ],
)
def test_each_fireworks_error_is_one_paragraph_and_exit_2(
    fake: FakeFireworks, monkeypatch, problem: str, says: list[str]
) -> None:
    args: list[str] = []
    if problem == "bad-key":
        monkeypatch.setenv("FIREWORKS_API_KEY", "fw_wrong_key_0000")
    elif problem == "bad-model":
        args = ["--model", "accounts/fireworks/models/no-such-model"]
    elif problem == "rate-limited":
        fake.chat_error = (429, RATE_LIMITED)
    else:
        fake.chat_error = (503, SCALING_UP)
    out = bench(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and "fw_wrong_key_0000" not in out.stdout + out.stderr
    paragraph = out.stderr.strip()
    assert paragraph.startswith("error: The fireworks server") and "\n\n" not in paragraph
    for words in says:
        assert words in " ".join(paragraph.split())


@pytest.mark.parametrize("status", [401, 500])
@pytest.mark.parametrize("debug", [False, True])
def test_a_key_the_server_repeats_is_never_printed_or_recorded(
    fake: FakeFireworks, monkeypatch, isolated, status: int, debug: bool
) -> None:
    # The server's words are shown (they help), the credential in them is not: in the
    # paragraph, and in the FELAB_DEBUG traceback, which still exits 2.
    fake.echo_key = status
    if debug:
        monkeypatch.setenv("FELAB_DEBUG", "1")
    out = bench()  # asserts KEY is nowhere in stdout or stderr
    assert out.returncode == 2
    assert f"HTTP {status}" in out.stderr or f"Error code: {status}" in out.stderr
    assert "Bearer <redacted>" in out.stderr or "<FIREWORKS_API_KEY>" in out.stderr
    assert ("Traceback" in out.stderr) is debug
    assert not list(isolated.glob("*.jsonl"))  # nothing recorded


@pytest.mark.parametrize("buffered", [True, False])
@pytest.mark.parametrize("where", ["/dev/full", "a closed pipe"])
def test_output_a_lesson_cannot_write_is_one_message_not_a_traceback(
    fake: FakeFireworks, isolated, where: str, buffered: bool
) -> None:
    # A lesson's output on a full disk, or into a pipe closed early: exit 2 with one paragraph
    # on stderr that says what was recorded, never Python's traceback. Buffered (Python's
    # default into a file or pipe), the output fails when it is flushed at the end, after the
    # row was recorded; unbuffered (PYTHONUNBUFFERED=1), at the first line, before any.
    import os
    import subprocess
    import sys

    if where == "/dev/full":
        fd = os.open("/dev/full", os.O_WRONLY)
    else:
        read_end, fd = os.pipe()
        os.close(read_end)
    try:
        out = subprocess.run(
            [sys.executable, str(PREFIX_BENCH), "--target", "fireworks", "--quick"],
            cwd=PREFIX_BENCH.parent,
            stdout=fd,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" or not buffered},
        )
    finally:
        os.close(fd)
    said = " ".join(out.stderr.split())
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr
    assert said.startswith("error: this run's output could not be written")
    rows = isolated / "06-prefix.jsonl"
    if buffered:
        assert "this run recorded 1 row before it stopped" in said
        assert len(rows.read_text().splitlines()) == 1
    else:
        assert "this run recorded nothing" in said and not rows.exists()


@pytest.mark.parametrize("how", sorted(ECHO_FORMS))
@pytest.mark.parametrize("status", [401, 429, 500])
def test_a_key_the_server_repeats_encoded_is_never_in_the_paragraph(
    fake: FakeFireworks, isolated, status: int, how: str
) -> None:
    # Lesson 06's 401, 429 and 500 paragraphs show the server's words: never the key in them,
    # base64-encoded (of `Bearer KEY`, of the key, of the header line), \u-escaped, or in another case.
    fake.echo_key, fake.echo_as = status, how
    out = bench()
    said = out.stdout + out.stderr
    assert out.returncode == 2 and f"HTTP {status}" in out.stderr
    assert not leaked(said), said
    assert "<FIREWORKS_API_KEY" in said or "<redacted" in said
    assert not list(isolated.glob("*.jsonl"))


def test_a_reply_without_text_is_an_error_and_records_nothing(fake: FakeFireworks, isolated) -> None:
    fake.no_text = True  # 200, a role chunk, a finish and usage: no content at all
    out = bench()
    assert out.returncode == 2, out.stdout
    paragraph = " ".join(out.stderr.split())
    assert paragraph.startswith("error: The fireworks server at") and "without any text" in paragraph
    assert "nothing was recorded" in paragraph and "--model" in paragraph
    assert "TTFT" not in out.stdout
    assert not (isolated / "06-prefix.jsonl").exists()


def test_the_no_text_error_against_the_openai_wire_format_in_process(fake: FakeFireworks) -> None:
    from felab import FelabError, client, stream_once
    from felab.targets import Target

    fake.no_text = True
    t = Target("fireworks", f"{fake.url}/inference/v1", MODEL, KEY, True)
    with pytest.raises(FelabError, match="ended its reply without any text") as caught:
        stream_once(client(t), MODEL, [{"role": "user", "content": "hi"}])
    assert KEY not in caught.value.message


def test_a_recorded_row_never_holds_a_key(isolated, monkeypatch) -> None:
    from felab import record

    monkeypatch.setenv("FIREWORKS_API_KEY", KEY)
    record("06-prefix", {"target": "fireworks", "model": f"m {KEY}", "calls": [{"note": f"Bearer {KEY}"}]})
    text = (isolated / "06-prefix.jsonl").read_text()
    assert KEY not in text and "m <FIREWORKS_API_KEY>" in text


# ── Prices: one table, flags override, never invented ─────────────────────────


def target(name: str = "fireworks", model: str = MODEL) -> Target:
    return Target(name, "http://x/v1", model, "k", name == "fireworks")


def test_the_cost_line_shows_tokens_prices_and_both_totals() -> None:
    line = cost_line(
        3060, 2944, Price(0.15, 0.015, "felab/prices.py (fireworks.ai/pricing, checked 2026-11)")
    )
    assert line == (
        "cost: input at list price $0.000459 (3,060 tokens × $0.15/M); with 2,944 of them cached at "
        "$0.015/M: $0.000062 — prices: felab/prices.py (fireworks.ai/pricing, checked 2026-11)"
    )


def test_every_price_names_its_source_and_date() -> None:
    for price in PRICES.values():
        assert "http" not in price.source or "." in price.source
        assert "checked 20" in price.source and price.cached <= price.input


def test_prices_come_from_the_table_or_the_flags_and_are_never_invented() -> None:
    none = argparse.Namespace(price_in=None, price_cached=None)
    assert price_for(target(), none) == PRICES[("fireworks", MODEL)]
    assert price_for(target("mock", "felab-practice"), none) is None
    assert price_for(target(model="accounts/fireworks/models/unknown"), none) is None
    only_in = argparse.Namespace(price_in=1.0, price_cached=None)
    assert price_for(target(model="accounts/fireworks/models/unknown"), only_in) is None
    assert price_for(target(), only_in).cached == 0.015  # the table fills the other one
    both = argparse.Namespace(price_in=1.0, price_cached=0.25)
    assert price_for(target("mock", "felab-practice"), both) == Price(1.0, 0.25, "--price-in/--price-cached")


def test_a_free_target_gets_no_cost_line(mock_url: str) -> None:
    out = run_script(PREFIX_BENCH, "--target", "mock", "--base-url", mock_url, "--quick", "--usage")
    assert out.returncode == 0, out.stderr
    assert "usage: prompt_tokens=" in out.stdout and "cost:" not in out.stdout
