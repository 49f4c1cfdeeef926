"""A fake Fireworks for the tests: a real HTTP server on loopback, speaking Fireworks' wire format.

It serves the few endpoints the kit calls, with the field names, states and
error bodies Fireworks documents (see /work/shared/reference/fireworks.md and
the `fireworks-ai` SDK's types):

    GET  /v1/accounts                                   {"accounts": [...], "nextPageToken": ...}
    GET  /v1/accounts/{a}/deployments                   paginated: pageSize (default 50, max 200), pageToken,
                                                        showDeleted (DELETED ones hidden unless true)
    GET  /v1/accounts/{a}/supervisedFineTuningJobs      the same pagination, one list key per collection
         /v1/accounts/{a}/batchInferenceJobs, reinforcementFineTuningJobs, dpoJobs
    POST /inference/v1/chat/completions                 streamed (usage in a last chunk with empty
                                                        `choices`) or not, with a per-`user` prefix cache

Every request must carry `Authorization: Bearer <key>`; a wrong key gets
Fireworks' 401 body. A test shapes the behaviour through the attributes of
`FakeFireworks` (deployments, jobs, `override` for a broken reply) and reads
what arrived in `requests`. It can also misbehave as a hostile or broken
server would: redirect to another origin (`redirect_to`), trickle its replies
(`trickle_s`), send a huge page (`huge_bytes`), gzip a reply nobody asked to be
compressed (`gzip`), repeat the Authorization header in an error (`echo_key`), as
it came or encoded (`echo_as`: base64, `\\u` escapes, upper or lower case),
stream a reply without text (`no_text`), or end page 1 of the deployments with
an odd `nextPageToken` such as `false`, `0`, `[]`, `{}` or `null` (`page_1_token`).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MODEL = "accounts/fireworks/models/gpt-oss-120b"
KEY = "fw_fake_4f9c2e7d1b8a6053"  # what the tests put in FIREWORKS_API_KEY; must never be printed
JOB_LISTS = ("supervisedFineTuningJobs", "batchInferenceJobs", "reinforcementFineTuningJobs", "dpoJobs")
STATES = ("STATE_UNSPECIFIED", "CREATING", "READY", "UPDATING", "DELETING", "DELETED", "FAILED")
BLOCK = 16  # tokens per cache block: cached_tokens is a multiple of it, as on a real paged cache
REAL = object()
"""`FakeFireworks.page_1_token`'s default: page 1 carries the real token (or none on a last page)."""


ECHO_FORMS = {
    "plain": lambda auth: auth,
    "base64 of the header": lambda auth: base64.b64encode(auth.encode()).decode(),
    "base64 of the key": lambda auth: base64.b64encode(auth.split()[-1].encode()).decode(),
    "base64 of the header line": lambda auth: base64.b64encode(f"Authorization: {auth}".encode()).decode(),
    "urlsafe base64, no padding": lambda auth: base64.urlsafe_b64encode(auth.encode()).decode().rstrip("="),
    "urlsafe base64 of the key": lambda auth: base64.urlsafe_b64encode(auth.split()[-1].encode()).decode(),
    "base64 of the key, no padding": lambda auth: (
        base64.b64encode(auth.split()[-1].encode()).decode().rstrip("=")
    ),
    "\\u escapes": lambda auth: "".join(f"\\u{ord(c):04x}" for c in auth),
    "\\u escapes, some": lambda auth: "".join(
        f"\\u{ord(c):04X}" if i % 3 == 0 else c for i, c in enumerate(auth)
    ),
    "upper case": str.upper,
    "lower case": str.lower,
    "swapped case": str.swapcase,
}
"""How a broken server may repeat the Authorization header it was sent (`echo_as`)."""


def leaked(text: str, key: str = KEY) -> list[str]:
    """The forms of `key` still in `text`: the key in any case, or encoded as in ECHO_FORMS,
    whole or the key alone."""
    forms = {
        **{f"{how} (header)": encode(f"Bearer {key}") for how, encode in ECHO_FORMS.items()},
        **{f"{how} (key)": encode(key) for how, encode in ECHO_FORMS.items() if "key" not in how},
    }
    found = [how for how, form in forms.items() if form in text]
    return found + (["the key, in some case"] if key.lower() in text.lower() else [])


def error_body(message: str, code: str, param: str | None = None) -> dict[str, Any]:
    """Fireworks' error envelope, as it sends it."""
    return {"error": {"message": message, "param": param, "code": code, "type": "error"}}


UNAUTHORIZED = error_body("The API key you provided is invalid.", "UNAUTHORIZED")
MODEL_NOT_FOUND = error_body("Model not found, inaccessible, and/or not deployed", "NOT_FOUND", "model")
SCALING_UP = error_body(
    "Deployment is currently scaled to zero and is scaling up. Please try again in a few minutes.",
    "DEPLOYMENT_SCALING_UP",
)
RATE_LIMITED = error_body("Request rate limit exceeded, please try again later.", "RATE_LIMITED")


def deployment(
    dep_id: str,
    account: str = "learner",
    state: str = "READY",
    replicas: int = 1,
    desired: int | None = None,
    min_replicas: int = 0,
    base_model: str = MODEL,
) -> dict[str, Any]:
    """A deployment as `GET .../deployments` returns it (every field present, zeros too)."""
    assert state in STATES, state
    return {
        "name": f"accounts/{account}/deployments/{dep_id}",
        "displayName": dep_id,
        "baseModel": base_model,
        "state": state,
        "status": {"code": "OK", "message": ""},
        "replicaCount": replicas,
        "desiredReplicaCount": replicas if desired is None else desired,
        "minReplicaCount": min_replicas,
        "maxReplicaCount": max(1, replicas),
        "acceleratorType": "NVIDIA_H100_80GB",
        "acceleratorCount": 1,
        "autoscalingPolicy": {"scaleToZeroWindow": "3600s"},
        "createTime": "2026-11-29T10:00:00Z",
        "updateTime": "2026-11-29T10:05:00Z",
        "enableSessionAffinity": True,
    }


def job(collection: str, job_id: str, state: str = "JOB_STATE_RUNNING", account: str = "learner") -> dict:
    """A fine-tuning or batch job as its list returns it."""
    return {
        "name": f"accounts/{account}/{collection}/{job_id}",
        "displayName": job_id,
        "state": state,
        "createTime": "2026-11-29T09:00:00Z",
    }


@dataclass
class Seen:
    """One request as the fake received it (the Authorization header is kept out)."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: Any = None


@dataclass
class FakeFireworks:
    """The fake's state: what it serves, and what it was sent."""

    url: str = ""
    key: str = KEY
    accounts: list[dict] = field(default_factory=lambda: [{"name": "accounts/learner"}])
    deployments: dict[str, list[dict]] = field(default_factory=dict)  # account id -> deployments
    jobs: dict[str, list[dict]] = field(default_factory=dict)  # collection -> jobs (account "learner")
    override: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    """path -> (status, raw body) sent instead of the real answer (a 500, a malformed body...)."""
    chat_error: tuple[int, dict] | None = None
    repeat_page_token: bool = False
    """Deployments: answer every page with the same nextPageToken (a broken server)."""
    page_1_token: Any = REAL
    """Deployments: page 1's nextPageToken is this JSON value instead (`False`, `0`, `[]`, `None`...)."""
    require_key: bool = True
    """False: answer without checking the key (the other origin a redirect points to)."""
    redirect_to: str | None = None
    """Control plane: answer 302 with Location at this root URL, same path and query."""
    trickle_s: float | None = None
    """Control plane: send each reply one byte every so many seconds."""
    huge_bytes: int = 0
    """Deployments: a valid page this many bytes long (many scaled-to-zero deployments)."""
    huge_declared: bool = True
    """With huge_bytes: send its Content-Length (else no length, and close when done)."""
    gzip: bool = False
    """Control plane: gzip every reply, whatever Accept-Encoding said."""
    echo_key: int | None = None
    """Answer every request with this status, repeating its Authorization header in the message."""
    echo_as: str = "plain"
    """With echo_key: the header as it came, or encoded (a name in ECHO_FORMS)."""
    no_text: bool = False
    """Chat: a 200 stream with a role chunk, a finish and usage, but no content at all."""
    requests: list[Seen] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    """Each request's headers, the Authorization header left out."""
    _cache: dict[str, list[str]] = field(default_factory=dict)  # user -> prompts seen

    def seen(self, path_part: str) -> list[Seen]:
        return [r for r in self.requests if path_part in r.path]


class _Handler(BaseHTTPRequestHandler):
    fake: FakeFireworks  # set on the subclass made per server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet: pytest shows failures, not access logs
        pass

    # ── plumbing ──
    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        if self.fake.gzip:
            raw, headers = gzip.compress(raw), {**(headers or {}), "Content-Encoding": "gzip"}
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.fake.trickle_s is None:
            self.wfile.write(raw)
            return
        for byte in raw:  # one byte at a time, until the client gives up
            try:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
            except OSError:
                return
            time.sleep(self.fake.trickle_s)

    def _send_huge(self, size: int) -> None:
        """A valid page of `size` bytes, written as it is made (the fake keeps none of it)."""
        item = json.dumps(deployment("idle", replicas=0)).encode()
        head, tail, n = b'{"deployments": [', b"]}", (size - 20) // (len(item) + 1)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.fake.huge_declared:
            self.send_header("Content-Length", str(len(head) + n * (len(item) + 1) - 1 + len(tail)))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        try:
            self.wfile.write(head)
            for i in range(n):
                self.wfile.write(item + (b"," if i < n - 1 else b""))
            self.wfile.write(tail)
        except OSError:  # the client stopped reading
            return

    def _start(self, method: str) -> tuple[str, dict[str, list[str]], Any] | None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        query = parse_qs(parts.query, keep_blank_values=True)
        self.fake.requests.append(Seen(method, parts.path, query, body))
        self.fake.headers.append({k: v for k, v in self.headers.items() if k.lower() != "authorization"})
        if self.fake.echo_key is not None:  # a broken server or proxy that repeats the credential
            echoed = ECHO_FORMS[self.fake.echo_as](self.headers.get("Authorization") or "")
            said = f"Unauthorized: Authorization: {echoed} was rejected."
            self._send(self.fake.echo_key, error_body(said, "UNAUTHORIZED"))
            return None
        if self.fake.require_key and self.headers.get("Authorization") != f"Bearer {self.fake.key}":
            self._send(401, UNAUTHORIZED)
            return None
        if parts.path in self.fake.override:
            status, raw_body = self.fake.override[parts.path]
            self._send(status, raw_body)
            return None
        return parts.path, query, body

    # ── control plane ──
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        started = self._start("GET")
        if started is None:
            return
        path, query, _ = started
        if self.fake.redirect_to:
            where = self.fake.redirect_to + self.path
            return self._send(302, error_body("moved", "MOVED"), {"Location": where})
        bits = path.strip("/").split("/")
        if bits == ["v1", "accounts"]:
            return self._page("accounts", self.fake.accounts, query)
        if len(bits) == 4 and bits[:2] == ["v1", "accounts"]:
            account, collection = bits[2], bits[3]
            if account not in {a["name"].split("/")[-1] for a in self.fake.accounts}:
                return self._send(403, error_body(f"no access to account {account}", "PERMISSION_DENIED"))
            if collection == "deployments" and self.fake.huge_bytes:
                return self._send_huge(self.fake.huge_bytes)
            if collection == "deployments":
                items = self.fake.deployments.get(account, [])
                if query.get("showDeleted", ["false"])[0] != "true":
                    items = [d for d in items if d.get("state") != "DELETED"]
                return self._page(
                    "deployments", items, query, self.fake.repeat_page_token, self.fake.page_1_token
                )
            if collection in JOB_LISTS:
                return self._page(collection, self.fake.jobs.get(collection, []), query)
        self._send(404, error_body(f"path {path} not found", "NOT_FOUND"))

    def _page(
        self, key: str, items: list, query: dict[str, list[str]], repeat: bool = False, first: Any = REAL
    ) -> None:
        """One page of a list: pageSize (default 50, values above 200 coerced), an opaque pageToken."""
        size = int(query.get("pageSize", ["0"])[0] or 0)
        size = 50 if size <= 0 else min(size, 200)
        token = query.get("pageToken", [""])[0]
        start = int(token.removeprefix("off-")) if token else 0
        body: dict[str, Any] = {key: items[start : start + size], "totalSize": len(items)}
        if repeat:
            body["nextPageToken"] = "off-0"
        elif start + size < len(items):
            body["nextPageToken"] = f"off-{start + size}"
        if start == 0 and first is not REAL:
            body["nextPageToken"] = first
        self._send(200, body)

    # ── inference ──
    def do_POST(self) -> None:  # noqa: N802
        started = self._start("POST")
        if started is None:
            return
        path, _, req = started
        if path != "/inference/v1/chat/completions":
            return self._send(404, error_body(f"path {path} not found", "NOT_FOUND"))
        if self.fake.chat_error:
            status, body = self.fake.chat_error
            return self._send(status, body, {"retry-after": "7"} if status == 429 else None)
        if req.get("model") != MODEL:
            return self._send(404, MODEL_NOT_FOUND)
        prompt = "".join(str(m.get("content", "")) for m in req.get("messages", []))
        prompt_tokens = max(1, len(prompt) // 4)
        cached = self._cached_tokens(req.get("user"), prompt, prompt_tokens)
        words = ["Refunds", " above", " $500", " need", " approval", "."][: max(1, req.get("max_tokens", 6))]
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(words),
            "total_tokens": prompt_tokens + len(words),
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        headers = {
            "fireworks-prompt-tokens": str(prompt_tokens),
            "fireworks-cached-prompt-tokens": str(cached),
        }
        base = {"id": f"chatcmpl-{len(self.fake.requests)}", "created": int(time.time()), "model": MODEL}
        if not req.get("stream"):
            message = {"role": "assistant", "content": "".join(words)}
            choice = {"index": 0, "message": message, "finish_reason": "length"}
            return self._send(
                200, {**base, "object": "chat.completion", "choices": [choice], "usage": usage}, headers
            )
        self._stream(base, words, usage, headers)

    def _cached_tokens(self, user: str | None, prompt: str, prompt_tokens: int) -> int:
        """Whole blocks of the longest prefix this session sent before; no `user`, no affinity."""
        if not user:
            return 0
        seen = self.fake._cache.setdefault(user, [])
        best = max((len(os.path.commonprefix([old, prompt])) for old in seen), default=0)
        seen.append(prompt)
        return min(best // 4, prompt_tokens - 1) // BLOCK * BLOCK

    def _stream(self, base: dict, words: list[str], usage: dict, headers: dict[str, str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        chunk = {**base, "object": "chat.completion.chunk"}

        def send(choices: list, **more: Any) -> None:
            self.wfile.write(f"data: {json.dumps({**chunk, 'choices': choices, **more})}\n\n".encode())
            self.wfile.flush()

        send([{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}])
        for word in [] if self.fake.no_text else words:
            send([{"index": 0, "delta": {"content": word}, "finish_reason": None}])
        send([{"index": 0, "delta": {}, "finish_reason": "length"}])
        send([], usage=usage)  # usage in its own last chunk, with empty choices
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


@contextmanager
def serve(fake: FakeFireworks | None = None) -> Iterator[FakeFireworks]:
    """Run a fake Fireworks on a free loopback port; its root URL is `fake.url`."""
    fake = fake or FakeFireworks()
    handler = type("Handler", (_Handler,), {"fake": fake})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


DEPLOYMENTS = "/v1/accounts/learner/deployments"
"""The fake account's deployments list, as fw-check reads it."""
COULD_NOT = "could not check what is billing on Fireworks"
"""The start of fw-check's fail-closed message."""


@contextmanager
def fireworks_env(monkeypatch: Any, fake: FakeFireworks | None = None) -> Iterator[FakeFireworks]:
    """Serve a fake and point this test's environment (and its subprocesses) at it.

    Variables a developer's .env could set are pinned to "" here: python-dotenv
    never overrides a variable that exists, even an empty one.
    """
    with serve(fake) as running:
        monkeypatch.setenv("FIREWORKS_BASE_URL", running.url)
        monkeypatch.setenv("FIREWORKS_API_KEY", running.key)
        for name in ("FIREWORKS_ACCOUNT_ID", "FELAB_FIREWORKS_URL", "FELAB_FIREWORKS_MODEL"):
            monkeypatch.setenv(name, "")
        yield running
