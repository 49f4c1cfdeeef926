"""redact(): keys out of any text, whatever a server sent; ordinary words left alone."""

from __future__ import annotations

import pytest

from felab.errors import FelabError
from felab.redact import redact, redact_all

KEY = "fw_fake_4f9c2e7d1b8a6053"


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", KEY)


@pytest.mark.parametrize(
    ("said", "shown"),
    [
        (f"invalid key {KEY}", "invalid key <FIREWORKS_API_KEY>"),
        (f"Authorization: Bearer {KEY}", "Authorization: Bearer <FIREWORKS_API_KEY>"),
        ("authorization: bearer sk-someone-elses-1234", "authorization: bearer <redacted>"),
        ("{'Authorization': 'Bearer eyJhbGciOi.x.y2'}", "{'Authorization': 'Bearer <redacted>'}"),
        (f"key={KEY}&user=1", "key=<FIREWORKS_API_KEY>&user=1"),
    ],
)
def test_keys_are_taken_out(said: str, shown: str) -> None:
    assert redact(said) == shown


@pytest.mark.parametrize(
    "said",
    [
        "Missing Bearer token in the Authorization header.",
        "Use Bearer authentication.",
        'curl -H "Authorization: Bearer $FIREWORKS_API_KEY" https://api.fireworks.ai/v1/x',
        "not-needed",  # the local servers' stand-in key is not a key
    ],
)
def test_ordinary_text_is_left_alone(said: str) -> None:
    assert redact(said) == said


def test_every_felab_error_and_every_recorded_string_is_redacted() -> None:
    assert KEY not in FelabError(f"the server said: {KEY}").message
    row = redact_all({"model": f"m-{KEY}", "calls": [{"note": f"Bearer {KEY}"}], KEY: 1})
    assert KEY not in repr(row)
