"""Cross-origin access to `wolf serve` for the web pages of listed origins (CORS), with Starlette's
CORSMiddleware.

It sits outside Guard (agentwolf/protocols/middleware.py), because a browser's preflight carries no key:
a listed origin's preflight is answered at once, and its real request then meets auth like any
other (a 401 carries the CORS headers, so the page can read why). A request from an origin not
listed, or from `null`, never reaches the middleware: it gets no `Access-Control-*` header at all,
and its preflight is answered by the app as any OPTIONS request is (401 without a key, a JSON 405
with `--no-auth`), which the browser reports as a failed fetch.

The origin list is the whole policy. A listed page may use any method and send any header (the
router answers methods it does not take, in JSON; the OpenAI and AG-UI browser clients send headers
of their own, such as `x-stainless-*`, that a fixed list would break on). No credentials mode:
callers send their key in `Authorization`, never as a cookie, so no ambient credential rides along
and `*` cannot hand a visitor's session to another site."""

from __future__ import annotations

from collections.abc import Collection

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from agentwolf.config.origins import ANY_ORIGIN

EXPOSED = ("Retry-After", "X-Wolf-Session", "X-Wolf-Response", "Mcp-Session-Id")
"""Response headers a page's script may read besides the safelisted ones: when to retry, which
session and response a request made (to continue or reattach a stream), the MCP session."""

MAX_AGE = 600
"""Seconds a browser may reuse a preflight's answer."""


class CrossOrigin:
    """Requests from the listed origins through CORSMiddleware; every other request untouched."""

    def __init__(self, app: ASGIApp, origins: Collection[str]) -> None:
        self.app, self.origins, self.any = app, frozenset(origins), ANY_ORIGIN in origins
        self.cors = CORSMiddleware(
            app,
            allow_origins=sorted(self.origins),
            allow_methods=["*"],
            allow_headers=["*"],
            allow_private_network=True,  # listing the origin is the operator's consent
            expose_headers=EXPOSED,
            max_age=MAX_AGE,
        )

    def allows(self, origin: str) -> bool:
        return origin != "null" and (self.any or origin in self.origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = Headers(scope=scope).get("origin") if scope["type"] == "http" else None
        if origin is not None and self.allows(origin):
            await self.cors(scope, receive, send)
        else:
            await self.app(scope, receive, send)
