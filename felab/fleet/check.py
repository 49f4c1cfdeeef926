"""`felab fleet check --router sglang`: the real router and the kit's modelled route, on one workload.

The same prompts, in the same order, go two ways:

    real   through sglang-router (cache_aware, its default thresholds) in front of N practice
           servers over real HTTP (the official openai client, legacy completions, so the text
           the router routes on is exactly the prompt), in waves: a wave's prompts are sent
           together, 50 ms apart, and all answered before the next wave; after each wave every
           worker's /metrics says which one took each prompt (its prefix-cache lookups grew by
           exactly that prompt's tokens) and how much it had cached
    model  through the practice server's booking core with N replicas and
           `--route sglang-cache-aware` (routes_sglang.py), a wave's prompts arriving 50 ms
           apart in virtual time, the wave's replies over before the next

and are compared: the worker chosen for each request (agreement_pct), each worker's
prefix-cache hit rate (hit_pct_real, hit_pct_model: hits / prompt tokens, as /metrics counts
them) and the load max/mean of the requests per worker (load_real, load_model).

The router's worker names are arbitrary: which worker it takes among tied ones is the first
in its own registry's order, not `--worker-urls`' (routes_sglang.py). The requests it sends
to one worker together are what the rule decides, so each model replica is matched to the real
worker it agrees with most (the best one-to-one matching) before the requests are compared.

Workloads: `lesson` (3 sessions, each its own ~2,000-word opening and 4 growing turns, a wave
per turn, and 2 questions a wave under one shared system prompt) and `trace` (the first
requests of the kit's Mooncake conversation trace, text from replay/synth.py, in waves of N).
"""

from __future__ import annotations

import itertools
import random
import socket
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import openai

from felab.errors import FelabError
from felab.fleet import up
from felab.mock_server.booking import Booking, PracticeModel, Prompt
from felab.mock_server.cache import prompt_keys
from felab.mock_server.config import Settings
from felab.mock_server.metrics import scrape
from felab.replay.trace import MOONCAKE

WORDS = [
    "cache",
    "prefix",
    "router",
    "worker",
    "token",
    "block",
    "session",
    "opening",
    "question",
    "answer",
    "replica",
    "latency",
    "queue",
    "prefill",
    "decode",
    "batch",
    "memory",
    "tree",
    "match",
    "load",
    "balance",
]


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


Wave = list[str]
"""Prompts sent together, each STAGGER_S after the one before: the router decides each while
the ones before it are in flight (their prefill takes longer than that)."""

STAGGER_S = 0.05
"""Sent at the very same moment, a wave's prompts reach the router in an order the threads'
scheduling decides, and with it which session lands where (the first one takes the router's
first idle worker): measured here, 60% agreement on the lesson workload. A fixed order, 50 ms
apart, is one the model can be given too."""


def lesson_workload(seed: int = 6) -> list[Wave]:
    """Lesson-shaped waves: three sessions with openings of their own, each turn of the three
    sent at once, their histories growing; then two questions under one shared system prompt."""
    rng = random.Random(seed)
    histories = [f"Session {s}: " + words(rng, 2000) for s in range(3)]
    shared = "You answer questions about serving LLMs. " + words(rng, 1500)
    waves = []
    for turn in range(4):
        for s in range(3):
            histories[s] += f"\nQ{turn}: " + words(rng, 30) + f"\nA{turn}: " + words(rng, 60)
        waves.append(list(histories))
        # (lengths that differ: each worker's /metrics then tells which question it took)
        waves.append(
            [shared + f"\nQuestion {q}: " + words(rng, 20 + 7 * q) for q in (2 * turn, 2 * turn + 1)]
        )
    return waves


def trace_workload(path: Path, limit: int, size: int) -> list[Wave]:
    """The first `limit` requests of a Mooncake-format trace, as text (replay/synth.py), in
    waves of `size` in the trace's order."""
    from felab.replay.synth import prompt_text
    from felab.replay.trace import block_tokens, read_trace

    block = block_tokens(path, limit)
    texts = [prompt_text(r, block) for r in read_trace(path, limit, progress=False)]
    return [texts[i : i + size] for i in range(0, len(texts), size)]


@dataclass
class Routed:
    """One run's result: the worker of each request, and per worker its prompt tokens and hits."""

    chosen: list[int]
    queries: list[int]
    hits: list[int]


def run_model(waves: Sequence[Wave], n: int) -> Routed:
    """The waves through the booking core with N replicas and --route sglang-cache-aware: a wave's
    prompts arrive STAGGER_S apart, and all its replies are over before the next wave arrives."""
    s = Settings(replicas=n, route="sglang-cache-aware")
    model = PracticeModel(s)
    now, chosen = 0.0, []
    for wave in waves:
        bookings: list[Booking] = []
        for i, text in enumerate(wave):
            tokens, keys = prompt_keys(text, s.chars_per_token, s.block_tokens)
            at = now + i * STAGGER_S
            for done in [b for b in bookings if b.reply_end <= at and b.rid in model.live]:
                model.finish(done)  # answered before this one arrives: no longer the router's load
            bookings.append(model.book(Prompt(tokens, keys), 1, at, at))
        chosen += [b.replica.index for b in bookings]
        now = max(b.reply_end for b in bookings) + 1.0
        for b in bookings:
            if b.rid in model.live:
                model.finish(b)
    stats = [r.stats for r in model.fleet.replicas]
    return Routed(chosen, [x.prompt_tokens for x in stats], [x.hits for x in stats])


def free_range(count: int) -> int:
    """A first port P with P..P+count-1 free on 127.0.0.1 (the fleet checks it again)."""
    for base in range(up.DEFAULT_PORT + 200, 60_000, 97):
        try:
            for port in range(base, base + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise FelabError("no free range of ports on 127.0.0.1 for the check's fleet.")


def attribute(tokens: Sequence[int], grew: Sequence[int]) -> list[int] | None:
    """Which worker took each request of a wave: the one assignment under which every worker's
    prompt-token counter grew by exactly the tokens of the requests it took (None: none, or more
    than one, fits)."""
    n = len(grew)
    fits = [
        pick
        for pick in itertools.product(range(n), repeat=len(tokens))
        if all(sum(t for t, w in zip(tokens, pick, strict=True) if w == i) == grew[i] for i in range(n))
    ]
    return list(fits[0]) if len(fits) == 1 else None


def run_real(waves: Sequence[Wave], n: int, router: str, say: Callable[[str], None]) -> Routed:
    """The waves through the real router in front of N practice servers, each wave's prompts sent
    at once (a thread each), each wave's replies over before the next."""
    p = up.plan(n, router, "cache_aware", None, free_range(n + 2))
    with up.stopped_by_signals():  # SIGTERM, SIGHUP: the fleet is stopped as on Ctrl+C
        fleet = up.start_fleet(p)
        try:
            return send_waves(waves, n, fleet, p, say)
        finally:
            up.stop_fleet(fleet)


def send_waves(
    waves: Sequence[Wave], n: int, fleet: up.Fleet, p: up.Plan, say: Callable[[str], None]
) -> Routed:
    """The waves through the fleet's router; which worker took each request, from /metrics."""
    name = p.router.binary if p.router else "the router"
    say(f"{name} up in {fleet.started_s:.1f} s; {sum(map(len, waves))} requests ...")
    api = openai.OpenAI(base_url=fleet.url, api_key="not-needed", max_retries=0, timeout=60)
    workers = [s.url + "/v1" for s in fleet.processes if s.role.startswith("worker")]

    def counters() -> list[tuple[float, float]]:
        pages = [scrape(w) for w in workers]
        return [
            (x.get("vllm:prefix_cache_queries_total", 0), x.get("vllm:prefix_cache_hits_total", 0))
            for x in pages
        ]

    def send(turn: tuple[int, str]) -> int:
        i, text = turn
        time.sleep(i * STAGGER_S)
        reply = api.completions.create(model=fleet.model, prompt=text, max_tokens=1)
        assert reply.usage is not None
        return reply.usage.prompt_tokens

    chosen: list[int] = []
    before = counters()
    with ThreadPoolExecutor(max_workers=max(len(w) for w in waves)) as pool:
        for wave in waves:
            tokens = list(pool.map(send, enumerate(wave)))
            after = counters()
            grew = [int(x[0] - y[0]) for x, y in zip(after, before, strict=True)]
            picked = attribute(tokens, grew)
            if picked is None:
                raise FelabError(
                    f"the workers' counters (prompt tokens {grew}) do not tell which took each request "
                    f"of {tokens} tokens: is another client using the check's fleet?"
                )
            chosen += picked
            before = after
    return Routed(chosen, [int(q) for q, _ in before], [int(h) for _, h in before])


def best_matching(model: Sequence[int], real: Sequence[int], n: int) -> list[int]:
    """`mapping[m]`: the real worker each model replica stands for, the one-to-one matching under
    which most requests agree (every permutation up to 7 workers; greedily beyond)."""
    together = Counter(zip(model, real, strict=True))
    if n <= 7:
        best = max(itertools.permutations(range(n)), key=lambda m: sum(together[(i, m[i])] for i in range(n)))
        return list(best)
    mapping, used = [-1] * n, set[int]()
    for (m, r), _ in together.most_common():
        if mapping[m] < 0 and r not in used:
            mapping[m], used = r, used | {r}
    rest = iter(sorted(set(range(n)) - used))
    return [x if x >= 0 else next(rest) for x in mapping]


def load(chosen: Sequence[int], n: int) -> float:
    counts = Counter(chosen)
    return max(counts.values()) / (len(chosen) / n)


def pct(part: float, whole: float) -> float | None:
    return None if not whole else round(100 * part / whole, 1)


def compare(workload: str, real: Routed, model: Routed, n: int) -> list[dict]:
    """One row per real worker (its model replica beside it), then the workload's own row."""
    mapping = best_matching(model.chosen, real.chosen, n)
    agree = sum(mapping[m] == r for m, r in zip(model.chosen, real.chosen, strict=True))
    replica_of = {r: m for m, r in enumerate(mapping)}
    rows = []
    for w in range(n):
        m = replica_of[w]
        rows.append(
            {
                "workload": workload,
                "worker": f"worker {w + 1} = replica {m}",
                "requests_real": real.chosen.count(w),
                "requests_model": model.chosen.count(m),
                "hit_pct_real": pct(real.hits[w], real.queries[w]),
                "hit_pct_model": pct(model.hits[m], model.queries[m]),
            }
        )
    rows.append(
        {
            "workload": workload,
            "worker": "all",
            "requests": len(real.chosen),
            "agreement_pct": pct(agree, len(real.chosen)),
            "hit_pct_real": pct(sum(real.hits), sum(real.queries)),
            "hit_pct_model": pct(sum(model.hits), sum(model.queries)),
            "load_real": round(load(real.chosen, n), 2),
            "load_model": round(load(model.chosen, n), 2),
        }
    )
    return rows


def check(
    router: str, n: int, workloads: Sequence[str], trace_limit: int, say: Callable[[str], None]
) -> list[dict]:
    """Every workload through both; the rows."""
    if router != "sglang":
        raise FelabError(
            f"no modelled route for --router {router}: the kit models SGLang's rule "
            "(--route sglang-cache-aware), so check it with --router sglang. vllm-router's cache_aware "
            "(it renders each prompt on a worker first) is not modelled yet."
        )
    rows = []
    for name in workloads:
        if name == "lesson":
            waves = lesson_workload()
        elif name == "trace":
            waves = trace_workload(MOONCAKE, trace_limit, n)
        else:
            raise FelabError(f"no workload `{name}`: --workload is lesson or trace.")
        say(f"workload {name}: {sum(map(len, waves))} prompts in {len(waves)} waves, {n} workers")
        rows += compare(name, run_real(waves, n, router, say), run_model(waves, n), n)
    return rows


def report(rows: list[dict]) -> str:
    """Per workload: the comparison in one row, then each worker beside its replica."""
    from felab.tables import table

    out = []
    for name in dict.fromkeys(r["workload"] for r in rows):
        workers = [
            {"worker": r["worker"], **{k: v for k, v in r.items() if k not in ("workload", "worker")}}
            for r in rows
            if r["workload"] == name and r["worker"] != "all"
        ]
        total = [
            {k: v for k, v in r.items() if k not in ("workload", "worker")}
            for r in rows
            if r["workload"] == name and r["worker"] == "all"
        ]
        out += [f"workload {name}:", table(total), "", table(workers), ""]
    out.append(
        "agreement_pct: requests sent to the same worker, each replica matched to the worker it agrees "
        "with most (the router breaks ties by its own worker order). docs/fleet.md says what to expect."
    )
    return "\n".join(out)
