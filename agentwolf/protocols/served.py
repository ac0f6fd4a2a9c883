"""The kernel every front end of `wolf serve` shares: what this process serves (`Served`: the
Temporal client, the config, the keys, one WolfClient per tenant), the agents a request may run
(`Target`, `Served.resolve`), which existing sessions a caller may reach (`session_of`, `reach`; the
rule itself is `agentwolf.access.runs`), reading a request's JSON body, and errors in OpenAI's shape
(`{"error": {"message", "type", "code"}}`), which the AG-UI routes use too.

Route modules import this module and nothing of app.py, which assembles them: the front ends form no
import circle. A session another key may not use is as unknown as a missing one (`SessionNotFound`,
answered as not found): ids do not leak."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from temporalio.client import Client
from temporalio.service import RPCError

from agentwolf.access import Principal, Runs, TenantError, runs
from agentwolf.client.configs import ConfigNotFound, ConfigQueryFailed
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.protocols.auth import SERVED, ApiKeys
from agentwolf.protocols.sign_ins import SignIns
from agentwolf.workflows.types import SessionStatus

log = logging.getLogger(__name__)
REGISTRY_WAIT = timedelta(seconds=10)


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
    sign_ins: SignIns = field(default_factory=SignIns)
    """The console's sign-in tokens (protocols/sign_ins.py)."""
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
        raise too_deep() from None
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


def too_deep() -> ApiError:
    return ApiError(400, "the request body nests too deeply to read", code="invalid_json")


async def session_of(wolf: WolfClient, served: Runs, session_id: str) -> SessionStatus:
    """The caller's session `session_id` if it runs `served` (else SessionNotFound)."""
    status = await wolf.status(session_id)
    if not runs(status, served):
        raise SessionNotFound(session_id)
    return status


def target_of(
    served: Served, principal: Principal, agent: str, config_name: str | None, config_id: str | None
) -> Target | None:
    """The target a session of `agent` runs, as this server names it, if `principal` may use it (None:
    a config this server does not serve, or an agent or config the key may not use). A file session
    (no `config_name`) is the served file's only if its manifest identity `config_id` is."""
    if config_name == SERVED:  # a registry config from before the name was reserved
        return None
    if config_name is None:
        if served.manifest is None or config_id != served.manifest.identity:
            return None
        target, config = Target(agent, agent, {"manifest": served.manifest}), SERVED
    elif config_name == served.config_name:
        target, config = Target(agent, agent, {"config_name": config_name}), config_name
    else:
        target, config = Target(f"{config_name}/{agent}", agent, {"config_name": config_name}), config_name
    return target if principal.may_use(config, agent) else None


async def reach(served: Served, principal: Principal, session_id: str) -> tuple[SessionStatus, Target]:
    """The session and its target, for paths that name a session without an agent (a response id,
    an approval, a transcript); SessionNotFound unless `principal` may use what it runs."""
    wolf = served.wolf(principal)
    status = await wolf.status(session_id)
    target = target_of(served, principal, status.agent, status.config_name, status.config_id)
    if target is None:
        raise SessionNotFound(session_id)
    return status, target
