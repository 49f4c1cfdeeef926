"""`felab fw-check`: anything on Fireworks that is still billing, and the command that stops it.

It fails closed. "Nothing is billing" is printed only when every list was read
to its last page and understood; a missing or refused key, a network error, a
5xx, or a reply of an unexpected shape stops it with "could not check" instead.

    exit 0   nothing is billing (one line says so)
    exit 1   something is billing (each item with the command that stops it)
    exit 2   could not check, and why

What it reads, all relative to one root URL (`FIREWORKS_BASE_URL`, default
https://api.fireworks.ai), with the official `fireworks-ai` SDK:

    GET /v1/accounts                                  only when FIREWORKS_ACCOUNT_ID is not set
    GET /v1/accounts/{account}/deployments            every page
    GET /v1/accounts/{account}/supervisedFineTuningJobs, reinforcementFineTuningJobs, dpoJobs,
        batchInferenceJobs                            every page

The SDK gives the auth header, the URLs, typed errors and retries; the HTTP
client under it is fw-check's own (transport.py): it follows no redirect, asks
only FIREWORKS_BASE_URL's origin, and holds the whole check to one deadline and
every reply to a size cap, each a "could not check" when crossed. Its
auto-paginating iterator is not used, for a measured reason (fireworks-ai
1.2.30 against tests/fake_fireworks.py): it turns `{}` and `{"deployments": null}`
into an empty list, yields the items of `{"deployments": "x"}` as they are, and
follows a repeating `nextPageToken` forever. A billing sweep must not mistake
any of that for "nothing is billing", so it takes each page's raw JSON from the
SDK (`with_raw_response`) and checks the shape and the page tokens itself.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import fireworks

from felab.connect import with_scheme
from felab.errors import FelabError, silence_stdout
from felab.fireworks.transport import Budget, guarded_client, stopped_by
from felab.paths import ENV_FILE, from_here
from felab.redact import redact
from felab.tables import table
from felab.targets import (
    FIREWORKS_ROOT,
    exposes_key,
    fireworks_root,
    fix_key_advice,
    required_key,
    root_problem,
)

EXIT_CLEAR, EXIT_BILLING = 0, 1  # could not check: a CouldNotCheck, errors.EXIT_ERROR (2)
PAGE_SIZE = 200  # the API's maximum
MAX_PAGES = 500  # 100,000 items: a list longer than that is a server that never ends
RETRIES = 1  # one retry on a 5xx or a dropped connection, then "could not check"
TIMEOUT_S = 30.0
"""Per request, for each step (connect, read...); the whole check has transport.DEADLINE_S."""

GONE = {"DELETING", "DELETED"}
"""Deployment states that no longer bill."""
JOB_FINISHED = {
    "JOB_STATE_COMPLETED",
    "JOB_STATE_FAILED",
    "JOB_STATE_CANCELLED",
    "JOB_STATE_EXPIRED",
    "JOB_STATE_EARLY_STOPPED",
    "JOB_STATE_DELETING",
    "JOB_STATE_DELETING_CLEANING_UP",
}
"""Job states that no longer bill; any other state (running, pending, unknown...) is listed."""


class CouldNotCheck(FelabError):
    """The sweep could not read everything: never to be shown as an empty list.

    `shown`: what it did read (deployments and jobs that bill), for the command to print first.
    """

    def __init__(self, why: str, shown: str = "") -> None:
        self.why, self.shown = why, shown
        super().__init__(
            f"could not check what is billing on Fireworks: {why} This is not an all-clear: "
            f"what could not be read may be billing."
        )


# ── What bills ────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Deployment:
    name: str  # accounts/<account>/deployments/<id>
    base_model: str
    state: str
    replicas: int
    desired: int
    min_replicas: int
    accelerator: str

    @property
    def billing(self) -> bool:
        """Replicas running, wanted, or kept at a minimum, and not being deleted."""
        return self.state not in GONE and max(self.replicas, self.desired, self.min_replicas) > 0


@dataclass(frozen=True)
class JobKind:
    key: str  # the list's JSON key and URL segment
    label: str
    sdk: str  # the SDK resource
    stop: str  # the command that stops one; {name} is accounts/<a>/<key>/<id>, {root} the root URL


JOB_KINDS = (
    JobKind(
        "supervisedFineTuningJobs",
        "fine-tuning (SFT)",
        "supervised_fine_tuning_jobs",
        "firectl supervised-fine-tuning-job cancel {name}",
    ),
    JobKind(
        "reinforcementFineTuningJobs",
        "fine-tuning (RFT)",
        "reinforcement_fine_tuning_jobs",
        'curl -X POST -H "Authorization: Bearer $FIREWORKS_API_KEY" -d "{{}}" {root}/v1/{name}:cancel',
    ),
    JobKind(
        "dpoJobs",
        "fine-tuning (DPO)",
        "dpo_jobs",
        'curl -X DELETE -H "Authorization: Bearer $FIREWORKS_API_KEY" {root}/v1/{name}',
    ),
    JobKind(
        "batchInferenceJobs",
        "batch inference",
        "batch_inference_jobs",
        'curl -X DELETE -H "Authorization: Bearer $FIREWORKS_API_KEY" {root}/v1/{name}',
    ),
)


@dataclass(frozen=True)
class Job:
    kind: JobKind
    name: str
    state: str


@dataclass
class Sweep:
    """Everything read from one account."""

    account: str
    root: str
    deployments: list[Deployment] = field(default_factory=list)
    active_jobs: list[Job] = field(default_factory=list)
    jobs_seen: int = 0
    unread: list[str] = field(default_factory=list)  # job lists that could not be read, and why


def _count(item: dict, key: str, where: str) -> int:
    """A replica count: absent means 0 (proto3 JSON leaves zeros out); anything odd stops the sweep."""
    value = item.get(key, 0)
    if isinstance(value, str) and value.isdigit():  # proto3 JSON may send integers as strings
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CouldNotCheck(f"{where} has {key}={value!r}, not a count of replicas.")
    return value


def _text(item: dict, key: str, where: str, default: str | None = None) -> str:
    value = item.get(key, default)
    if not isinstance(value, str) or not value:
        raise CouldNotCheck(f"{where} has no readable `{key}` ({value!r}).")
    return value


def parse_deployment(item: Any, where: str) -> Deployment:
    """One item of `deployments`, checked field by field."""
    if not isinstance(item, dict):
        raise CouldNotCheck(f"{where} is not an object ({type(item).__name__}).")
    name = _text(item, "name", where)
    if "/deployments/" not in name:
        raise CouldNotCheck(f"{where} has the name {name!r}, not accounts/<account>/deployments/<id>.")
    kind = item.get("acceleratorType") or "?"
    many = item.get("acceleratorCount")
    return Deployment(
        name=name,
        base_model=str(item.get("baseModel") or "?"),
        state=_text(item, "state", f"deployment {name}", default="STATE_UNSPECIFIED"),
        replicas=_count(item, "replicaCount", f"deployment {name}"),
        desired=_count(item, "desiredReplicaCount", f"deployment {name}"),
        min_replicas=_count(item, "minReplicaCount", f"deployment {name}"),
        accelerator=f"{many} × {kind}" if isinstance(many, int) else str(kind),
    )


def parse_job(kind: JobKind, item: Any, where: str) -> Job:
    if not isinstance(item, dict):
        raise CouldNotCheck(f"{where} is not an object ({type(item).__name__}).")
    name = _text(item, "name", where)
    return Job(kind, name, _text(item, "state", f"job {name}", default="JOB_STATE_UNSPECIFIED"))


# ── Reading the lists ─────────────────────────────────────────────────────────


class DuplicateKey(ValueError):
    """A JSON object that names a key twice."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json's object_pairs_hook that refuses a key named twice in one object.

    JSON leaves a repeated key's meaning open: Python keeps the last value, other parsers the
    first. `{"replicaCount": 1, "replicaCount": 0}` could bill on Fireworks' side while reading
    as 0 here, so a page that repeats a key is not read at all."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def read_all(list_page: Callable[..., Any], key: str, what: str, **params: Any) -> list[Any]:
    """Every item of a paginated list, following `nextPageToken` to the end, checking each page."""
    items: list[Any] = []
    token, seen = "", set()
    for page in range(1, MAX_PAGES + 1):
        raw = list_page(page_size=PAGE_SIZE, **({"page_token": token} if token else {}), **params)
        try:
            body = raw.http_response.json(object_pairs_hook=unique_keys)
        except DuplicateKey as exc:
            raise CouldNotCheck(
                f"page {page} of {what} names the key {exc.key!r} twice in one object, so which value "
                f"counts is not clear (a parser keeps either one)."
            ) from None
        except ValueError:
            raise CouldNotCheck(f"page {page} of {what} was not JSON.") from None
        if not isinstance(body, dict) or not isinstance(body.get(key), list):
            shape = sorted(body) if isinstance(body, dict) else type(body).__name__
            raise CouldNotCheck(f"page {page} of {what} has no `{key}` list (got {shape}).")
        items.extend(body[key])
        token = next_page(body, len(items), f"page {page} of {what}")
        if not token:
            return items
        if token in seen:
            raise CouldNotCheck(f"the server sent the page token {token!r} twice while listing {what}.")
        seen.add(token)
    raise CouldNotCheck(f"{what} did not end after {MAX_PAGES} pages.")


def next_page(body: dict[str, Any], read: int, where: str) -> str:
    """The next page's token, or "" when this page plainly says it is the last.

    The API's own end of a list (shared/reference/fireworks.md) is a `nextPageToken` left
    out or empty (""); a next page is a non-empty string. Anything else (`false`, `0`, `[]`,
    `{}`, `null`) says neither: it ends the list only when `totalSize` says every item has
    been read (`read`), and otherwise stops the check, since a page may follow that bills.
    """
    if "nextPageToken" not in body:
        return ""
    token = body["nextPageToken"]
    if isinstance(token, str):
        return token
    total = body.get("totalSize")
    if isinstance(total, str) and total.isdigit():  # proto3 JSON may send integers as strings
        total = int(total)
    if isinstance(total, int) and not isinstance(total, bool) and total == read:
        return ""
    shown = json.dumps(token)
    raise CouldNotCheck(
        f"{where} ends with nextPageToken {shown[:40]}, neither the token of a next page (text) nor "
        f'the end of the list (left out or ""), and its totalSize ({total!r}) does not say all '
        f"{read} item(s) are read: a page that bills may follow."
    )


def api_key() -> str:
    """FIREWORKS_API_KEY, found as for `--target fireworks` and checked for stray characters:
    without a usable key, nothing can be checked."""
    try:
        key = required_key("FIREWORKS_API_KEY")
    except FelabError as exc:  # missing, or holding characters a header cannot carry
        raise CouldNotCheck(exc.message) from None
    return key


def root_url() -> str:
    """The one root URL: control plane at /v1/accounts/..., inference at /inference/v1; its
    scheme in lower case (see felab/urls.py), so that `HTTP://` is refused as `http://` is."""
    if problem := root_problem("fireworks"):  # no scheme, or an API path: advised as the root
        raise CouldNotCheck(problem)
    try:
        root = with_scheme(fireworks_root(), "FIREWORKS_BASE_URL")
    except FelabError as exc:  # a scheme that is neither http nor https
        raise CouldNotCheck(exc.message) from None
    if exposes_key(root):
        raise CouldNotCheck(
            f"FIREWORKS_BASE_URL is {root}, a plain http:// address: the key would cross the network "
            f"unencrypted. Use https:// (unset, it is {FIREWORKS_ROOT})."
        )
    return root


def sdk_client(key: str, root: str, budget: Budget) -> fireworks.Fireworks:
    """The official SDK, over fw-check's guarded HTTP client (no redirects, a deadline, a size cap)."""
    return fireworks.Fireworks(
        api_key=key,
        base_url=root,
        max_retries=RETRIES,
        timeout=TIMEOUT_S,
        http_client=guarded_client(budget, TIMEOUT_S),
    )


def account_id(client: fireworks.Fireworks) -> str:
    """FIREWORKS_ACCOUNT_ID, else the one account the key can see (`GET /v1/accounts`)."""
    given = os.environ.get("FIREWORKS_ACCOUNT_ID", "").strip().removeprefix("accounts/")
    if given:
        if not given.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise CouldNotCheck(f"FIREWORKS_ACCOUNT_ID is {given!r}, not an account id like `my-account`.")
        return given
    found = read_all(client.accounts.with_raw_response.list, "accounts", "your accounts")
    names = [a.get("name") if isinstance(a, dict) else None for a in found]
    ids = [n.removeprefix("accounts/") for n in names if isinstance(n, str) and n.startswith("accounts/")]
    if len(ids) != len(found):
        raise CouldNotCheck(f"the list of accounts has entries without an `accounts/<id>` name: {names!r}.")
    if len(ids) != 1:
        shown = ", ".join(ids) or "none"
        raise CouldNotCheck(
            f"this key sees {len(ids)} accounts ({shown}), so which one to check is not clear. Set "
            f"FIREWORKS_ACCOUNT_ID=<account id> in {ENV_FILE} and run again."
        )
    return ids[0]


def sweep(client: fireworks.Fireworks, account: str, root: str) -> Sweep:
    """Read every deployment (all or nothing), then every job list (a failure is noted, not hidden)."""
    found = Sweep(account, root)
    items = read_all(
        client.deployments.with_raw_response.list, "deployments", "deployments", account_id=account
    )
    found.deployments = [parse_deployment(d, f"deployment #{i}") for i, d in enumerate(items, 1)]
    for kind in JOB_KINDS:
        try:
            lister = getattr(client, kind.sdk).with_raw_response.list
            jobs = [
                parse_job(kind, j, f"{kind.label} job #{i}")
                for i, j in enumerate(read_all(lister, kind.key, f"{kind.label} jobs", account_id=account), 1)
            ]
        except (CouldNotCheck, fireworks.FireworksError) as exc:
            if stopped_by(exc):  # out of time, or a reply refused: the lists after it would stop too
                rest = [k.key for k in JOB_KINDS[JOB_KINDS.index(kind) :]]
                found.unread.append(f"{', '.join(rest)}: {why(exc, root)}")
                break
            found.unread.append(f"{kind.key}: {why(exc, root)}")
            continue
        found.jobs_seen += len(jobs)
        found.active_jobs += [j for j in jobs if j.state not in JOB_FINISHED]
    return found


# ── Saying what was found ─────────────────────────────────────────────────────


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def report(found: Sweep) -> tuple[str, int]:
    """The text to print and the exit status. Raises CouldNotCheck if a list was not read (with
    what was read, to print before the error)."""
    billing = [d for d in found.deployments if d.billing]
    idle = [d for d in found.deployments if not d.billing and d.state not in GONE]
    out = [f"Fireworks account {found.account} ({found.root})"]

    if billing:
        out += ["", f"Deployments billing now ({len(billing)}): each running replica bills per GPU-second."]
        out.append(table([_row(d) for d in billing]))
        out += ["", "Stop each one (scaling to zero stops the bill and keeps the deployment):"]
        for d in billing:
            out.append(f"  firectl deployment scale {d.name} --replica-count=0")
            out.append(f"  firectl deployment delete {d.name}        # or remove it")
            if d.min_replicas:
                out.append(
                    f"  # minReplicaCount is {d.min_replicas}: scaling to zero will not stick; delete it."
                )
    if idle:
        out += ["", f"Scaled to zero, not billing ({len(idle)}):", table([_row(d) for d in idle])]
    if found.active_jobs:
        out += ["", f"Jobs still running, billing by use ({len(found.active_jobs)}):"]
        out.append(
            table(
                [{"job": _short(j.name), "kind": j.kind.label, "state": j.state} for j in found.active_jobs]
            )
        )
        out += ["", "Stop each one:"]
        out += [f"  {j.kind.stop.format(name=j.name, root=found.root)}" for j in found.active_jobs]

    if found.unread:
        raise CouldNotCheck(
            "some job lists could not be read: " + "; ".join(found.unread), shown=redact("\n".join(out))
        )
    out.append("")
    if billing or found.active_jobs:
        out.append(
            f"BILLING: {len(billing)} deployment(s) and {len(found.active_jobs)} job(s) cost money now. "
            f"Stop them with the commands above, then run `make fw-check` again."
        )
        return "\n".join(out), EXIT_BILLING
    out.append(
        f"Nothing is billing: {len(found.deployments)} deployment(s) read, none with replicas; "
        f"{found.jobs_seen} job(s) read, none running. (Reserved capacity is not visible here.)"
    )
    return "\n".join(out), EXIT_CLEAR


def _row(d: Deployment) -> dict[str, Any]:
    return {
        "deployment": _short(d.name),
        "base model": d.base_model,
        "accelerator": d.accelerator,
        "replicas (now/desired/min)": f"{d.replicas}/{d.desired}/{d.min_replicas}",
        "state": d.state,
    }


def emit(text: str) -> None:
    """Print `text` on stdout, flushed now: output that cannot be written (`> /dev/full`, a pipe
    closed early) is a CouldNotCheck, never Python's exit status 1, which reads as "billing"."""
    if sys.stdout is None:  # started with its output closed (`>&-`): Python gives no stdout at all
        raise CouldNotCheck(
            "its report could not be written: its output was closed (`>&-`). Run it again with its "
            "output on the terminal."
        )
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except OSError as exc:
        silence_stdout()  # or Python's own flush at exit fails again (exit status 120)
        raise CouldNotCheck(
            f"its report could not be written to the output ({exc.strerror or exc}): it went to a full "
            f"disk (`> /dev/full`), or into a pipe closed before the end (`| head`). Run it again "
            f"with its output on the terminal."
        ) from None


def why(exc: Exception, root: str) -> str:
    """One sentence for an SDK error: what went wrong and what to do."""
    if isinstance(exc, CouldNotCheck):
        return exc.why
    if stop := stopped_by(exc):  # the guarded client refused a reply, or ran out of time
        return stop.why
    if isinstance(exc, fireworks.APIStatusError):
        said = _server_words(exc.body) or exc.response.reason_phrase
        status = exc.status_code
        if status == 401:
            return f"Fireworks refused the API key (HTTP 401: {said}). {fix_key_advice('FIREWORKS_API_KEY')}"
        if status in (403, 404):
            return (
                f"HTTP {status} ({said}): the key cannot read that account. Set FIREWORKS_ACCOUNT_ID in "
                f"{ENV_FILE} to the account the key belongs to."
            )
        if status == 429:
            return f"Fireworks is rate limiting this key (HTTP 429: {said}). Wait a minute and run again."
        if status >= 500:
            return (
                f"Fireworks failed (HTTP {status}: {said}). Run again in a minute; see status.fireworks.ai."
            )
        return f"Fireworks answered HTTP {status} ({said})."
    if isinstance(exc, fireworks.APITimeoutError):
        return f"{root} did not answer within {TIMEOUT_S:.0f} s. Run again."
    if isinstance(exc, fireworks.APIConnectionError):
        return f"could not reach {root} (no network, a proxy, or a wrong FIREWORKS_BASE_URL)."
    return f"the SDK failed: {exc}"


def _server_words(body: object) -> str:
    """The server's message from Fireworks' envelope `{"error": {"message": ...}}` or a bare one."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return redact(inner["message"])[:300]  # redacted first: a cut could split a key
    return ""


def check() -> tuple[str, int]:
    """Run the sweep: the text for stdout and the exit status (0 or 1); CouldNotCheck otherwise.

    Fails closed whatever happens: anything but a finished sweep, even a bug here or Ctrl+C,
    is a CouldNotCheck (exit 2), never Python's exit status 1, which would read as "billing".
    """
    key, root = api_key(), root_url()
    budget = Budget.for_check(root)
    try:
        client = sdk_client(key, root, budget)
        text, status = report(sweep(client, account_id(client), root))
    except FelabError:
        raise
    except fireworks.FireworksError as exc:
        raise CouldNotCheck(why(exc, root)) from exc
    except Exception as exc:
        raise CouldNotCheck(
            f"the check itself failed ({type(exc).__name__}: {exc}). `FELAB_DEBUG=1 "
            f"{from_here('make fw-check')}` shows where."
        ) from exc
    except KeyboardInterrupt:
        raise CouldNotCheck("it was interrupted (Ctrl+C) before it had read everything.") from None
    return redact(text), status
