"""Lesson 06: prefix caching, measured on an agent-shaped workload.

An agent sends the same long opening (its instructions, tools and policy) with
every request and changes only the question at the end. A server with a
prefix cache keeps the work it did on that opening and reads only what is
new, so the first token comes back many times sooner. That only works if the
opening really is first: one changing line above it (the time, say) makes
every request new from its first token on.

This script asks 12 different questions after the same ~3,000-token opening,
in one of two orders, and times each answer's first token:

    stable-first     [ opening ............................ ][ question ]   reusable
    variable-first   [ time + question ][ opening ......................]   nothing to reuse

Run it:

    python prefix_bench.py --target mock
    python prefix_bench.py --target mock --order variable-first
    python prefix_bench.py --target llamacpp
    python prefix_bench.py --target fireworks --usage      # paid, about $0.03
"""

from __future__ import annotations

import datetime as dt

try:  # the kit's library: in a Python without it, felab/no_kit.py says which Python has it
    from felab import resolve
except ModuleNotFoundError:
    import pathlib
    import runpy

    runpy.run_path(
        str(pathlib.Path(__file__).resolve().parents[2] / "felab" / "no_kit.py"), run_name="__main__"
    )

from felab import banner, client, lesson_parser, percentile, ratio, record, run, stream_once, table
from felab.prices import add_price_args, price_for
from felab.targets import cold_start_advice
from felab.usage import report_usage

# ── The workload: one fixed opening, twelve questions ─────────────────────────

TOOLS = {
    "search_tickets": "full-text search over past support tickets",
    "get_invoice": "look up one invoice by its id",
    "refund": "refund a charge, up to the agent's limit",
    "status_page": "read the current incident status for a region",
    "escalate": "page the engineer on call",
}
TOOL_LINES = "\n".join(
    f"- `{name}`: {what}. Takes a JSON object: id (string), limit (integer), filters (object)."
    for name, what in TOOLS.items()
)
RULES = (
    "Refunds above $500 need a manager's approval. An outage hitting over 5% of users is a SEV-2. "
    "Never share internal ticket ids. Answer in under 80 words. "
)
PREAMBLE = (
    "You are the support agent of Acme Cloud, Inc.\n\n"
    f"## Tools you may call\n{TOOL_LINES}\n\n"
    f"## Policy (read all of it)\n{RULES * 75}"
)

QUESTIONS = [
    "A customer was billed twice this month. What should I do?",
    "Is eu-west having an outage right now?",
    "How does a customer rotate an API key?",
    "A customer asks for a $900 refund. Can I approve it?",
    "When is an incident a SEV-2?",
    "May I tell the customer our internal ticket id?",
    "Which tool finds old tickets about single sign-on?",
    "Latency jumped at 09:00. Whom do I page?",
    "The customer wants their invoice for March.",
    "How long may my answer be?",
    "Their card was declined at renewal and they launch tomorrow.",
    "Give me the refund policy in one sentence.",
]

SESSION = "lesson-06-session"  # the same `user` on every paid call: session affinity


def messages(question: str, order: str) -> list[dict]:
    """The request's messages, with the opening first (good) or the time first (bad)."""
    if order == "stable-first":
        return [{"role": "system", "content": PREAMBLE}, {"role": "user", "content": question}]
    now = dt.datetime.now().isoformat(timespec="microseconds")  # different on every call
    return [
        {"role": "system", "content": f"Time of request: {now}. The user asks: {question}\n\n{PREAMBLE}"},
        {"role": "user", "content": question},
    ]


# ── The measurement ───────────────────────────────────────────────────────────


def main() -> None:
    parser = lesson_parser(__doc__)  # --target, --base-url, --model
    parser.add_argument(
        "--order",
        choices=["stable-first", "variable-first"],
        default="stable-first",
        help="where the part that changes goes (default: stable-first)",
    )
    parser.add_argument(
        "--usage",
        action="store_true",
        help="one more call, not streamed, that prints prompt_tokens and cached_tokens",
    )
    parser.add_argument("--quick", action="store_true", help="3 questions instead of 12 (for make smoke)")
    add_price_args(parser)  # --price-in, --price-cached: for the cost line under --usage
    args = parser.parse_args()

    target = resolve(args)
    banner(target)
    api = client(target)
    extra = {"user": SESSION} if target.is_paid else {}
    questions = QUESTIONS[:3] if args.quick else QUESTIONS
    print(f"opening ≈ {len(PREAMBLE) // 4:,} tokens (characters / 4) · order = {args.order}\n")

    calls = []
    for i, question in enumerate(questions, start=1):
        r = stream_once(api, target.model, messages(question, args.order), max_tokens=48, **extra)
        calls.append(
            {
                "ttft_ms": round(r.ttft_ms, 1),
                "prompt_tokens": r.prompt_tokens,
                "cached_tokens": r.cached_tokens,
            }
        )
        cached = "" if r.cached_tokens is None else f"  cached {r.cached_tokens:>5,} of {r.prompt_tokens:,}"
        label = ""
        if i == 1:  # warm: most of call 1 already cached, left behind by an earlier run
            first_warm = (r.cached_tokens or 0) > 0.5 * (r.prompt_tokens or 1)
            label = "" if r.cached_tokens is None else "(warm: already cached)" if first_warm else "(cold)"
        print(f"  call {i:2d}  TTFT {r.ttft_ms:7.0f} ms{cached}  {label}")

    # ── One row: call 1 against the middle of the rest ──
    ttft = [c["ttft_ms"] for c in calls]
    rest = calls[1:]
    prompt = sum(c["prompt_tokens"] or 0 for c in rest)
    known = all(c["cached_tokens"] is not None and c["prompt_tokens"] for c in rest)
    hit = ratio(sum(c["cached_tokens"] or 0 for c in rest), prompt) if known else None
    row = {
        "target": target.name,
        "order": args.order,
        "first_ms": ttft[0],
        "rest_p50_ms": percentile(ttft[1:], 50),
        "rest_p95_ms": percentile(ttft[1:], 95),
        "speedup_x": None if first_warm else ratio(ttft[0], percentile(ttft[1:], 50)),
        "cache_hit_pct": None if hit is None else 100 * hit,
    }
    print("\n" + table([row]))
    extra_fields = {"model": target.model, "warm_start": first_warm, "quick": args.quick, "calls": calls}
    record("06-prefix", {**row, **extra_fields})  # a --quick run is not the lesson's step (make numbers)

    if first_warm:
        print(
            f"\nnote: call 1 was not cold: {calls[0]['cached_tokens']:,} of its {calls[0]['prompt_tokens']:,}"
            f" prompt tokens were already cached by an earlier run, so no speed-up is shown."
            f" {cold_start_advice(target)}"
        )

    if args.usage:
        question = messages("One more question: what is our refund limit?", args.order)
        usage = report_usage(target, api, question, extra, price_for(target, args))
        record(
            "06-prefix-usage",
            {
                "target": target.name,
                "model": target.model,
                "order": args.order,
                "prompt_tokens": usage.prompt_tokens,
                "cached_tokens": usage.cached_tokens,
            },
        )


if __name__ == "__main__":
    run(main)
