"""Tell a provider's "request too long for the context window" from its other 400s, and read the
window it names. OpenAI answers code `context_length_exceeded`; others only say it in words."""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentwolf.workflows.compaction import CONTEXT_LENGTH_EXCEEDED

__all__ = ["CONTEXT_LENGTH_EXCEEDED", "Overflow", "context_overflow"]

_CODES = {"context_length_exceeded", "string_above_max_length", "request_too_large"}
_WORDS = re.compile(
    r"context[ _-](length|window|size)|maximum context|prompt is too long|too many (input )?tokens|"
    r"input token count .* exceeds|exceeds the (available )?context",
    re.IGNORECASE,
)
_WINDOW = (
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),  # OpenAI, vLLM
    re.compile(r"\d+ tokens > (\d+) maximum", re.IGNORECASE),  # Anthropic
    re.compile(r"maximum number of tokens allowed \((\d+)\)", re.IGNORECASE),  # Gemini
    re.compile(r"context (?:window|size|length) (?:of|is) (\d+)", re.IGNORECASE),
)


@dataclass(frozen=True)
class Overflow:
    window: int | None
    """The window the provider named, in tokens, if it did."""


def context_overflow(body: object, code: str | None = None) -> Overflow | None:
    """An `Overflow` when the error body (or the provider's error code) says the request was too
    long for the model, else None."""
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict):
        code = code or error.get("code")
        message = str(error.get("message", ""))
    else:
        message = str(error or "")
    if code not in _CODES and not _WORDS.search(message):
        return None
    for pattern in _WINDOW:
        if found := pattern.search(message):
            return Overflow(int(found[1]))
    return Overflow(None)
