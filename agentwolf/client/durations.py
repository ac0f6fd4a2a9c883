"""The one way durations are written on the command line and in the Python client (`payloads gc
--older-than`, `schedule --every/--jitter`, `usage --since`): `90s`, `15m`, `1h30m`, `7d`, `2w`,
`250ms`, or ISO 8601 (`PT8H`, as the manifest's durations), parsed by pydantic."""

from __future__ import annotations

import re
from datetime import timedelta

_PART = re.compile(r"(\d+)(ms|s|m|h|d|w)")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
FORMS = "e.g. 7d, 12h, 30m, 1h30m, 2w, 250ms or ISO 8601 (PT8H)"


def parse_duration(text: str, what: str | None = None) -> timedelta:
    """A positive duration, or a ValueError naming `what` (an option: `--older-than`) and the forms."""
    text = text.strip()
    invalid = f"invalid duration {text!r}" + (f" for {what}" if what else "")
    parts = _PART.findall(text)
    if parts and "".join(n + u for n, u in parts) == text:
        duration = timedelta(seconds=sum(int(n) * _SECONDS[u] for n, u in parts))
    elif text.startswith("P"):
        from pydantic import TypeAdapter, ValidationError

        try:
            duration = TypeAdapter(timedelta).validate_python(text)
        except ValidationError:
            raise ValueError(f"{invalid}: {FORMS}") from None
    else:
        raise ValueError(f"{invalid}: {FORMS}")
    if duration <= timedelta(0):
        raise ValueError(f"{invalid}: it must be longer than zero")
    return duration
