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
"""

from __future__ import annotations

import random

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


def fresh(chars: int, rng: random.Random) -> list[dict]:
    """A chat request of about `chars` characters that shares no start with any other."""
    head = tag(rng)
    return [{"role": "user", "content": f"{head} {prose(max(0, chars - len(head) - 1), rng)}"}]


def opening(chars: int, rng: random.Random) -> str:
    """An opening of about `chars` characters, to be sent again with different questions."""
    head = tag(rng)
    return f"{head} {prose(max(0, chars - len(head) - 1), rng)}"


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
