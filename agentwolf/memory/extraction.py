"""Background extraction (`memory.extract`): what a session's turns say about its user, as candidate
memories, sifted before they are kept. The model proposes; this module decides what is kept:

- a candidate is dropped as a *template echo* when, compared as lowercase words (punctuation and
  spacing ignored), it contains or is contained in a line (of 20 characters or more) of the agent's
  instructions or tool descriptions, or a line said word for word in two or more of the session's
  messages (a repeated greeting, a signature);
- it is dropped as a *duplicate* when its text equals a current memory's (same normalisation);
- the rest carry evidence: digests of the messages they were drawn from."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable

from agentwolf.workflows.memory_tools import KINDS

MIN_ECHO = 20
"""Template lines shorter than this are not compared (a short line echoes by chance)."""
INSTRUCTIONS = (
    "You read a conversation between a user and an assistant and list durable facts about the user "
    "worth remembering in later conversations (preferences, circumstances, goals), only what the user "
    "said or clearly implied. Answer with JSON only: "
    '{"memories": [{"text": "...", "kind": "user", "about": "...", "evidence": [1, 2]}]} where '
    "`evidence` lists the numbers of the messages the fact comes from. No facts: "
    '{"memories": []}.'
)


def normal(text: str) -> str:
    """`text` as lowercase words, punctuation and spacing ignored."""
    return " ".join(re.findall(r"\w+", text.casefold()))


def message_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def template_lines(templates: Iterable[str], messages: list[str]) -> list[str]:
    """The lines a candidate must not echo: long lines of the templates and lines repeated across
    two or more messages."""
    lines = [normal(line) for t in templates for line in t.splitlines()]
    repeated = Counter(n for m in messages for n in {normal(line) for line in m.splitlines()})
    lines += [line for line, count in repeated.items() if count >= 2]
    return [line for line in dict.fromkeys(lines) if len(line) >= MIN_ECHO]


def echoes(text: str, lines: list[str]) -> bool:
    candidate = normal(text)
    return any(candidate in line or line in candidate for line in lines)


def source(messages: list[str]) -> str:
    """The conversation as the extractor reads it: numbered messages."""
    return "\n\n".join(f"[{n}] {m}" for n, m in enumerate(messages, 1))


def candidates(answer: str) -> list[dict[str, object]]:
    """The model's candidates, well-formed ones only (an answer that is not the JSON asked: none)."""
    match = re.search(r"\{.*\}", answer, re.DOTALL)
    try:
        found = json.loads(match.group(0))["memories"] if match else []
    except (ValueError, KeyError, TypeError):
        return []
    return [
        c
        for c in found
        if isinstance(found, list)
        if isinstance(c, dict) and isinstance(c.get("text"), str) and c["text"].strip()
    ]


def kind_of(candidate: dict[str, object]) -> str:
    kind = candidate.get("kind")
    return kind if isinstance(kind, str) and kind in KINDS else "user"


def evidence(candidate: dict[str, object], messages: list[str]) -> list[str]:
    cited = candidate.get("evidence")
    numbers = (
        [n for n in cited if isinstance(n, int) and 1 <= n <= len(messages)]
        if isinstance(cited, list)
        else []
    )
    return [message_digest(messages[n - 1]) for n in numbers]
