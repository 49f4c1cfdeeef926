"""redact(): keys out of any text, whatever a server sent; ordinary words left alone."""

from __future__ import annotations

import base64

import pytest
from fake_fireworks import ECHO_FORMS, leaked

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
        (
            "target: mock · http://alice:S3cretPW@127.0.0.1:8765/v1 · model",
            "target: mock · http://alice:<redacted>@127.0.0.1:8765/v1 · model",
        ),
        (
            "at https://u:p:q@h:1/v1 and 'http://x:y@z'",
            "at https://u:<redacted>@h:1/v1 and 'http://x:<redacted>@z'",
        ),
        ("http://alice@host/v1 http://host:8080/v1 ://:", "http://alice@host/v1 http://host:8080/v1 ://:"),
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


# ── A key repeated encoded: base64, \u escapes, another case ──────────────────

ODD_KEY = "fw_~~~???_9f8e7d6c5b"
"""A key whose base64 holds `+` and `/` (`-` and `_` in the URL-safe alphabet) and needs padding."""


@pytest.mark.parametrize("key", [KEY, ODD_KEY])
@pytest.mark.parametrize("how", sorted(ECHO_FORMS))
@pytest.mark.parametrize("what", ["header", "key"])
def test_a_key_encoded_is_taken_out_and_the_words_around_it_stay(
    monkeypatch: pytest.MonkeyPatch, key: str, how: str, what: str
) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", key)
    form = ECHO_FORMS[how](f"Bearer {key}" if what == "header" else key)
    shown = redact(f"rejected: {form} (request 7).")
    assert not leaked(shown, key), shown
    assert shown.startswith("rejected: ") and shown.endswith(" (request 7).")
    assert "<FIREWORKS_API_KEY" in shown or "<redacted>" in shown


@pytest.mark.parametrize("before", ["", "x", "xy", "xyz", "token=", '{"auth": "'])
def test_base64_holding_the_key_anywhere_is_taken_out(monkeypatch: pytest.MonkeyPatch, before: str) -> None:
    # Where the key starts inside the encoded text shifts its base64 (three alignments).
    monkeypatch.setenv("FIREWORKS_API_KEY", ODD_KEY)
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        blob = encode(f"{before}{ODD_KEY} and more".encode()).decode()
        shown = redact(f"echo {blob} end")
        assert blob not in shown and shown.startswith("echo <FIREWORKS_API_KEY in base64>") and "end" in shown


def test_base64_of_anyones_bearer_credential_is_taken_out() -> None:
    blob = base64.b64encode(b"Authorization: Bearer sk-someone-elses-1234").decode()
    assert redact(f"saw {blob}.") == "saw <redacted, base64 of a Bearer credential>."


@pytest.mark.parametrize(
    "said",
    [
        base64.b64encode(b"Bearer token").decode(),  # no credential in it
        "ZndfZmFrZV80ZjljMmU3",  # a piece of the key's base64 too short to be it
        "fw_fake_4f9c2e7d",  # the key's opening alone
        "\\u0066\\u0077 and FW_FAKE",
        "a" * 5000,  # a long run of base64 characters, read in linear time
    ],
)
def test_encodings_that_hold_no_key_are_left_alone(said: str) -> None:
    assert redact(said) == said
