"""From a question to search terms, and the order of what the lexical index found: stop words
dropped (they match everything and rank nothing), then a boost for a record whose `about` names
what the question names (a person, a topic)."""

from __future__ import annotations

import hashlib
import re

from agentwolf.memory.store import Row

WORD = re.compile(r"[^\W_]+", re.UNICODE)
STOP = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most
    my myself no nor not now of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those
    through to too under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves
    """.split()  # noqa: SIM905 (a list literal of 150 words reads worse)
)
POOL = 50
"""Candidates taken from the index before boosting."""
ABOUT_BOOST = 0.5
"""Added, as a share of the best lexical score, when a record's `about` is named in the question."""


CONSONANTS = "bcdfghjklmnpqrstvwxz"


def ns_words(ns: str, text: str) -> str:
    """`text` as the stores' full-text indexes hold it: each word behind its namespace's prefix, so a
    search reads only that namespace's postings, not every tenant's (one shared index of a million
    rows read the whole postings of common words: p95 140 ms). The prefix is consonants only, so the
    stemmers, whose rules count vowel-consonant runs, stem each word as they would alone."""
    prefix = "".join(CONSONANTS[b % len(CONSONANTS)] for b in hashlib.sha256(ns.encode()).digest()[:9])
    return " ".join(prefix + word for word in WORD.findall(text.lower()))


def terms(query: str) -> list[str]:
    """The question's words without stop words (all of them when nothing else is left)."""
    words = list(dict.fromkeys(w.lower() for w in WORD.findall(query)))
    kept = [w for w in words if w not in STOP]
    return kept or words


def rank(rows: list[Row], query: str, k: int) -> list[Row]:
    """The best `k` of `rows` (lexical scores, higher is better) once the about-boost is added."""
    if not rows:
        return []
    named = set(terms(query))
    top = max(r.score for r in rows) or 1.0
    scored = []
    for order, row in enumerate(rows):
        about = {w.lower() for w in WORD.findall(row.about)}
        boost = ABOUT_BOOST * top if about and about <= named else 0.0
        scored.append((-(row.score + boost), order, row))
    scored.sort(key=lambda item: (item[0], item[1]))
    return [row for _, _, row in scored[:k]]
