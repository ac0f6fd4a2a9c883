"""What every HTTP request of `wolf serve` passes before a route: `Guard` (who calls: an API key's
principal, or the one tenant of `--no-auth` on loopback; the body limits) and `AccessLog` (one
record per request, refusals included)."""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import urlsplit

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentwolf.access import Principal
from agentwolf.protocols.served import ApiError, Served

access_log = logging.getLogger("agentwolf.protocols.http")
"""One INFO record per request (AccessLog)."""

UNGUARDED = frozenset({"/healthz", "/health", "/ready"})
"""Probes answered without a key: they say nothing about any tenant."""

MAX_BODY = 1 << 20
"""Request bodies over this many bytes are refused (413) before they are read whole."""
BODY_TIMEOUT = 10.0
"""Seconds a request body may take to arrive (a slowloris client gets 408, not a server coroutine)."""


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def loopback_only(request: Request) -> None:
    """Without API keys (`--no-auth`), only this machine's own clients: a web page the user visits
    can reach a loopback port too (a cross-site POST, or DNS rebinding a name onto 127.0.0.1), so a
    Host that is not loopback, or a browser's Origin from anywhere else, is refused."""
    host = urlsplit("//" + request.headers.get("host", "")).hostname
    origin = request.headers.get("origin")
    if host not in LOOPBACK_HOSTS or (origin is not None and urlsplit(origin).hostname not in LOOPBACK_HOSTS):
        raise ApiError(
            403, "without API keys this server answers only clients on this machine", "permission_error"
        )


def _mcp_user(principal: Principal) -> AuthenticatedUser:
    """Who calls, as the MCP SDK's session manager reads it (`scope["user"]`): an MCP session is
    bound to the key that opened it, and any other key gets "Session not found"."""
    token = AccessToken(token=principal.key, client_id=f"{principal.tenant}:{principal.key}", scopes=[])
    return AuthenticatedUser(token)


class Guard:
    """Authentication and the body limit, before any route runs (pure ASGI: streams pass through)."""

    def __init__(
        self, app: ASGIApp, served: Served, max_body: int = MAX_BODY, body_timeout: float = BODY_TIMEOUT
    ) -> None:
        self.app, self.served, self.max_body, self.body_timeout = app, served, max_body, body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNGUARDED:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        try:
            # Webhooks prove themselves by signature; the console signs in by cookie (console/signin.py).
            if not scope["path"].startswith(("/hooks/", "/console/")) and scope["path"] != "/console":
                principal = self._principal(request)
                scope.setdefault("state", {})["principal"] = principal
                scope["user"] = _mcp_user(principal)
            length = request.headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body):
                raise ApiError(
                    413, f"request bodies are limited to {self.max_body} bytes", code="body_too_large"
                )
        except ApiError as exc:
            await exc.response()(scope, receive, send)
            return
        await self.app(scope, self._limited(receive), send)

    def _principal(self, request: Request) -> Principal:
        if self.served.open_tenant is not None:
            loopback_only(request)
            return Principal(self.served.open_tenant)
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        principal = (
            self.served.keys.principal(key.strip()) if scheme.lower() == "bearer" and key.strip() else None
        )
        if principal is None:
            raise ApiError(
                401,
                "missing or unknown API key (Authorization: Bearer KEY)",
                "authentication_error",
                "invalid_api_key",
            )
        return principal

    def _limited(self, receive: Receive) -> Receive:
        """A chunked body that grows past the limit, or that does not arrive in time, ends the
        request. Once the body is whole, `receive` waits as long as it likes (a streaming
        response listens on it for the client's disconnect)."""
        seen, whole = 0, False
        deadline = asyncio.get_running_loop().time() + self.body_timeout

        async def limited() -> Message:
            nonlocal seen, whole
            if whole:
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise ApiError(
                    408,
                    f"the request body did not arrive within {self.body_timeout:g} s",
                    code="body_timeout",
                ) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                whole = not message.get("more_body", False)
                if seen > self.max_body:
                    raise ApiError(
                        413, f"request bodies are limited to {self.max_body} bytes", code="body_too_large"
                    )
            return message

        return limited


class AccessLog:
    """One record per HTTP request on `agentwolf.protocols.http` (outside Guard, so refusals are
    logged too): method, path, status, duration in ms and the key's id (the first 12 hex digits of
    its SHA-256, `-` without one; never the key). They ride on the record as `http` for the JSON
    log format (agentwolf/telemetry/logs.py)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the client sees when the app fails before it answers
        started = time.perf_counter()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            principal = scope.get("state", {}).get("principal")
            fields = {
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                "key_id": principal.key[:12] if principal is not None and principal.key else "-",
            }
            access_log.info(
                "%(method)s %(path)s %(status)s %(duration_ms)sms key=%(key_id)s",
                fields,
                extra={"http": fields},
            )
