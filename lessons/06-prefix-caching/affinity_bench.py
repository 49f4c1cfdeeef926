"""Lesson 06, part two: many replicas behind one address, and caches that expire.

A customer runs several identical copies (replicas) of the model behind one
address. Each replica keeps its own prefix cache and shares it with nobody. An
agent session resends its whole history every turn: the opening, then every
question, tool result and reply so far. Only the replica that served the last
turn holds that history. Sent at random, the next turn finds it 1 time in N;
with a session value (`user`), every turn goes to the same replica.

This script runs several agent sessions at once, each a few turns long, against
a practice server with 18 replicas, and compares:

    no session value     the load balancer picks a replica at random
    user = session id    affinity: each session sticks to one replica
    prefix-aware router  no session value, but the router sends each request to the
                         replica holding the longest cached prefix (--route prefix)

`--mode expiry` shows the other effect: caches expire when idle, so the first
turn after an idle spell is slow again.

    python affinity_bench.py
    python affinity_bench.py --replicas 4
    python affinity_bench.py --mode expiry
    python affinity_bench.py --target mock --base-url http://127.0.0.1:8765/v1   # a server you started
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import time

try:  # the kit's library: in a Python without it, felab/no_kit.py says which Python has it
    from felab import resolve
except ModuleNotFoundError:
    import pathlib
    import runpy

    runpy.run_path(
        str(pathlib.Path(__file__).resolve().parents[2] / "felab" / "no_kit.py"), run_name="__main__"
    )

from prefix_bench import PREAMBLE, QUESTIONS

from felab import (
    banner,
    client,
    lesson_parser,
    percentile,
    positive_int,
    ratio,
    record,
    run,
    stream_once,
    table,
)
from felab.guarded import get_text
from felab.mock_server.launch import practice_server
from felab.mock_server.metrics import read_page

# ── The workload: agent sessions whose history grows ─────────────────────────

TOOL_OUTPUT = "ticket {s}-{t}: customer reports the issue again; logs attached; status open. " * 12
REPLY = "I checked the ticket history and the policy. Here is what I would do next, step by step."
OPENING_TOKENS = len(PREAMBLE) // 4  # estimate (characters / 4); what a session sent after it is its history


def session(api, model: str, name: str, turns: int, user: bool, pause_before_last: float = 0.0) -> list[dict]:
    """One agent session: the opening, then turns that each add a question, a tool result and a reply."""
    history = [{"role": "system", "content": PREAMBLE}]
    calls, sent_before = [], 0
    for t in range(turns):
        if t == turns - 1 and pause_before_last:
            time.sleep(pause_before_last)  # the session goes idle
        question = QUESTIONS[t % len(QUESTIONS)]
        history.append({"role": "user", "content": f"[{name}] {question}\n{TOOL_OUTPUT.format(s=name, t=t)}"})
        extra = {"user": name} if user else {}
        r = stream_once(api, model, history, max_tokens=8, **extra)
        # sent_before: the previous turn's prompt. This prompt starts with all of it.
        calls.append(
            {
                "turn": t,
                "ttft_ms": r.ttft_ms,
                "prompt": r.prompt_tokens,
                "cached": r.cached_tokens,
                "sent_before": sent_before,
            }
        )
        history.append({"role": "assistant", "content": REPLY})
        sent_before = r.prompt_tokens or 0
    return calls


def run_sessions(target, label: str, sessions: int, turns: int, user: bool, pause: float = 0.0) -> list[dict]:
    """All sessions at once, one thread each; every call's figures."""
    api = client(target)
    names = [f"{label}-{s}" for s in range(sessions)]
    with cf.ThreadPoolExecutor(sessions) as pool:
        done = pool.map(lambda n: session(api, target.model, n, turns, user, pause), names)
        return [call for calls in done for call in calls]


def summary(label: str, calls: list[dict]) -> dict:
    """One row: cache hit rates and TTFT percentiles.

    hit_pct: cached / prompt tokens, all of them. history_hit_pct: of the history each turn
    resent (its previous prompt, after the opening), the share found in the cache.
    """
    prompt = sum(c["prompt"] or 0 for c in calls)
    cached = sum(c["cached"] or 0 for c in calls)
    history = sum(max(0, c["sent_before"] - OPENING_TOKENS) for c in calls)
    history_cached = sum(max(0, min(c["cached"] or 0, c["sent_before"]) - OPENING_TOKENS) for c in calls)
    known = all(c["cached"] is not None for c in calls)
    ttft = [c["ttft_ms"] for c in calls]
    return {
        "mode": label,
        "calls": len(calls),
        "hit_pct": 100 * ratio(cached, prompt) if known and prompt else None,
        "history_hit_pct": 100 * ratio(history_cached, history) if known and history else None,
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p95_ms": percentile(ttft, 95),
    }


def server_count(url: str, calls: list[dict]) -> str:
    """The server's own count next to what usage told the client.

    `read_page()` reads the server's /metrics with prometheus_client's parser (as a Prometheus
    scraper would) and adds each counter up over its replicas; the names are vLLM's. The page is
    read within the kit's limits (`get_text`: a size cap and a deadline), as every reply is.
    """
    m = read_page(get_text(f"{url.removesuffix('/v1')}/metrics"))
    hits, queries = m["vllm:prefix_cache_hits_total"], m["vllm:prefix_cache_queries_total"]
    cached, prompt = sum(c["cached"] for c in calls), sum(c["prompt"] for c in calls)
    return f"    /metrics: {hits:,.0f} of {queries:,.0f} prompt tokens hit · usage: {cached:,} of {prompt:,}"


# ── The measurement ──────────────────────────────────────────────────────────


def compared(mode: str, ttl: float, with_router: bool) -> tuple[list[tuple[str, list[str], bool]], float]:
    """The runs a mode compares, each (label, the practice server's flags, whether calls carry
    the session in `user`), and the idle pause before each session's last turn.

    affinity: the same sessions routed with and without a session value (and, on our own
    servers, by a prefix-aware router); expiry: an idle spell longer than the cache's TTL."""
    if mode == "expiry":
        return [("expiry", ["--route", "affinity", "--cache-ttl", str(ttl)], True)], ttl + 1.0
    modes = [
        ("no session value", ["--route", "affinity"], False),
        ("user = session id", ["--route", "affinity"], True),
    ]
    if with_router:
        modes.append(("prefix-aware router", ["--route", "prefix"], False))
    return modes, 0.0


def main() -> None:
    parser = lesson_parser(__doc__)  # --target, --base-url, --model
    parser.add_argument(
        "--mode",
        choices=["affinity", "expiry"],
        default="affinity",
        help="affinity: with and without a session value; expiry: an idle spell longer than the cache's "
        "time to live (default: affinity)",
    )
    parser.add_argument(
        "--replicas", type=int, default=18, help="replicas of the practice server (default: 18)"
    )
    parser.add_argument(
        "--sessions", type=positive_int, default=8, help="agent sessions at once (default: 8)"
    )
    parser.add_argument("--turns", type=positive_int, default=6, help="turns per session (default: 6)")
    parser.add_argument("--ttl", type=float, default=2.0, help="expiry mode: cache TTL, seconds (default: 2)")
    parser.add_argument("--quick", action="store_true", help="3 sessions of 3 turns (for make smoke)")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.turns = 3, 3
    own = args.target == "mock" and not args.base_url  # start our own practice servers, one per mode

    def server(*flags: str):
        """A fresh practice server with these flags, or the one given with --base-url, as it is."""
        if not own:
            return contextlib.nullcontext(args.base_url)
        return practice_server("--replicas", str(args.replicas), *flags)

    modes, pause = compared(args.mode, args.ttl, with_router=own and not args.quick)
    rows = []
    for label, flags, user in modes:
        with server(*flags) as url:
            args.base_url = url
            target = resolve(args)
            if not rows:
                banner(target)
                where = f"{args.replicas} replicas" if own else "the server as it was started"
                size = f"{args.sessions} sessions x {args.turns} turns"
                print(f"{size} · opening ≈ {OPENING_TOKENS:,} tokens · {where}\n")
            print(f"  running: {label} ...", flush=True)
            # Session names differ per mode, so no mode finds another's history in the cache.
            calls = run_sessions(target, label.split()[0], args.sessions, args.turns, user, pause)
            if own:
                print(server_count(url, calls))
        if args.mode == "affinity":
            rows.append(summary(label, [c for c in calls if c["turn"] > 0]))  # turn 1 is cold for everyone
        else:
            rows.append(summary("busy (turns 2 on)", [c for c in calls if 0 < c["turn"] < args.turns - 1]))
            rows.append(summary(f"after {pause:g} s idle", [c for c in calls if c["turn"] == args.turns - 1]))

    print("\n" + table(rows))
    for row in rows:
        record(
            "06-affinity",
            {**row, "target": target.name, "model": target.model, "replicas": args.replicas if own else None},
        )


if __name__ == "__main__":
    run(main)
