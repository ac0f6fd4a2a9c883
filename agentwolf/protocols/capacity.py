"""What one `wolf serve` process takes on, so that no client can hold it.

- Connections: a request's headers must arrive within `header_timeout` of the connection opening or
  of its previous response (uvicorn has no such deadline: a half-sent request held its connection
  for ever), and past `max_connections` a new connection is answered 503 and closed.
- Requests: at most `max_requests` at once, counted in shares by who sends them (shares.py):
  `max_requests_per_key` for one API key (its bearer calls and its console pages together) or one
  webhook whose signature checked, `max_anonymous` for everything without a known key together;
  probes and the login page count in none. A stream is a request that lasts, so this is also how
  many streams one key may hold open.
- Sends: a response whose client stops reading is ended after `send_timeout` (an SSE stream would
  otherwise park its generator, and everything it holds, for as long as the TCP connection lives).

Anything refused is answered at once with Retry-After: 429 when its share is full, 503 when the
process has; never a hang. A listed web origin's page gets those answers with its CORS headers, so
its script reads the Retry-After instead of a failed fetch.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentwolf.protocols.cors import CrossOrigin

log = logging.getLogger(__name__)

RETRY_AFTER = "2"
"""Seconds a refused client is asked to wait."""


@dataclass(frozen=True)
class Capacity:
    header_timeout: float = 10.0
    max_connections: int = 1024
    max_requests: int = 512
    max_requests_per_key: int = 32
    max_anonymous: int = 16
    """Requests without a known key under way at once, all together (webhooks before their
    signature checks included): who holds them open holds only this share."""
    send_timeout: float = 30.0


class Refused(Exception):
    """A request this process does not take on now: `status` (429 or 503) with Retry-After."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message

    def response(self) -> JSONResponse:
        """In OpenAI's error shape, which its SDKs read (and retry after Retry-After)."""
        kind = "rate_limit_exceeded" if self.status == 429 else "server_busy"
        body = {"error": {"message": self.message, "type": kind, "code": kind, "param": None}}
        return JSONResponse(body, status_code=self.status, headers={"Retry-After": RETRY_AFTER})


class ClientStalled(Exception):
    """The client did not take a response's next bytes within the send timeout."""


@dataclass(frozen=True)
class Share:
    """Requests counted together (one key's, one hook's, or all anonymous ones) and how many of them
    may be under way at once."""

    name: str
    cap: int
    whose: str
    """Who is refused, as the refusal says it: "this API key"."""


PLACE = "agentwolf.admission"
"""Where Limited leaves a request's `Place` in its scope's state (hooks.py moves it)."""


@dataclass
class Admission:
    """Counts the requests under way, in total and per share."""

    limits: Capacity
    total: int = 0
    by_share: Counter[str] = field(default_factory=Counter)

    @property
    def anonymous(self) -> Share:
        return Share("anonymous", self.limits.max_anonymous, "anonymous traffic")

    def share(self, name: str, whose: str = "this API key") -> Share:
        """The share of a key (by its digest) or of anything else named `name` (a hook: `hook:NAME`)."""
        return Share(name, self.limits.max_requests_per_key, whose)

    def enter(self, share: Share) -> Place:
        """Take a place for a request in `share` (raises Refused)."""
        self._check(share)
        if self.total >= self.limits.max_requests:
            raise Refused(503, "the server is at its request limit; retry shortly")
        self.total += 1
        self.by_share[share.name] += 1
        return Place(self, share)

    def _check(self, share: Share) -> None:
        if self.by_share[share.name] >= share.cap:
            raise Refused(429, f"{share.whose} has {share.cap} requests or streams open; retry later")

    def _leave(self, share: Share) -> None:
        self.by_share[share.name] -= 1
        if not self.by_share[share.name]:
            del self.by_share[share.name]


@dataclass
class Place:
    """One admitted request's place: given back once (`release`), or moved to another share once the
    request proves who it is (`move`)."""

    admission: Admission
    share: Share
    released: bool = False

    def move(self, share: Share) -> None:
        """Count the request in `share` from now (raises Refused, keeping this place, when it is full)."""
        if share.name == self.share.name or self.released:
            return
        self.admission._check(share)
        self.admission._leave(self.share)
        self.admission.by_share[share.name] += 1
        self.share = share

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.admission.total -= 1
            self.admission._leave(self.share)


def place_of(scope: Scope) -> Place | None:
    """The request's place, when Limited admitted it (None: the app runs without limits)."""
    place: Place | None = scope.get("state", {}).get(PLACE)
    return place


ShareOf = Callable[[Admission, Scope], Share | None]
"""Which share a request counts in (None: none, for requests that cannot be held open)."""


class Limited:
    """The app within the request limits and the send timeout (outermost: it counts each request
    from its start to its response's end, in the share `share_of` names: who the request is)."""

    def __init__(
        self, app: ASGIApp, limits: Capacity, share_of: ShareOf, cors_origins: Collection[str] = ()
    ) -> None:
        self.app, self.limits, self.admission = app, limits, Admission(limits)
        self.share_of, self.cors_origins = share_of, cors_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        share = self.share_of(self.admission, scope)
        place = None
        if share is not None:
            try:
                place = self.admission.enter(share)
            except Refused as refused:
                log.info("answering %d to %s %s: %s", refused.status, scope["method"], scope["path"], refused)
                answer: ASGIApp = refused.response()
                if self.cors_origins:
                    answer = CrossOrigin(answer, self.cors_origins)
                await answer(scope, receive, send)
                return
            scope.setdefault("state", {})[PLACE] = place
        try:
            await self.app(scope, receive, timed_send(send, self.limits.send_timeout))
        except* ClientStalled as stalled:  # uvicorn closes a connection whose response did not complete
            log.info("ending %s %s: %s", scope["method"], scope["path"], stalled.exceptions[0])
        finally:
            if place is not None:
                place.release()


def timed_send(send: Send, timeout: float) -> Send:
    """`send`, ended by ClientStalled when the client does not take the bytes in time."""

    async def timed(message: Message) -> None:
        try:
            async with asyncio.timeout(timeout):
                await send(message)
        except TimeoutError:
            raise ClientStalled(f"the client took no bytes for {timeout:g} s") from None

    return timed


def protocol(limits: Capacity) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a header deadline and a connection cap (`uvicorn.Config(http=...)`)."""

    class Guarded(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                transport.write(
                    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: " + RETRY_AFTER.encode() + b"\r\n"
                    b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                )
                transport.close()
                return
            self._arm()

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a request's headers arrived
                self._disarm()

        def on_response_complete(self) -> None:
            self._arm()  # the next request's headers, from now (a pipelined one disarms it at once)
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(limits.header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return Guarded
