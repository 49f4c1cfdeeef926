"""Real time: a trace sent to a real server at the trace's own times, through the learner's library.

    t0 = now
    for each request:  sleep until t0 + (its timestamp - the first) / speed,
                       then hand it to a worker thread, which sends it with stream_once()

Each request goes out as the official `openai` client sends it (felab.connect's `client`,
felab.streaming's `stream_once`): its text made from its hash ids (synth.py), its
`max_tokens` the trace's output length (capped by `--max-tokens`), its session (if the
trace has one) as `user`, the field Fireworks and the practice server route by.
TTFT is what `stream_once` measured, from just before the request to the first chunk
with text; cached tokens are what the server put in `usage.prompt_tokens_details`.

A worker that is late (every worker busy, or a slow machine) sends late: how late is
measured (`send_lag_p99_ms`), so a replay that could not keep the trace's pace says so.
A request that fails is counted, with the first error's message, never timed. What
only the server knows (queueing, replicas) is not visible from here: `None` in the row.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import openai

from felab.connect import client
from felab.context_fit import server_error
from felab.errors import FelabError
from felab.mock_server.config import MODEL, Settings
from felab.mock_server.flags import command_line
from felab.replay.synth import SMALLEST_BLOCK, prompt_text, template
from felab.replay.tally import Tally
from felab.replay.trace import TraceRequest, check_blocks
from felab.replay.workers import Workers
from felab.streaming import stream_once
from felab.targets import Target

WORKERS = 256
"""Requests in flight at most (threads); a replay that needs more sends late, and says so."""


class Sender:
    """Sends requests from worker threads and tallies what came back."""

    def __init__(self, target: Target, block: int, max_tokens: int | None, own: bool = False) -> None:
        self.target, self.block, self.max_tokens, self.own = target, block, max_tokens, own
        self.api = client(target)
        self.tally, self.lag_s, self.lock = Tally(), array("d"), threading.Lock()
        # One-time work, done before the first request is due: the chat template's parts, and
        # the SDK's chat resource (it loads lazily, on first use).
        template()
        _ = self.api.chat.completions

    def send(self, request: TraceRequest, due: float, at_s: float) -> None:
        """One request (`due`: when it should leave, perf_counter; `at_s`: its arrival in the replay)."""
        messages = [{"role": "user", "content": prompt_text(request, self.block)}]
        reply = max(1, request.output_tokens)
        extra: dict[str, Any] = {"user": request.session} if request.session else {}
        sent = time.perf_counter()
        with self.lock:
            self.lag_s.append(sent - due)  # failed sends too: lateness matters most when overloaded
        try:  # a worker must never lose a request silently: every failure is counted
            got = stream_once(
                self.api, self.target.model, messages, min(reply, self.max_tokens or reply), **extra
            )
        except Exception as exc:  # noqa: BLE001  (FelabError explains; anything else is named)
            with self.lock:
                self.tally.fail(at_s, self.said(exc), request.input_tokens)
            return
        with self.lock:
            cached = got.cached_tokens
            # A figure the server did not report is not assumed: the row shows it as unknown.
            self.tally.unreported += cached is None or got.prompt_tokens is None
            prompt = got.prompt_tokens if got.prompt_tokens is not None else request.input_tokens
            self.tally.add(at_s, prompt, cached or 0, got.ttft_ms / 1000, session=request.session)

    def said(self, exc: Exception) -> str:
        """A failure in words: the kit's explanation (what to change on the server); for the server
        this replay started (`own`), the server's own words, since its advice to restart that
        server with other flags is not the learner's to follow: it is gone when the replay ends."""
        cause = exc.__cause__
        if self.own and isinstance(cause, openai.APIError):
            error = server_error(cause)
            return f"the practice server answered HTTP {error.status}: {error.said}"
        return exc.message if isinstance(exc, FelabError) else f"{type(exc).__name__}: {exc}"


def replay(
    path: Path,
    requests: Iterable[TraceRequest],
    sender: Sender,
    speed: float = 1.0,
    workers: int = WORKERS,
) -> tuple[Tally, float]:
    """Send every request at its time; the tally (with `send_lag_s`) and the wall seconds."""
    if sender.block < SMALLEST_BLOCK:
        raise FelabError(
            f"Real-time replay writes each block's id into its text, which needs blocks of "
            f"{SMALLEST_BLOCK} tokens or more; this trace's are {sender.block}. Replay it in virtual "
            f"time instead (leave out --target)."
        )
    origin: float | None = None
    t0 = time.perf_counter()
    pool = Workers(workers)  # daemon threads: Ctrl+C or a bad line leaves the calls in flight unread
    for request in requests:
        check_blocks(path, request, sender.block)
        origin = request.arrival_s if origin is None else origin
        at_s = (request.arrival_s - origin) / speed
        due = t0 + at_s
        if (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)
        pool.submit(sender.send, request, due, at_s)
    pool.wait()
    sender.tally.send_lag_s = sender.lag_s
    return sender.tally, time.perf_counter() - t0


def server_flags(s: Settings) -> list[str]:
    """The practice server's flags for these settings, so a real server runs the virtual model's
    (written from the settings' declarations: only those that differ from the defaults).

    The model's settings, the context among them, which decides what is refused (room.py): a
    profile's small seats refuse here what the virtual replay refuses. How text is counted stays
    the practice server's (4 characters a token), which synth.py writes the prompts for."""
    return command_line(s, MODEL)
