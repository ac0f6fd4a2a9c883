"""Names said the way a person reads them: a list as `a, b` (never a Python repr), and "did you mean"
for a name close to a known one (difflib), so a typo in a manifest or on a command line is one
glance to fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import get_args

# Model families whose provider a bare name implies (`gpt-4o` -> `openai:gpt-4o`), for names
# pydantic-ai's list of known models does not hold.
_FAMILIES = {
    "gpt": "openai",
    "chatgpt": "openai",
    "o1": "openai",
    "o3": "openai",
    "o4": "openai",
    "claude": "anthropic",
    "gemini": "google-gla",
    "mistral": "mistral",
    "grok": "xai",
    "deepseek": "deepseek",
}


def listing(names: Iterable[str]) -> str:
    """`a, b, c` (sorted), or `none`."""
    return ", ".join(sorted(names)) or "none"


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """` (did you mean 'max_steps'?)` when `name` is close to one of `known`, else ``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def model_spec(name: str) -> str | None:
    """The `provider:model` spec a bare model name most likely means, if any."""

    from pydantic_ai.models import KnownModelName  # only on this error path: it is slow to import

    specs = get_args(KnownModelName.__value__)
    exact = [s for s in specs if s.partition(":")[2] == name]
    if exact:
        return min(exact, key=len)  # `anthropic:...` before `bedrock:global.anthropic...`
    family = name.lower().split("-", 1)[0]
    return f"{_FAMILIES[family]}:{name}" if family in _FAMILIES else None
