"""`felab fw-check` against a fake Fireworks on loopback: it lists what bills, and fails closed.

The exit-code matrix runs `python -m felab fw-check` as a subprocess, as
`make fw-check` does; the variants run in-process through click's CliRunner.
Every run also checks that the API key appears nowhere in the output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from conftest import KIT, run_felab, run_felab_peak, run_make
from fake_fireworks import (
    COULD_NOT,
    DEPLOYMENTS,
    ECHO_FORMS,
    KEY,
    FakeFireworks,
    deployment,
    job,
    leaked,
    serve,
)

from felab.cli import cli
from felab.fireworks import transport
from felab.fireworks.billing import CouldNotCheck, parse_deployment


def fw_check() -> subprocess.CompletedProcess[str]:
    out = run_felab("fw-check", timeout=60)
    assert KEY not in out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    return out


def fw_check_here() -> Result:
    result = CliRunner().invoke(cli, ["fw-check"])
    assert KEY not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    return result


# ── The exit-code matrix, as `make fw-check` runs it ──────────────────────────


def test_nothing_billing_exits_0_with_one_line(fake: FakeFireworks) -> None:
    out = fw_check()
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1].startswith("Nothing is billing: 0 deployment(s) read")
    assert out.stderr == ""
    # it found the account from the key, then read the deployments and every job list
    paths = [r.path for r in fake.requests]
    assert paths[0] == "/v1/accounts" and DEPLOYMENTS in paths
    for kind in ("supervisedFineTuningJobs", "batchInferenceJobs", "reinforcementFineTuningJobs", "dpoJobs"):
        assert f"/v1/accounts/learner/{kind}" in paths


def test_one_ready_deployment_exits_1_with_the_commands_that_stop_it(fake: FakeFireworks) -> None:
    fake.deployments["learner"] = [deployment("lesson-06-gpt-oss", replicas=2)]
    out = fw_check()
    assert out.returncode == 1, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("lesson-06-gpt-oss"))
    for shown in ("accounts/fireworks/models/gpt-oss-120b", "1 × NVIDIA_H100_80GB", "2/2/0", "READY"):
        assert shown in row
    name = "accounts/learner/deployments/lesson-06-gpt-oss"
    assert f"firectl deployment scale {name} --replica-count=0" in out.stdout
    assert f"firectl deployment delete {name}" in out.stdout
    assert out.stdout.strip().splitlines()[-1].startswith("BILLING: 1 deployment(s) and 0 job(s)")


def test_scaled_to_zero_is_shown_apart_and_exits_0(fake: FakeFireworks) -> None:
    fake.deployments["learner"] = [
        deployment("asleep", replicas=0),
        deployment("going", state="DELETING", replicas=1),
        deployment("gone", state="DELETED", replicas=0),
    ]
    out = fw_check()
    assert out.returncode == 0, out.stderr
    idle = out.stdout.split("Scaled to zero, not billing (1):")[1]
    assert "asleep" in idle
    assert "going" not in out.stdout and "gone" not in out.stdout
    assert "firectl" not in out.stdout


def test_every_page_is_read_and_the_last_one_counts(fake: FakeFireworks) -> None:
    idle = [deployment(f"idle-{i:03d}", replicas=0) for i in range(430)]
    fake.deployments["learner"] = [*idle, deployment("on-page-three")]
    out = fw_check()
    assert out.returncode == 1, out.stderr
    assert "on-page-three" in out.stdout and "Scaled to zero, not billing (430)" in out.stdout
    pages = fake.seen(DEPLOYMENTS)
    assert [r.query.get("pageToken") for r in pages] == [None, ["off-200"], ["off-400"]]
    assert all(r.query["pageSize"] == ["200"] for r in pages)


def test_a_refused_key_exits_2_and_never_shows_a_key(fake: FakeFireworks, monkeypatch) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw_wrong_key_0000")
    out = fw_check()
    assert out.returncode == 2
    assert out.stdout == ""
    assert COULD_NOT in out.stderr and "HTTP 401" in out.stderr and "FIREWORKS_API_KEY" in out.stderr
    assert "The API key you provided is invalid." in out.stderr
    assert "fw_wrong_key_0000" not in out.stderr


def test_a_server_error_exits_2_fast(fake: FakeFireworks) -> None:
    body = b'{"error": {"message": "internal error", "code": "INTERNAL", "type": "error"}}'
    fake.override[DEPLOYMENTS] = (500, body)
    t0 = time.perf_counter()
    out = fw_check()
    assert out.returncode == 2 and out.stdout == ""
    assert COULD_NOT in out.stderr and "HTTP 500: internal error" in out.stderr
    assert len(fake.seen(DEPLOYMENTS)) == 2  # one retry, then it gives up
    assert time.perf_counter() - t0 < 15


def test_a_malformed_body_exits_2(fake: FakeFireworks) -> None:
    fake.override[DEPLOYMENTS] = (200, b'{"totalSize": 0}')
    out = fw_check()
    assert out.returncode == 2 and out.stdout == ""
    assert COULD_NOT in out.stderr and "no `deployments` list" in out.stderr


@pytest.mark.skipif(not shutil.which("make"), reason="needs make")
def test_make_fw_check_passes_only_when_nothing_bills(fake: FakeFireworks) -> None:
    # GNU make exits 2 whenever a command fails: `make fw-check` gives 0 or 2, and names the
    # command's own status on its last line ("Error 1": billing, "Error 2": could not check).
    def make() -> subprocess.CompletedProcess[str]:
        return run_make(KIT, "-s", "--no-print-directory", "fw-check")

    assert make().returncode == 0
    fake.deployments["learner"] = [deployment("billing-one")]
    out = make()
    assert out.returncode == 2 and "billing-one" in out.stdout and "Error 1" in out.stderr
    fake.override[DEPLOYMENTS] = (200, b"{}")
    out = make()
    assert out.returncode == 2 and COULD_NOT in out.stderr and "Error 2" in out.stderr


# ── Fails closed on every odd reply ───────────────────────────────────────────


@pytest.mark.parametrize(
    "body",
    [
        b"{}",
        b'{"deployments": null}',
        b'{"deployments": "x"}',
        b'{"deployments": [1, 2]}',
        b'{"deployments": [{"state": "READY", "replicaCount": 1}]}',
        b'{"deployments": [{"name": "accounts/learner/deployments/d", "replicaCount": "many"}]}',
        b'{"deployments": [{"name": "accounts/learner/deployments/d", "replicaCount": -1}]}',
        b"[]",
        b"not json",
        b"<html>502 Bad Gateway</html>",
    ],
)
def test_any_unexpected_shape_is_could_not_check(fake: FakeFireworks, body: bytes) -> None:
    fake.override[DEPLOYMENTS] = (200, body)
    result = fw_check_here()
    assert result.exit_code == 2, result.output
    assert COULD_NOT in result.stderr and "Nothing is billing" not in result.output


def test_a_page_token_that_repeats_is_could_not_check(fake: FakeFireworks) -> None:
    fake.deployments["learner"] = [deployment(f"d{i}", replicas=0) for i in range(300)]
    fake.repeat_page_token = True
    result = fw_check_here()
    assert result.exit_code == 2
    assert "page token 'off-0' twice" in result.stderr
    assert len(fake.seen(DEPLOYMENTS)) == 2


@pytest.mark.parametrize("token", [False, 0, [], {}, None, 1, True, ["off-200"]])
def test_a_page_token_that_is_not_text_is_could_not_check(fake: FakeFireworks, token: object) -> None:
    # A billing deployment on page 2, behind a token that is neither text nor the end of the
    # list (Fireworks leaves it out, or sends "", on the last page): never "Nothing is billing".
    fake.deployments["learner"] = [
        *(deployment(f"idle-{i}", replicas=0) for i in range(200)),
        deployment("p2"),
    ]
    fake.page_1_token = token
    out = fw_check()
    assert out.returncode == 2, out.stdout
    assert "Nothing is billing" not in out.stdout and COULD_NOT in out.stderr
    assert "page 1 of deployments ends with nextPageToken" in out.stderr
    assert "neither the token of a next page" in " ".join(out.stderr.split())


@pytest.mark.parametrize("token", ["", None])
def test_a_page_that_plainly_says_it_is_the_last_ends_the_list(fake: FakeFireworks, token: object) -> None:
    # "" is the API's own end of the list; null counts as one only when totalSize says every item
    # has been read (here 3 of 3).
    fake.deployments["learner"] = [deployment(f"idle-{i}", replicas=0) for i in range(3)]
    fake.page_1_token = token
    result = fw_check_here()
    assert result.exit_code == 0, result.output
    assert "Nothing is billing: 3 deployment(s) read" in result.stdout


def test_null_with_a_total_that_says_more_is_could_not_check(fake: FakeFireworks) -> None:
    fake.deployments["learner"] = [deployment(f"idle-{i}", replicas=0) for i in range(3)]
    fake.override[DEPLOYMENTS] = (200, b'{"deployments": [], "nextPageToken": null, "totalSize": 3}')
    result = fw_check_here()
    assert result.exit_code == 2 and "nextPageToken null" in result.stderr


def test_no_key_is_could_not_check_without_asking(fake: FakeFireworks, monkeypatch) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", "")
    result = fw_check_here()
    assert result.exit_code == 2
    assert COULD_NOT in result.stderr and "FIREWORKS_API_KEY is not set" in result.stderr
    assert fake.requests == []


def test_a_key_with_a_space_is_refused_before_sending_and_not_printed(
    fake: FakeFireworks, monkeypatch
) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw_abc def_123")
    result = fw_check_here()
    assert result.exit_code == 2 and "fw_abc" not in result.output
    assert fake.requests == []


def test_no_network_is_could_not_check(monkeypatch) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", KEY)
    monkeypatch.setenv("FIREWORKS_ACCOUNT_ID", "learner")
    monkeypatch.setenv("FIREWORKS_BASE_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    result = fw_check_here()
    assert result.exit_code == 2
    assert COULD_NOT in result.stderr and "could not reach http://127.0.0.1:9" in result.stderr


def test_a_base_url_with_a_path_is_could_not_check(monkeypatch) -> None:
    monkeypatch.setenv("FIREWORKS_API_KEY", KEY)
    monkeypatch.setenv("FIREWORKS_BASE_URL", "https://api.fireworks.ai/inference/v1")
    result = fw_check_here()
    said = " ".join(result.stderr.split())
    assert result.exit_code == 2 and "Use `FIREWORKS_BASE_URL=https://api.fireworks.ai` (in" in said


@pytest.mark.parametrize("scheme", ["http", "HTTP", "Http", "hTTp"])
def test_plain_http_to_another_machine_is_refused_whatever_the_case(
    fake: FakeFireworks, monkeypatch, scheme
) -> None:
    # 0.0.0.0 reaches this machine's fake, but is not a loopback address to the kit: it stands
    # for another machine. A scheme is case-insensitive (RFC 3986), so HTTP:// is plain http too.
    monkeypatch.setenv("FIREWORKS_BASE_URL", fake.url.replace("http://127.0.0.1", f"{scheme}://0.0.0.0"))
    result = fw_check_here()
    assert result.exit_code == 2, result.output
    assert "a plain http:// address" in result.stderr and "Nothing is billing" not in result.output
    assert fake.requests == []  # the key was never sent


def test_an_upper_case_https_root_is_read(fake: FakeFireworks, monkeypatch) -> None:
    # The same check lets HTTPS:// (and a loopback HTTP://) through: only the case differs.
    monkeypatch.setenv("FIREWORKS_BASE_URL", fake.url.replace("http://", "HTTP://"))
    result = fw_check_here()
    assert result.exit_code == 0, result.output
    assert f"({fake.url})" in result.stdout  # shown with the scheme as the kit compares it


# ── Which account ─────────────────────────────────────────────────────────────


def test_an_account_id_from_the_environment_skips_the_lookup(fake: FakeFireworks, monkeypatch) -> None:
    monkeypatch.setenv("FIREWORKS_ACCOUNT_ID", "accounts/learner")
    fake.deployments["learner"] = [deployment("mine")]
    result = fw_check_here()
    assert result.exit_code == 1 and "mine" in result.stdout
    assert fake.seen(DEPLOYMENTS)
    assert all(r.path != "/v1/accounts" for r in fake.requests)


def test_a_key_with_two_accounts_asks_which(fake: FakeFireworks) -> None:
    fake.accounts = [{"name": "accounts/learner"}, {"name": "accounts/team"}]
    result = fw_check_here()
    assert result.exit_code == 2
    assert (
        "this key sees 2 accounts (learner, team)" in result.stderr
        and "FIREWORKS_ACCOUNT_ID" in result.stderr
    )


def test_an_account_the_key_cannot_read_is_could_not_check(fake: FakeFireworks, monkeypatch) -> None:
    monkeypatch.setenv("FIREWORKS_ACCOUNT_ID", "someone-else")
    result = fw_check_here()
    assert result.exit_code == 2 and "HTTP 403" in result.stderr


# ── What counts as billing ────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("fields", "billing"),
    [
        ({"replicas": 1}, True),
        ({"replicas": 0, "desired": 1, "state": "UPDATING"}, True),  # scaling up: bills in a moment
        ({"replicas": 0, "min_replicas": 1}, True),  # will not stay at zero
        ({"replicas": 1, "state": "CREATING"}, True),
        ({"replicas": 1, "state": "FAILED"}, True),  # failed but holding a GPU
        ({"replicas": 0}, False),
        ({"replicas": 1, "state": "DELETING"}, False),
        ({"replicas": 0, "state": "DELETED"}, False),
    ],
)
def test_what_bills(fields: dict, billing: bool) -> None:
    assert parse_deployment(deployment("d", **fields), "d").billing is billing


def test_zero_counts_left_out_mean_zero() -> None:
    # proto3 JSON may leave out fields at their zero value
    item = {"name": "accounts/learner/deployments/d", "state": "READY", "baseModel": "m"}
    assert parse_deployment(item, "d").billing is False


def test_a_count_that_is_not_a_number_stops_the_sweep() -> None:
    with pytest.raises(CouldNotCheck, match="not a count of replicas"):
        parse_deployment({"name": "accounts/a/deployments/d", "replicaCount": True}, "d")


def test_a_min_replica_deployment_says_scaling_to_zero_will_not_stick(fake: FakeFireworks) -> None:
    fake.deployments["learner"] = [deployment("pinned", min_replicas=1)]
    result = fw_check_here()
    assert result.exit_code == 1 and "minReplicaCount is 1" in result.stdout


# ── Jobs that bill by use ─────────────────────────────────────────────────────


def test_running_jobs_bill_and_finished_ones_do_not(fake: FakeFireworks) -> None:
    fake.jobs = {
        "supervisedFineTuningJobs": [
            job("supervisedFineTuningJobs", "sft-live"),
            job("supervisedFineTuningJobs", "sft-done", "JOB_STATE_COMPLETED"),
        ],
        "batchInferenceJobs": [job("batchInferenceJobs", "batch-queued", "JOB_STATE_PENDING")],
    }
    result = fw_check_here()
    assert result.exit_code == 1
    out = result.stdout
    assert "sft-live" in out and "batch-queued" in out and "sft-done" not in out
    assert (
        "firectl supervised-fine-tuning-job cancel accounts/learner/supervisedFineTuningJobs/sft-live" in out
    )
    assert (
        f'curl -X DELETE -H "Authorization: Bearer $FIREWORKS_API_KEY" {fake.url}/v1/accounts/learner/' in out
    )
    assert "BILLING: 0 deployment(s) and 2 job(s)" in out


def test_only_finished_jobs_exit_0(fake: FakeFireworks) -> None:
    fake.jobs = {"dpoJobs": [job("dpoJobs", "old", "JOB_STATE_CANCELLED")]}
    result = fw_check_here()
    assert result.exit_code == 0 and "1 job(s) read, none running" in result.stdout


def test_a_job_list_that_fails_still_shows_what_bills_then_exits_2(fake: FakeFireworks) -> None:
    fake.deployments["learner"] = [deployment("still-shown")]
    fake.override["/v1/accounts/learner/dpoJobs"] = (500, b'{"error": {"message": "boom", "type": "error"}}')
    result = fw_check_here()
    assert result.exit_code == 2
    assert "still-shown" in result.stdout and "Nothing is billing" not in result.output
    assert "dpoJobs: Fireworks failed (HTTP 500: boom)" in result.stderr


# ── Help ──────────────────────────────────────────────────────────────────────


def test_help_says_what_it_cannot_see_and_the_exit_codes() -> None:
    out = CliRunner().invoke(cli, ["fw-check", "--help"]).output
    assert "reserved capacity" in out and "another account" in out
    for line in ("0  nothing is billing", "1  something is billing", "2  could not check"):
        assert line in out


def test_the_docs_show_the_help_as_it_is() -> None:
    docs = (KIT / "docs" / "fireworks.md").read_text()
    shown = docs.split("$ python -m felab fw-check --help\n")[1].split("```")[0]
    out = subprocess.run(
        [sys.executable, "-m", "felab", "fw-check", "--help"],
        cwd=KIT,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert out.stdout == shown


def test_an_account_id_that_is_not_an_id_is_could_not_check(fake: FakeFireworks, monkeypatch) -> None:
    monkeypatch.setenv("FIREWORKS_ACCOUNT_ID", "accounts/learner/deployments")
    result = fw_check_here()
    assert result.exit_code == 2 and "not an account id" in result.stderr and fake.requests == []


# ── Only Fireworks' own answer counts: no redirects, a deadline, a size cap ───


@pytest.fixture
def elsewhere() -> Iterator[FakeFireworks]:
    """Another origin that answers every list empty, without asking for a key."""
    with serve(FakeFireworks(require_key=False)) as other:
        yield other


def test_a_redirect_to_another_origin_is_could_not_check(fake: FakeFireworks, elsewhere) -> None:
    fake.redirect_to = elsewhere.url
    out = fw_check()
    assert out.returncode == 2, out.stdout
    assert "Nothing is billing" not in out.stdout
    assert COULD_NOT in out.stderr and "HTTP 302, a redirect to" in out.stderr
    assert elsewhere.url.split("//")[1] in out.stderr and "follows no redirect" in out.stderr
    assert elsewhere.requests == []  # not followed at all, with or without the key


def test_a_redirect_within_the_same_server_is_could_not_check_too(fake: FakeFireworks) -> None:
    fake.redirect_to = fake.url + "/moved"
    result = fw_check_here()
    assert result.exit_code == 2 and "a redirect to" in result.stderr
    assert all(not r.path.startswith("/moved") for r in fake.requests)


def test_replies_are_asked_for_uncompressed_and_a_compressed_one_is_refused(fake: FakeFireworks) -> None:
    assert fw_check_here().exit_code == 0
    assert {h.get("Accept-Encoding") for h in fake.headers} == {"identity"}
    fake.gzip = True
    result = fw_check_here()
    assert result.exit_code == 2 and "came compressed (gzip)" in result.stderr


def test_a_trickled_reply_stops_at_the_deadline(fake: FakeFireworks, monkeypatch) -> None:
    # The deadline covers the whole check; shortened here to 2 s. Without one, this reply
    # (1 byte every 0.05 s, ~1,000 bytes) would take about a minute. Margin: the check must
    # end within 10 s of starting (the deadline, one retry's back-off, and a loaded machine).
    monkeypatch.setattr(transport, "DEADLINE_S", 2.0)
    fake.deployments["learner"] = [deployment(f"d{i}", replicas=0) for i in range(2)]
    fake.trickle_s = 0.05
    t0 = time.perf_counter()
    result = fw_check_here()
    took = time.perf_counter() - t0
    assert result.exit_code == 2 and "Nothing is billing" not in result.output
    assert "did not finish within its limit of 2 s" in result.stderr
    assert took < 10, took


@pytest.mark.parametrize("declared", [True, False])
def test_a_reply_over_the_size_cap_is_could_not_check(fake: FakeFireworks, monkeypatch, declared) -> None:
    # 1 MB cap here (8 MB in use): a 20 MB page, declared in Content-Length or not, is refused
    # after at most the cap has been read.
    monkeypatch.setattr(transport, "MAX_REPLY_BYTES", 1024 * 1024)
    fake.huge_bytes, fake.huge_declared = 20 * 1024 * 1024, declared
    result = fw_check_here()
    assert result.exit_code == 2 and "Nothing is billing" not in result.output
    assert "was larger than 1 MB" in result.stderr


def test_a_200_mb_reply_is_refused_in_bounded_memory(fake: FakeFireworks) -> None:
    # As `make fw-check` runs: the real cap (8 MB). The child's peak memory (ru_maxrss) must stay
    # far below the reply: without the cap a 200 MB page took 483 MB. Margin: 200 MB, where the
    # kit's own imports take about 60 MB.
    fake.huge_bytes, fake.huge_declared = 200 * 1024 * 1024, False
    out, peak_mb = run_felab_peak("fw-check", timeout=60)
    assert out.returncode == 2 and "was larger than 8 MB" in out.stderr
    assert peak_mb < 200, peak_mb


# ── Output it cannot write ────────────────────────────────────────────────────


def fw_check_into(stdout: int) -> subprocess.CompletedProcess[str]:
    """`python -m felab fw-check` with its standard output on `stdout` (a file descriptor)."""
    out = subprocess.run(
        [sys.executable, "-m", "felab", "fw-check"],
        cwd=KIT,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert KEY not in out.stderr and "Traceback" not in out.stderr and "Exception ignored" not in out.stderr
    return out


@pytest.mark.parametrize("billing", [False, True])
@pytest.mark.parametrize("where", ["/dev/full", "a closed pipe"])
def test_output_it_cannot_write_is_could_not_check(fake: FakeFireworks, billing: bool, where: str) -> None:
    # Exit 1 means "billing" and 0 "nothing is": a report nobody could read is neither.
    if billing:
        fake.deployments["learner"] = [deployment("bills")]
    if where == "/dev/full":
        fd = os.open("/dev/full", os.O_WRONLY)
    else:
        read_end, fd = os.pipe()
        os.close(read_end)  # closed before fw-check writes a byte
    try:
        out = fw_check_into(fd)
    finally:
        os.close(fd)
    assert out.returncode == 2, out.stderr
    said = " ".join(out.stderr.split())
    assert COULD_NOT in said and "its report could not be written" in said
    assert ("No space left on device" if where == "/dev/full" else "Broken pipe") in said


# ── Debug mode and keys the server repeats ────────────────────────────────────


def test_debug_shows_the_traceback_and_still_exits_2(fake: FakeFireworks, monkeypatch) -> None:
    monkeypatch.setenv("FELAB_DEBUG", "1")
    fake.override[DEPLOYMENTS] = (200, b"{}")
    out = run_felab("fw-check", timeout=60)
    assert out.returncode == 2
    assert "Traceback (most recent call last)" in out.stderr and "CouldNotCheck" in out.stderr


def test_a_key_repeated_by_the_server_is_never_printed(fake: FakeFireworks, monkeypatch) -> None:
    fake.echo_key = 401
    out = fw_check()  # asserts the key is not in stdout or stderr
    assert out.returncode == 2 and "HTTP 401" in out.stderr
    assert "Bearer <redacted>" in out.stderr or "<FIREWORKS_API_KEY>" in out.stderr
    monkeypatch.setenv("FELAB_DEBUG", "1")
    for status in (401, 500):
        fake.echo_key = status
        out = run_felab("fw-check", timeout=60)
        assert out.returncode == 2 and "Traceback" in out.stderr
        assert KEY not in out.stdout + out.stderr
        assert f"HTTP {status}" in out.stderr or f"Error code: {status}" in out.stderr


@pytest.mark.parametrize("how", sorted(ECHO_FORMS))
def test_a_key_the_server_repeats_encoded_is_never_printed(fake: FakeFireworks, how: str) -> None:
    # base64 of `Bearer KEY` (or of the key, or of the header line), \u escapes, another case.
    fake.echo_key, fake.echo_as = 401, how
    out = fw_check()
    said = out.stdout + out.stderr
    assert out.returncode == 2 and "HTTP 401" in out.stderr
    assert not leaked(said), said
    assert "<FIREWORKS_API_KEY" in said or "<redacted" in said


def test_a_long_message_is_cut_after_the_key_is_taken_out(monkeypatch) -> None:
    # Cut first, a key straddling the cut would leave its first characters, matched by nothing.
    from felab.fireworks.billing import _server_words

    monkeypatch.setenv("FIREWORKS_API_KEY", KEY)
    said = _server_words({"error": {"message": "x" * 290 + KEY + " rejected"}})
    assert KEY[:8] not in said and said == "x" * 290 + "<FIREWORKS"


def test_a_key_in_a_deployment_name_is_not_printed(fake: FakeFireworks) -> None:
    fake.deployments["learner"] = [deployment(f"leak-{KEY}")]
    out = fw_check()
    assert out.returncode == 1 and "leak-<FIREWORKS_API_KEY>" in out.stdout


def test_a_failure_of_the_check_itself_exits_2_not_1(fake: FakeFireworks, monkeypatch) -> None:
    # A bug in the sweep (here: a report that breaks) must never read as "billing" (exit 1).
    def broken(_found: object) -> tuple[str, int]:
        raise RuntimeError("boom")

    monkeypatch.setattr("felab.fireworks.billing.report", broken)
    result = fw_check_here()
    assert result.exit_code == 2 and "the check itself failed (RuntimeError: boom)" in result.stderr


@pytest.mark.parametrize("after_s", [0.0, 1.6])  # while it starts (imports), and while it reads
def test_ctrl_c_during_the_check_is_could_not_check_never_exit_1(fake: FakeFireworks, after_s: float) -> None:
    # Exit 1 means "billing"; an interrupted check knows nothing, so it is 2, said plainly.
    # Ctrl+C comes once the kit's code runs (Python's `-X importtime` says click is imported, the
    # first import inside felab/__main__.py's handler), then `after_s` later. A fixed sleep from
    # the start was a race with Python's own start-up: on a fresh clone under 4 test workers,
    # 0.4 s fell in its `site` import, before any code of the kit, and Python exits 1 there.
    fake.deployments["learner"] = [deployment("d0", replicas=0)]
    fake.trickle_s = 0.05  # the check is still reading when Ctrl+C comes
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", "felab", "fw-check"],
        cwd=KIT,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    lines = iter(proc.stderr.readline, "")
    assert any(line.rstrip().endswith("| click") for line in lines), "it ended before it imported click"
    time.sleep(after_s)
    proc.send_signal(subprocess.signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2, out + err
    assert "not an all-clear" in err and "Traceback" not in err and KEY not in out + err
