"""What a provider's answer says about its limits: the rate-limit headers of every response (a
response hook on the provider SDK's HTTP client, `listen`, gathers them for the request `QuotaModel`
is sending) read as learnt limits, a window, and how long a 429 says to wait."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from datetime import timedelta
from typing import Any

from agentwolf.workflows.quotas import Learned

HEARD: ContextVar[list[Mapping[str, str]] | None] = ContextVar("wolf_quota_heard", default=None)
"""The headers of the responses to the request `QuotaModel` is sending (set around the call)."""


async def heard(response: Any) -> None:
    """A response hook on the provider SDK's HTTP client (shared by several models, perhaps): the
    headers go to the request being sent in this task, if `QuotaModel` sends it."""
    if (heard := HEARD.get()) is not None:
        heard.append(response.headers)


def listen(client: Any) -> None:
    """Hook `heard` on the SDK's HTTP client (OpenAI's and Anthropic's SDKs keep it as `_client`,
    an httpx client): the response to a successful request says the limits too."""
    hooks = getattr(getattr(client, "_client", None), "event_hooks", None)
    responses = hooks.get("response") if isinstance(hooks, dict) else None
    if isinstance(responses, list) and heard not in responses:
        responses.append(heard)


def reset_seconds(headers: Mapping[str, str]) -> float | None:
    """`x-ratelimit-reset-requests` / `-tokens` (`1s`, `6m0s`, `250ms`): the longest."""
    found = [
        _duration(headers[k])
        for k in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
        if k in headers
    ]
    values = [v for v in found if v is not None]
    return max(values) if values else None


def _duration(text: str) -> float | None:
    total, number = 0.0, ""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in units or not number:
            return None
        total += float(number) * units[unit]
        number = ""
        i += len(unit)
    if number:
        total += float(number)
    return total


def learned(headers: Mapping[str, str]) -> Learned | None:
    """Limits from `x-ratelimit-limit-*` headers (OpenAI's tokens limit counts input; `-1` and other
    nonsense, as Azure sends, is ignored), and the window from `RateLimit-Policy` (the IETF draft's
    `20;w=60` or `"default";q=20;w=60`: its first policy) when a provider states one."""

    def number(name: str) -> int | None:
        try:
            value = int(headers.get(name, ""))
        except ValueError:
            return None
        return value if value > 0 else None

    found = Learned(
        rpm=number("x-ratelimit-limit-requests") or number("anthropic-ratelimit-requests-limit"),
        input_tpm=number("x-ratelimit-limit-tokens") or number("anthropic-ratelimit-input-tokens-limit"),
        output_tpm=number("anthropic-ratelimit-output-tokens-limit"),
        window=_policy_window(headers.get("ratelimit-policy", "")),
    )
    return found if found != Learned() else None


def _policy_window(policy: str) -> timedelta | None:
    for param in policy.split(",")[0].split(";")[1:]:
        name, _, seconds = param.strip().partition("=")
        if name == "w" and seconds.isdigit() and int(seconds) > 0:
            return timedelta(seconds=int(seconds))
    return None
