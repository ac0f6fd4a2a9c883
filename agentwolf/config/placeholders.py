"""`${VAR}` and `${VAR:-default}` placeholders, resolved on the worker only."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class MissingVariable(KeyError):
    def __str__(self) -> str:
        return f"environment variable {self.args[0]} is not set (referenced as ${{{self.args[0]}}})"


def resolve(value: str, env: Mapping[str, str] | None = None) -> str:
    """Substitute every placeholder in `value`; an unset variable without a default raises."""
    env = os.environ if env is None else env

    def sub(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise MissingVariable(name)

    return _PLACEHOLDER.sub(sub, value)


def substitute(value: str, choose: Callable[[str, str | None], str | None]) -> str:
    """`value` with each placeholder replaced by `choose(name, default)`; kept as written where that
    is None."""

    def sub(match: re.Match[str]) -> str:
        chosen = choose(match.group(1), match.group(2))
        return match.group(0) if chosen is None else chosen

    return _PLACEHOLDER.sub(sub, value)


def has_placeholder(value: str) -> bool:
    return _PLACEHOLDER.search(value) is not None


def names(value: str) -> list[str]:
    """The variables `value` references, in order."""
    return [match.group(1) for match in _PLACEHOLDER.finditer(value)]
