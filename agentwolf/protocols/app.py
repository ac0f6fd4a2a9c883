"""`wolf serve`: one ASGI app (Starlette) with the protocol front ends, on `WolfClient`.

What every front end shares lives here: who is calling (API keys -> Principal), which agents they
may use (`Served.resolve`), one WolfClient per tenant, request limits, and errors in OpenAI's shape
(`{"error": {"message", "type", "code"}}`), which the AG-UI routes use too."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from agentwolf.access import Principal, TenantError
from agentwolf.client.configs import ConfigNotFound, ConfigQueryFailed
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.protocols.auth import SERVED, ApiKeys
from agentwolf.protocols.cors import CrossOrigin

log = logging.getLogger(__name__)
REGISTRY_WAIT = timedelta(seconds=10)
access_log = logging.getLogger("agentwolf.protocols.http")
"""One INFO record per request (AccessLog)."""

UNGUARDED = frozenset({"/healthz", "/health", "/ready"})
"""Probes answered without a key: they say nothing about any tenant."""

MAX_BODY = 1 << 20
"""Request bodies over this many bytes are refused (413) before they are read whole."""
BODY_TIMEOUT = 10.0
"""Seconds a request body may take to arrive (a slowloris client gets 408, not a server coroutine)."""


class ApiError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        """`param`: the request parameter at fault, as OpenAI names it (`response_format.json_schema`)."""
        super().__init__(message)
        self.status, self.message, self.type, self.code, self.headers, self.param = (
            status,
            message,
            type,
            code,
            headers or {},
            param,
        )

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.type, "code": self.code, "param": self.param}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def not_found(what: str) -> ApiError:
    """Another tenant's session is as unknown as a missing one: ids do not leak."""
    return ApiError(404, f"{what} not found", "not_found_error", "not_found")


@dataclass
class Target:
    """An agent a request runs: where its config comes from and the model name it was asked by."""

    model: str
    agent: str
    source: dict[str, Any]
    """`manifest=` or `config_name=` for WolfClient.start_session."""


IDLE_CLOSE_AFTER = timedelta(hours=24)
"""How long a session `wolf serve` started stays open without a turn, by default."""


@dataclass
class Served:
    """What one `wolf serve` process serves: a Temporal client, a config, who may call."""

    client: Client
    task_queue: str
    keys: ApiKeys
    manifest: Manifest | None = None
    """The served config given as a file (model names `AGENT`)."""
    config_name: str | None = None
    """The served config given as a registry name (model names `AGENT` too)."""
    open_tenant: str | None = None
    """`--no-auth`: every request acts as this tenant (loopback only)."""
    hook_tenant: str = "default"
    """The tenant webhooks (`/hooks/`, protocols/hooks.py) act as: they carry a signature, no API key."""
    cors_origins: tuple[str, ...] = ()
    """Web origins whose pages may call from a browser (protocols/cors.py); none: no cross-origin access."""
    idle_close_after: timedelta | None = IDLE_CLOSE_AFTER
    """Sessions started here close after being idle this long, unless their manifest sets
    `host.sessions.idle_close_after`: a stored response or a new chat session is not kept running for
    ever (OpenAI keeps stored responses for 30 days; their events stay readable after the close)."""
    _clients: dict[str, WolfClient] = field(default_factory=dict)

    def wolf(self, principal: Principal) -> WolfClient:
        if principal.tenant not in self._clients:
            self._clients[principal.tenant] = WolfClient(
                self.client,
                tenant=principal.tenant,
                task_queue=self.task_queue,
                idle_close_after=self.idle_close_after,
            )
        return self._clients[principal.tenant]

    async def models(self, principal: Principal) -> list[Target]:
        """The agents and teams the principal may use: `AGENT` of the served config, `CONFIG/AGENT`
        of the tenant's registry configs (a registry that does not answer is left out, logged)."""
        names = [
            c.name
            for c in await self.wolf(principal).config_list()
            if c.name not in (self.config_name, SERVED)
        ]
        found = await asyncio.gather(*(self._answering(principal, name) for name in names))
        return await self._served(principal) + [t for targets in found for t in targets]

    async def _answering(self, principal: Principal, name: str) -> list[Target]:
        """A registry config's targets, or none when it does not answer within REGISTRY_WAIT: a
        registry no worker serves any more would hold every listing for its query's 30 s."""
        try:
            return await asyncio.wait_for(self._registry(principal, name), REGISTRY_WAIT.total_seconds())
        except (RPCError, ConfigQueryFailed, TimeoutError) as exc:
            log.warning("config %r left out of the listing: %s", name, exc or "no answer in time")
            return []

    async def resolve(self, principal: Principal, model: str) -> Target:
        """`model`'s target, reading only the config it names (one registry that does not answer
        must not fail every request)."""
        name = model.rpartition("/")[0]
        if name == SERVED:  # a registry config from before the name was reserved
            candidates = []
        elif name and name != self.config_name:
            candidates = await self._registry(principal, name)
        else:
            candidates = await self._served(principal)
        for target in candidates:
            if target.model == model:
                return target
        raise ApiError(
            404,
            f"model {model!r} not found (GET /v1/models lists yours)",
            "invalid_request_error",
            "model_not_found",
        )

    async def _served(self, principal: Principal) -> list[Target]:
        if self.manifest is None and self.config_name is None:
            return []
        manifest = self.manifest
        if manifest is None:
            try:
                manifest = (await self.wolf(principal).config_get(self.config_name or "")).manifest
            except ConfigNotFound:  # this tenant has no config of that name: nothing served to it
                return []
        return [
            Target(agent, agent, self._served_source())
            for agent in sorted([*manifest.agents, *manifest.teams])
            if principal.may_use(self.config_name or SERVED, agent)
        ]

    async def _registry(self, principal: Principal, name: str) -> list[Target]:
        try:
            manifest = (await self.wolf(principal).config_get(name)).manifest
        except ConfigNotFound:
            return []
        except (RPCError, ConfigQueryFailed) as exc:
            log.warning("registry config %r of tenant %r did not answer: %s", name, principal.tenant, exc)
            raise
        return [
            Target(f"{name}/{agent}", agent, {"config_name": name})
            for agent in sorted([*manifest.agents, *manifest.teams])
            if principal.may_use(name, agent)
        ]

    def _served_source(self) -> dict[str, Any]:
        return {"manifest": self.manifest} if self.manifest is not None else {"config_name": self.config_name}


def principal_of(request: Request) -> Principal:
    return request.state.principal


def served_of(request: Request) -> Served:
    return request.app.state.served


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object, or a clear 400/415."""
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise ApiError(415, "send the request body as application/json", code="unsupported_media_type")
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise _too_deep() from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    return body


def session_errors(
    what: str,
) -> Callable[[Callable[..., Awaitable[Response]]], Callable[..., Awaitable[Response]]]:
    """Map WolfClient's refusals onto HTTP: another tenant's session or a missing one is a 404."""

    def wrap(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except (SessionNotFound, TenantError):
                raise not_found(what) from None

        return run

    return wrap


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def _loopback_only(request: Request) -> None:
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
            if not scope["path"].startswith("/hooks/"):  # webhooks prove themselves by signature
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
            _loopback_only(request)
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


def _too_deep() -> ApiError:
    return ApiError(400, "the request body nests too deeply to read", code="invalid_json")


async def _recursion_error(request: Request, exc: Exception) -> Response:
    """A parser that recursed past Python's limit on hostile input (deeply nested JSON) in a route
    that reads its own body (webhooks, A2A, MCP): the caller's fault, not the server's."""
    log.info("answering 400 to %s %s: %r", request.method, request.url.path, exc)
    return _too_deep().response()


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


async def _temporal_error(request: Request, exc: Exception) -> Response:
    """Temporal did not answer in time (a busy or restarting cluster, no worker yet): the client may
    retry, which is what 503 with Retry-After says; the session itself is unharmed. What Temporal
    said stays in the log: it can name namespaces and workflow ids, and webhooks answer anyone."""
    log.warning("answering 503 to %s %s: %s", request.method, request.url.path, exc, exc_info=exc)
    return ApiError(
        503,
        "the session's Temporal service did not answer; retry shortly",
        "server_error",
        "temporal_unavailable",
        headers={"Retry-After": "1"},
    ).response()


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, a method the route does not take) in OpenAI's shape,
    not plain text."""
    assert isinstance(exc, HTTPException)
    codes = {404: ("not_found_error", "not_found"), 405: ("invalid_request_error", "method_not_allowed")}
    type, code = codes.get(exc.status_code, ("invalid_request_error", None))
    message = f"{request.method} {request.url.path}: {exc.detail}"
    return ApiError(exc.status_code, message, type, code, dict(exc.headers or {})).response()


async def _healthz(request: Request) -> Response:
    return JSONResponse({"ok": True})


async def _health(request: Request) -> Response:
    """Liveness: the process answers."""
    return JSONResponse({"status": "ok"})


READY_TIMEOUT = 2.0
"""Seconds /ready waits for Temporal's answer."""


async def _ready(request: Request) -> Response:
    """Readiness: Temporal answers and a worker polls the served task queue. The body names which
    check failed, never a namespace, queue, worker identity or what Temporal said (no key needed)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    served = served_of(request)
    checks = {"temporal": "ok", "worker": "ok"}
    try:
        described = await served.client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=served.client.namespace,
                task_queue=TaskQueue(name=served.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            ),
            timeout=timedelta(seconds=READY_TIMEOUT),
        )
    except RPCError as exc:
        log.warning("/ready: Temporal did not answer: %s", exc)
        checks = {"temporal": "unavailable", "worker": "unknown"}
    else:
        if not described.pollers:
            checks["worker"] = "no worker polls the served task queue"
    if checks == {"temporal": "ok", "worker": "ok"}:
        return JSONResponse({"status": "ok", "checks": checks})
    return JSONResponse(
        {"status": "unavailable", "checks": checks}, status_code=503, headers={"Retry-After": "5"}
    )


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


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    """Run what routes need while the app serves (a route's `lifespan`: the MCP session manager)."""
    async with contextlib.AsyncExitStack() as stack:
        for route in app.routes:
            if (enter := getattr(route, "lifespan", None)) is not None:
                await stack.enter_async_context(enter())
        yield


def create_app(
    served: Served,
    routes: list[BaseRoute] | None = None,
    max_body: int = MAX_BODY,
    body_timeout: float = BODY_TIMEOUT,
) -> Starlette:
    """The app; `routes` default to every front end's."""
    if routes is None:
        from agentwolf.protocols import agui, hooks, mcp_server, openai_api

        routes = [*openai_api.routes(), *agui.routes(), *mcp_server.http_routes(served), *hooks.routes()]
        if importlib.util.find_spec("a2a") is not None:  # the `a2a` extra
            from agentwolf.protocols import a2a

            routes += a2a.routes()
    app = Starlette(
        routes=[
            Route("/healthz", _healthz, methods=["GET"]),
            Route("/health", _health, methods=["GET"]),
            Route("/ready", _ready, methods=["GET"]),
            *routes,
        ],
        lifespan=_lifespan,
        middleware=[
            Middleware(AccessLog),
            *([Middleware(CrossOrigin, origins=served.cors_origins)] if served.cors_origins else []),
            Middleware(Guard, served=served, max_body=max_body, body_timeout=body_timeout),
        ],
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            RPCError: _temporal_error,
            WorkflowQueryFailedError: _temporal_error,
            ConfigQueryFailed: _temporal_error,
            RecursionError: _recursion_error,
        },
    )
    app.state.served = served
    return app
