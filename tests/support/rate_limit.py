"""A provider's rate limits for the scripted OpenAI server: sliding windows of requests and input
tokens per API key, as OpenAI enforces them. Every answer carries `x-ratelimit-*` headers (and,
when a request limit is set, the window as `RateLimit-Policy: <rpm>;w=<seconds>`); a request over a
limit is refused with 429 and a `Retry-After` saying when the window frees room; every request is
logged with its arrival time and verdict, and every refusal opens a cooldown that the tests check
nobody sends into."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Logged:
    at: float
    key: str
    input_tokens: int
    refused: bool
    tag: str = ""


@dataclass
class RateLimit:
    rpm: int | None = None
    input_tpm: int | None = None
    window: float = 60.0
    tag: Callable[[dict[str, Any]], str] | None = None
    """Labels each logged request (a bench's tenant, read from the prompt)."""
    blocked_until: float = 0.0
    """Refuse everything until this `time.time()` (a provider's outage of its own)."""
    blocked_for: float = 0.0
    """Refuse everything for this many seconds from the first request (`blocked_until` then)."""
    log: list[Logged] = field(default_factory=list)
    cooldowns: list[tuple[float, float]] = field(default_factory=list)
    """(refused at, retry after): the span the refusal told clients to stay away."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, body: dict[str, Any], key: str) -> tuple[int, dict[str, str], bool]:
        """The request's input tokens (a token per four bytes of its JSON), the answer's rate-limit
        headers, and whether it is refused."""
        tokens = len(json.dumps(body)) // 4 + 1
        with self._lock:
            now = time.time()
            if self.blocked_for and not self.log:
                self.blocked_until = now + self.blocked_for
            kept = [e for e in self.log if not e.refused and e.key == key and e.at > now - self.window]
            requests, used = len(kept), sum(e.input_tokens for e in kept)
            wait = 0.0
            if now < self.blocked_until:
                wait = self.blocked_until - now
            elif self.rpm is not None and requests + 1 > self.rpm:
                wait = kept[0].at + self.window - now
            elif self.input_tpm is not None and used and used + tokens > self.input_tpm:
                freed, i = used, 0
                while freed + tokens > self.input_tpm and i < len(kept):
                    freed -= kept[i].input_tokens
                    i += 1
                wait = kept[i - 1].at + self.window - now
            refused = wait > 0
            self.log.append(Logged(now, key, tokens, refused, self.tag(body) if self.tag else ""))
            headers = {
                "x-ratelimit-limit-requests": str(self.rpm or 0),
                "x-ratelimit-remaining-requests": str(max(0, (self.rpm or 0) - requests - (not refused))),
                "x-ratelimit-limit-tokens": str(self.input_tpm or 0),
                "x-ratelimit-remaining-tokens": str(max(0, (self.input_tpm or 0) - used)),
            }
            if self.rpm is not None:
                headers["ratelimit-policy"] = f"{self.rpm};w={math.ceil(self.window)}"
            if not refused:
                return tokens, headers, False
            retry_after = max(1, math.ceil(wait))
            self.cooldowns.append((now, retry_after))
            return tokens, {**headers, "retry-after": str(retry_after)}, True

    def accepted(self) -> list[Logged]:
        return [e for e in self.log if not e.refused]

    def refusals(self) -> list[Logged]:
        return [e for e in self.log if e.refused]

    def sent_in_cooldowns(self, slack: float = 0.0) -> list[Logged]:
        """Requests that arrived inside an announced cooldown (after its refusal by more than `slack`
        seconds: requests already on the wire when the 429 left are not the clients' doing)."""
        return [e for e in self.log if any(at + slack < e.at < at + retry for at, retry in self.cooldowns)]
