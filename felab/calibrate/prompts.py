"""The probe text: prompts of a chosen length that share nothing with each other, or share an opening.

A probe must control two things the server sees: how long the prompt is, and what
it shares with earlier prompts (the prefix cache reuses only a shared start).

- `fresh(chars, rng)` starts with a random tag, so no earlier prompt shares more
  than the chat template's first few tokens with it: all of it is prefilled.
- `opening(chars, rng)` is such a prompt, meant to be sent again with different
  questions after it (`with_question`).

The text is plain English prose about a support desk (the lesson's kind of prompt),
sentences drawn at random from a fixed list. Its length is set in characters; how
many tokens that makes is the server's business, and the probes read it back from
`usage.prompt_tokens`.

How many characters make a token depends on the text: prose, code, numbers and another
script each run at their own rate under one tokenizer. So the text that fits or checks
how an engine counts tokens is varied (`varied(kind, chars, rng)`, one of KINDS), and
comes from one of two pools: calibrate's (`CALIBRATE`) and one unlike it (`HELD_OUT`:
another subject, another programming language, other numbers, another script), which
`--check` uses for its held-out work (`mixed`), so that a count fitted on calibrate's own
text is tried on text it has never seen.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SENTENCES = (
    "The support desk answers billing questions within one working day.",
    "Refunds above five hundred dollars need a manager's approval before they are paid.",
    "An outage that reaches more than five percent of users is treated as a severity two incident.",
    "Never share an internal ticket number with a customer, even when they ask for it twice.",
    "Keep every answer under eighty words and end it with the next step the customer should take.",
    "Search past tickets before you escalate: most questions have been answered before.",
    "The status page lists every region with its current incidents and their expected end.",
    "Invoices are issued on the first day of each month and can be downloaded as PDF files.",
    "A declined card at renewal gives the customer seven days of grace before the service stops.",
    "Single sign-on problems usually come from a certificate that expired on the customer's side.",
    "Page the engineer on call when latency doubles for more than ten minutes in any region.",
    "Write the customer's name as they wrote it, and never guess at a title.",
    "API keys can be rotated from the settings page; the old key keeps working for one hour.",
    "Storage is billed by the gigabyte-month, rounded up to the next whole gigabyte.",
    "When two policies disagree, the stricter one applies until a manager decides otherwise.",
    "Quote the relevant line of the policy, then explain it in plain words.",
    "Customers on the free plan get community support only, with no guaranteed answer time.",
    "Data is kept for thirty days after an account is closed, then deleted for good.",
    "Every change to a production database needs a second person to review it first.",
    "If a question is outside these rules, say so and offer to find someone who knows.",
)

QUESTIONS = (
    "A customer was billed twice this month. What should I do?",
    "Is the eu-west region having an outage right now?",
    "How does a customer rotate an API key?",
    "Can I approve a refund of nine hundred dollars?",
    "When does an incident count as severity two?",
    "May I tell the customer our internal ticket number?",
    "Which tool finds old tickets about single sign-on?",
    "Latency doubled at nine o'clock. Whom do I page?",
    "The customer wants their invoice for March.",
    "How long may my answer be?",
    "Their card was declined at renewal and they launch tomorrow.",
    "Give me the refund policy in one sentence.",
)


def prose(chars: int, rng: random.Random) -> str:
    """About `chars` characters of sentences drawn at random, cut at a word boundary."""
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = rng.choice(SENTENCES)
        out.append(sentence)
        size += len(sentence) + 1
    text = " ".join(out)[:chars]
    return text.rsplit(" ", 1)[0] if " " in text[-20:] else text


def tag(rng: random.Random) -> str:
    """A random start that no other prompt shares (the first token already differs)."""
    return f"Case {rng.randrange(16**8):08x}."


def fresh(chars: int, rng: random.Random, held_out: bool = False) -> list[dict]:
    """A chat request of about `chars` characters that shares no start with any other
    (`held_out`: of text unlike calibrate's, `mixed`)."""
    return [{"role": "user", "content": opening(chars, rng, held_out)}]


def opening(chars: int, rng: random.Random, held_out: bool = False) -> str:
    """An opening of about `chars` characters, to be sent again with different questions
    (`held_out`: of text unlike calibrate's, `mixed`)."""
    head = tag(rng)
    body = mixed if held_out else prose
    return f"{head} {body(max(0, chars - len(head) - 1), rng)}"


def with_question(opening_text: str, question: str, first: bool = True) -> list[dict]:
    """The opening and a question after it (`first`), or the question first, then the opening."""
    if first:
        return [{"role": "system", "content": opening_text}, {"role": "user", "content": question}]
    return [
        {"role": "system", "content": f"{question}\n\n{opening_text}"},
        {"role": "user", "content": question},
    ]


def chars_of(messages: list[dict]) -> int:
    """Characters of the messages' text as the practice server counts them (its plain template)."""
    return sum(len(m["role"]) + 6 + len(m["content"]) for m in messages) + len("<|assistant|>\n")


def renewed(messages: list[dict], rng: random.Random, keep_opening: bool = False) -> list[dict]:
    """The same request made new again, for a reply that came back with no text: a new tag at the
    start of its first message (a cold prompt stays cold: nothing of the failed one is reused),
    or, with `keep_opening`, of its last (an opening sent again keeps what the server cached of
    it, and the question after it is new). The length moves by a tag's few characters."""
    i = len(messages) - 1 if keep_opening else 0
    out = [dict(m) for m in messages]
    out[i]["content"] = f"{tag(rng)} {out[i]['content']}"
    return out


# ── Varied text: prose, code, numbers, another script; calibrate's pool and one unlike it ──

KINDS = ("prose", "code", "numbers", "script")


@dataclass(frozen=True)
class Pool:
    """The makings of varied text: sentences, lines of code, a shape of numbers, words of a script."""

    sentences: tuple[str, ...]
    code: tuple[str, ...]
    """Lines with {a} {b} (names) and {n} (a number) to fill."""
    names: tuple[str, ...]
    numbers: str
    """A row of numbers, with {i} {f} {d} {x} to fill: whole, decimal, date, hex."""
    words: tuple[str, ...]


CALIBRATE = Pool(
    SENTENCES,
    (
        "def {a}({b}):\n",
        "    return {b} * {n} + len({a})\n",
        "    if {b} is None:\n        raise ValueError('{a} needs {b}')\n",
        "{a} = [{b} for {b} in range({n}) if {b} % 3]\n",
        "for {a}, {b} in enumerate(items):\n    total += {b}.price\n",
        "class {a}:\n    {b}: int = {n}\n",
    ),
    ("ticket", "refund", "invoice", "region", "customer", "latency", "queue", "policy"),
    "{i}\t{f}\t{d}\n",
    (
        "служба", "поддержки", "отвечает", "на", "вопросы", "об", "оплате", "в", "течение", "дня",
        "клиент", "получил", "счёт", "дважды", "проверьте", "политику", "возврата", "средств",
    ),
)  # fmt: skip

HELD_OUT = Pool(
    (
        "Preheat the oven to two hundred degrees and grease a shallow tin with butter.",
        "The ferry leaves the harbour at dawn, and the last one returns before the lighthouse turns on.",
        "Knead the dough for ten minutes, until it springs back when pressed with a thumb.",
        "Pack a spare battery, a paper map and enough water for the longer trail.",
        "The museum is closed on Mondays; guided tours start every hour from the east wing.",
        "Whisk the eggs with a pinch of salt, then fold them gently into the flour.",
        "Trains to the coast are crowded on Fridays, so book a seat the evening before.",
        "Store the jars somewhere cool and dark, and eat the jam within a month of opening.",
    ),
    (
        "const {a} = await fetch(`/api/${{{b}}}`);\n",
        "SELECT {a}, COUNT(*) FROM {b} WHERE id > {n} GROUP BY {a};\n",
        "function {a}({b}) {{ return {b}.map((x) => x * {n}); }}\n",
        "if ({a} !== null && {b}.length >= {n}) {{ {a}.push({b}); }}\n",
        "UPDATE {a} SET {b} = {b} + {n} WHERE active = true;\n",
    ),
    ("oven", "ferryTimes", "dough_weight", "trailMap", "museum", "eggs", "seats", "jarCount"),
    "#{x} {d} ${f} x{i}; ",
    (
        "το", "πλοίο", "φεύγει", "από", "το", "λιμάνι", "την", "αυγή", "και", "επιστρέφει",
        "πριν", "ανάψει", "ο", "φάρος", "ζύμωσε", "τη", "ζύμη", "για", "δέκα", "λεπτά",
    ),
)  # fmt: skip


def varied(kind: str, chars: int, rng: random.Random, pool: Pool = CALIBRATE) -> str:
    """About `chars` characters of one kind of text (KINDS) from `pool`, drawn at random."""
    out: list[str] = []
    size = 0
    while size < chars:
        piece = _piece(kind, rng, pool)
        out.append(piece)
        size += len(piece)
    return "".join(out)[:chars]


def _piece(kind: str, rng: random.Random, pool: Pool) -> str:
    if kind == "prose":
        return rng.choice(pool.sentences) + " "
    if kind == "code":
        a, b = rng.sample(pool.names, 2)
        return rng.choice(pool.code).format(a=a, b=b, n=rng.randrange(2, 5000))
    if kind == "numbers":
        date = f"{rng.randrange(1990, 2030)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
        whole, decimal = rng.randrange(10**7), f"{rng.uniform(-1e4, 1e4):.3f}"
        return pool.numbers.format(i=whole, f=decimal, d=date, x=f"{rng.randrange(16**6):06x}")
    if kind == "script":
        return " ".join(rng.choices(pool.words, k=8)) + ". "
    raise ValueError(f"no such kind of text: {kind} (one of {', '.join(KINDS)})")


KIND_SHARE = {"prose": 0.55, "code": 0.25, "numbers": 0.12, "script": 0.08}
"""How much of a prompt is of each kind, in characters: mostly prose, then code, numbers, a little
of another script (the mix `mixed` draws, and the one ratio a character model fits: counting.py)."""


def mixed(chars: int, rng: random.Random, pool: Pool = HELD_OUT) -> str:
    """About `chars` characters of pieces of 150 to 400 characters, each of a kind drawn by
    KIND_SHARE, from `pool` (--check's held-out text: HELD_OUT)."""
    out: list[str] = []
    size = 0
    kinds, shares = list(KIND_SHARE), list(KIND_SHARE.values())
    while size < chars:
        piece = varied(rng.choices(kinds, shares)[0], rng.randrange(150, 400), rng, pool)
        out.append(piece)
        size += len(piece) + 1
    return "\n".join(out)[:chars]
