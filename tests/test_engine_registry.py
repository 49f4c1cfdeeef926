"""The engine registry (issue 17, point 2): everything engine-specific in one record per engine,
read by targets.py, connect.py, explain.py and context_fit.py, which name no engine; shown by
Hugging Face TGI, added as one module and one line, tested against a fake that speaks its wire
format, with its advice followed (the fake started as the advised launcher command says).
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from pathlib import Path

import openai
import pytest
from conftest import KIT, PREFIX_BENCH, run_script
from fake_tgi import MODEL, fake_tgi

from felab import add_target_args
from felab.connect import client, resolve
from felab.engine_families import ENGINES
from felab.engine_families.family import Engine
from felab.explain import explain
from felab.targets import TARGETS, Target, start_command


def bench(url: str, *args: str) -> tuple[int, str]:
    out = run_script(PREFIX_BENCH, "--target", "tgi", "--base-url", url, "--quick", *args)
    assert "Traceback" not in out.stderr
    return out.returncode, " ".join(out.stderr.split())


def launcher(said: str) -> list[str]:
    """The text-generation-launcher command a message advises, as words."""
    found = [c for c in re.findall(r"`([^`]+)`", said) if c.startswith("text-generation-launcher")]
    assert len(found) == 1, said
    return shlex.split(found[0])


def flag(words: list[str], name: str) -> int:
    return int(words[words.index(name) + 1])


# ── TGI, end to end ───────────────────────────────────────────────────────────


def test_tgi_is_a_target_with_its_own_address_and_start_command() -> None:
    assert TARGETS["tgi"].url == "http://127.0.0.1:8082/v1"
    assert start_command("tgi", "http://127.0.0.1:8082/v1") == (
        "text-generation-launcher --model-id <model> --port 8082"
    )
    assert start_command("tgi", "http://127.0.0.1:3000/v1") == (  # the port replaced, never written twice
        "text-generation-launcher --model-id <model> --port 3000"
    )
    parsed = add_target_args(argparse.ArgumentParser()).parse_args(["--target", "tgi"])
    assert parsed.target == "tgi"


def test_tgi_down_names_the_launcher_on_that_port() -> None:
    out = run_script(PREFIX_BENCH, "--target", "tgi", "--base-url", "http://127.0.0.1:9/v1", "--quick")
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "nothing is listening there" in said
    assert "`text-generation-launcher --model-id <model> --port 9`" in said


def test_a_streamed_prompt_over_max_total_tokens_names_the_launch_that_fits_and_it_does() -> None:
    with fake_tgi("--max-input-tokens", "1024", "--max-total-tokens", "2048") as url:
        code, said = bench(url)
        assert code == 2 and "cut off" not in said  # TGI's error event is its answer, not a dropped stream
        assert (
            "The prompt (" in said and "and its reply (48) do not fit the context of the tgi server" in said
        )
        assert "(2,048 tokens)" in said
        words = launcher(said)
        port = url.split(":")[2].split("/")[0]
        assert words[1:5] == ["--model-id", MODEL, "--port", port]  # the model and port it runs
    assert flag(words, "--max-total-tokens") == 4096 and flag(words, "--max-input-tokens") == 3840
    with fake_tgi(*words[1:]) as again:  # following it: the launcher's flags, as advised
        assert again == url
        assert bench(again)[0] == 0


def test_a_prompt_over_max_input_tokens_alone_is_read_too() -> None:
    with fake_tgi("--max-input-tokens", "1000", "--max-total-tokens", "8192") as url:
        code, said = bench(url)
        words = launcher(said)
    assert code == 2 and "(1,000 tokens)" in said and "and its reply" not in said
    assert flag(words, "--max-input-tokens") >= 3000
    with fake_tgi(*words[1:]) as again:
        assert bench(again)[0] == 0


def test_the_422_of_a_request_that_is_not_streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(KIT)
    with fake_tgi("--max-input-tokens", "1024", "--max-total-tokens", "2048") as url:
        target = Target("tgi", url, MODEL, "not-needed", False)
        with pytest.raises(openai.UnprocessableEntityError) as caught:
            client(target).chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "x" * 12_000}], max_tokens=48
            )
        said = " ".join(explain(caught.value, target).message.split())
    assert "The prompt (3,000 tokens) and its reply (48) do not fit" in said
    words = launcher(said)
    with fake_tgi(*words[1:]) as again:
        reply = client(Target("tgi", again, MODEL, "x", False)).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x" * 12_000}], max_tokens=48
        )
    assert reply.choices[0].message.content == "Hi there"


def test_another_tgi_validation_error_is_its_words_not_a_context_fix() -> None:
    from felab import FelabError, stream_once

    with fake_tgi() as url:
        api = client(Target("tgi", url, MODEL, "x", False))
        with pytest.raises(FelabError) as caught:  # TGI refuses it in the stream it has started
            stream_once(api, MODEL, [{"role": "user", "content": "hi"}], temperature=0.0)
        said = caught.value.message
        assert (
            "sent an error inside its streamed reply (HTTP 422: Input validation error: `temperature`" in said
        )
        assert "cut off" not in said and "--max-total-tokens" not in said
        assert stream_once(api, MODEL, [{"role": "user", "content": "hi"}], temperature=0.7).ttft_ms > 0


def test_tgis_429_is_its_queue_not_a_rate_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(KIT)
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    with fake_tgi("--max-concurrent-requests", "0") as url:
        target = Target("tgi", url, MODEL, "not-needed", False)
        with pytest.raises(openai.RateLimitError) as caught:
            client(target).chat.completions.create(**ask)
    said = explain(caught.value, target).message
    assert "turned this request away (HTTP 429: Model is overloaded)" in said
    assert "--max-concurrent-requests" in said and "rate limiting this key" not in said
    with fake_tgi("--max-concurrent-requests", "128") as url:  # following it: a larger value
        assert client(Target("tgi", url, MODEL, "x", False)).chat.completions.create(**ask).choices


# ── The registry is the one place ─────────────────────────────────────────────

READERS = ["felab/targets.py", "felab/connect.py", "felab/explain.py", "felab/context_fit.py"]


@pytest.mark.parametrize("module", READERS)
def test_the_readers_branch_on_no_engine_name(module: str) -> None:
    tree = ast.parse((KIT / module).read_text(encoding="utf-8"))
    names = set(ENGINES)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            found += [p.value for p in parts if isinstance(p, ast.Constant) and p.value in names]
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            found += [node.slice.value] if node.slice.value in names else []
    assert not found, f"{module} branches on engines {found}: that belongs in felab/engine_families/"


def test_the_scan_would_see_a_branch() -> None:
    tree = ast.parse('if name == "tgi":\n    x = TARGETS["ollama"]')
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    subscripts = [n for n in ast.walk(tree) if isinstance(n, ast.Subscript)]
    assert compares[0].comparators[0].value == "tgi" and subscripts[0].slice.value == "ollama"


def test_a_new_engine_is_one_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    toy = Engine(name="toy", url="http://127.0.0.1:8099/v1", start="toy-server --serve")
    monkeypatch.setitem(ENGINES, "toy", toy)
    monkeypatch.chdir(KIT)
    args = add_target_args(argparse.ArgumentParser()).parse_args(["--target", "toy", "--model", "m"])
    target = resolve(args)
    assert (target.base_url, target.model, target.is_paid) == ("http://127.0.0.1:8099/v1", "m", False)
    assert start_command("toy", "http://127.0.0.1:9/v1") == "toy-server --serve --port 9"
    down = Target("toy", "http://127.0.0.1:9/v1", "m", "x", False)
    assert "Start it with `toy-server --serve --port 9`" in explain(_refused(down), down).message


def _refused(target: Target) -> openai.APIConnectionError:
    try:
        client(target, timeout=5).models.list()
    except openai.APIConnectionError as exc:
        return exc
    raise AssertionError("port 9 answered")


def test_the_docs_show_how_to_add_one() -> None:
    page = (KIT / "docs" / "adding-an-engine.md").read_text(encoding="utf-8")
    assert "felab/engine_families/" in page and "ENGINES" in page
    for field in Engine.__dataclass_fields__:
        assert f"`{field}`" in page, f"docs/adding-an-engine.md does not describe the field {field}"


def test_every_engine_module_is_registered() -> None:
    folder = Path(KIT / "felab" / "engine_families")
    modules = {p.stem for p in folder.glob("*.py")} - {"__init__", "family"}
    registered = {type(e).__module__ for e in ENGINES.values()}  # all Engine: compare by builder
    assert registered == {"felab.engine_families.family"}
    source = (folder / "__init__.py").read_text(encoding="utf-8")
    assert all(f"{m}.ENGINE" in source for m in modules)
