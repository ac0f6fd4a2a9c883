"""`wolf serve`'s ASGI app (Starlette), assembled: the probes, every front end's routes, the
middleware (guard.py) and the error handlers. Nothing here is imported by a route module; what
they share is served.py."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from agentwolf.client.configs import ConfigQueryFailed
from agentwolf.protocols.cors import CrossOrigin
from agentwolf.protocols.middleware import BODY_TIMEOUT, MAX_BODY, AccessLog, Guard
from agentwolf.protocols.served import ApiError, Served, served_of, too_deep

if TYPE_CHECKING:
    from temporalio.api.taskqueue.v1 import PollerInfo

log = logging.getLogger(__name__)


async def _recursion_error(request: Request, exc: Exception) -> Response:
    """A parser that recursed past Python's limit on hostile input (deeply nested JSON) in a route
    that reads its own body (webhooks, A2A, MCP): the caller's fault, not the server's."""
    log.info("answering 400 to %s %s: %r", request.method, request.url.path, exc)
    return too_deep().response()


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
POLL_FRESH = timedelta(seconds=75)
"""A worker polls at least this often: a long poll lasts at most a minute before the worker asks
again. Temporal lists a gone worker's poller for minutes; its last access tells it is gone."""
READY_TTL = 1.5
"""Seconds one answer of /ready is reused: a flood of probes (no key needed) asks Temporal once."""


class Readiness:
    """`/ready`: Temporal answers and a worker polls the served task queue. The body names which
    check failed, never a namespace, queue, worker identity or what Temporal said (no key needed).
    One question at a time, its answer kept `READY_TTL` seconds (per app, so per process)."""

    def __init__(self) -> None:
        self.checks: dict[str, str] = {}
        self.expires = 0.0
        self.lock = asyncio.Lock()

    async def answer(self, request: Request) -> Response:
        async with self.lock:
            if time.monotonic() >= self.expires:
                self.checks = await self._check(served_of(request))
                self.expires = time.monotonic() + READY_TTL
        if self.checks == {"temporal": "ok", "worker": "ok"}:
            return JSONResponse({"status": "ok", "checks": self.checks})
        return JSONResponse(
            {"status": "unavailable", "checks": self.checks}, status_code=503, headers={"Retry-After": "5"}
        )

    @staticmethod
    async def _check(served: Served) -> dict[str, str]:
        from temporalio.api.enums.v1 import TaskQueueType
        from temporalio.api.taskqueue.v1 import TaskQueue
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

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
            return {"temporal": "unavailable", "worker": "unknown"}
        now = datetime.now(UTC)
        return {
            "temporal": "ok",
            "worker": "ok"
            if any(polling(p, now) for p in described.pollers)
            else "no worker polls the served task queue",
        }


def polling(poller: PollerInfo, now: datetime) -> bool:
    """Whether the worker behind `poller` still polls (last seen within `POLL_FRESH`)."""
    return now - poller.last_access_time.ToDatetime(UTC) <= POLL_FRESH


@contextlib.asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    """Run what routes need while the app serves (a route's `lifespan`: the MCP session manager)."""
    async with contextlib.AsyncExitStack() as stack:
        for route in app.routes:
            if (enter := getattr(route, "lifespan", None)) is not None:
                await stack.enter_async_context(enter())
        yield


async def _a2a_missing(request: Request) -> Response:
    message = "A2A needs its extra on this server: pip install 'agentwolf[a2a]'"
    raise ApiError(501, message, code="extra_missing")


def create_app(
    served: Served,
    routes: list[BaseRoute] | None = None,
    max_body: int = MAX_BODY,
    body_timeout: float = BODY_TIMEOUT,
) -> Starlette:
    """The app; `routes` default to every front end's."""
    if routes is None:
        from agentwolf.protocols import agui, console, hooks, mcp_server, openai_api

        routes = [*openai_api.routes(), *agui.routes(), *mcp_server.http_routes(served), *hooks.routes()]
        routes += console.routes()
        if importlib.util.find_spec("a2a") is not None:  # the `a2a` extra
            from agentwolf.protocols import a2a

            routes += a2a.routes()
        else:
            routes.append(Route("/a2a/{rest:path}", _a2a_missing, methods=["GET", "POST"]))
    app = Starlette(
        routes=[
            Route("/healthz", _healthz, methods=["GET"]),
            Route("/health", _health, methods=["GET"]),
            Route("/ready", Readiness().answer, methods=["GET"]),
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
