"""AgentWolf as an MCP server: `wolf mcp` (stdio or HTTP) and `/mcp` on `wolf serve`.

Each agent and team the caller may use is a tool `ask_<agent>(task, session_id?)` (a registry
config's agent `CONFIG/AGENT` is `ask_CONFIG.AGENT`). A call runs one durable turn, a new session's
first or a prompt to `session_id`, sends progress notifications while it runs (the answer so far,
tool calls and their progress) and returns the answer with the session id as structured content. A
tool call that needs approval ends the call with `status: waiting_approval` and the waiting calls;
`wolf_approve(session_id, call_id, approved)` answers one and carries on with the turn. A cancelled
request interrupts its turn. Sessions are resources: `wolf://sessions/{id}/transcript`.

A caller that restarts calls again with the same `session_id` and `task`. The rule that tells such a
retry from a new prompt: when the session's latest turn was asked exactly `task`, the call is that
turn's retry: it reattaches to it while it runs and returns its output once it has finished, so no
second turn runs. To ask the same thing again on purpose, word it differently. (A retry of a prompt
still queued behind another turn is not recognised and queues a second one.)

The tool list depends on who calls (wolf serve's API keys, or the tenant `wolf mcp` runs as), so the
server lists and dispatches tools itself instead of registering fixed ones."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from datetime import UTC, datetime
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListResourcesResult,
    ListToolsResult,
    PaginatedRequestParams,
    Resource,
    TextContent,
    Tool,
)
from mcp_types.jsonrpc import INVALID_PARAMS
from pydantic_ai.messages import ModelMessagesTypeAdapter
from starlette.routing import BaseRoute, Route
from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from agentwolf.access import Principal, TenantError
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.protocols import served as serving
from agentwolf.protocols import turns
from agentwolf.protocols.auth import SERVED
from agentwolf.protocols.served import Served, Target, reach, session_of
from agentwolf.workflows.types import Event

log = logging.getLogger(__name__)

MAX_TASK = 256 * 1024
"""Characters a task may have (a bigger one is refused, not sent to the session)."""
PROGRESS_TAIL = 4000
"""Characters of the answer so far a progress message carries (its end)."""
MODELS_TTL = 5.0
"""Seconds a caller's agents (tools) are reused: a config pushed now shows within them."""
LISTED = 100
"""Sessions `resources/list` lists at most (the newest)."""
IDENTITY_WAIT = 3.0
"""Seconds `resources/list` waits for file sessions to say which manifest they run."""
TRANSCRIPT = "wolf://sessions/{session_id}/transcript"
APPROVE = "wolf_approve"

_ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "What to ask the agent.", "maxLength": MAX_TASK},
        "session_id": {
            "type": ["string", "null"],
            "description": "Continue this session (from an earlier answer); none starts a new one. "
            "Calling again with the same session_id and task after a restart returns that turn's answer.",
        },
    },
    "required": ["task"],
    "additionalProperties": False,
}
_APPROVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_id": {"type": "string"},
        "call_id": {"type": "string"},
        "approved": {"type": "boolean"},
        "always": {"type": "boolean", "description": "Allow this tool for the rest of the session."},
    },
    "required": ["session_id", "call_id", "approved"],
    "additionalProperties": False,
}
_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": ["string", "null"]},
        "session_id": {"type": "string"},
        "turn_id": {"type": "string"},
        "status": {"enum": ["completed", "interrupted", "limit", "failed", "waiting_approval"]},
        "approvals": {"type": "array", "items": {"type": "object"}},
    },
    "required": ["text", "session_id", "turn_id", "status"],
}


def tool_name(model: str) -> str:
    return "ask_" + re.sub(r"[^A-Za-z0-9_.-]", "_", model.replace("/", "."))


def _invalid(message: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message)


class WolfMCP(MCPServer):
    """The MCP server of one `Served`; `principal` for stdio (HTTP requests carry theirs)."""

    def __init__(self, served: Served, principal: Principal | None = None) -> None:
        super().__init__(
            "agentwolf",
            instructions="Durable AgentWolf agents: each ask_<agent> tool runs one turn of a session "
            "that outlives this connection; pass the returned session_id to continue it.",
        )
        self.served, self.principal = served, principal
        self._kept_models: dict[Principal, tuple[float, list[Target]]] = {}
        self.resource(TRANSCRIPT, name="transcript", mime_type="application/json")(self._transcript)

    # -- who calls -----------------------------------------------------------------------------

    def _principal(self, ctx: ServerRequestContext[Any, Any]) -> Principal:
        request = ctx.request
        scope = getattr(request, "scope", None)
        if scope is not None and "principal" in scope.get("state", {}):
            principal: Principal = scope["state"]["principal"]
            return principal
        if self.principal is None:
            raise MCPError(code=INVALID_PARAMS, message="no caller identity on this transport")
        return self.principal

    async def _models(self, principal: Principal) -> list[Target]:
        """`served.models`, kept MODELS_TTL seconds per caller: every tools/list and tools/call needs
        it, and it costs a visibility list plus a query per registry config."""
        now = time.monotonic()
        kept = self._kept_models.get(principal)
        if kept is None or now - kept[0] > MODELS_TTL:
            kept = self._kept_models[principal] = (now, await self.served.models(principal))
        return kept[1]

    # -- tools ---------------------------------------------------------------------------------

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        return _APPROVE_SCHEMA if name == APPROVE else _ASK_SCHEMA if name.startswith("ask_") else None

    async def _handle_list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        targets = await self._models(self._principal(ctx))
        tools = [
            Tool(
                name=tool_name(t.model),
                description=f"Ask AgentWolf agent {t.model!r}: runs one durable turn and returns its answer.",
                input_schema=_ASK_SCHEMA,
                output_schema=_OUTPUT_SCHEMA,
            )
            for t in targets
        ]
        tools.append(
            Tool(
                name=APPROVE,
                description="Answer a tool call an ask_ call left waiting for approval, then carry on "
                "with that turn and return its answer.",
                input_schema=_APPROVE_SCHEMA,
                output_schema=_OUTPUT_SCHEMA,
            )
        )
        return ListToolsResult(tools=tools)

    async def _handle_call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        principal, args = self._principal(ctx), params.arguments or {}
        wolf = self.served.wolf(principal)
        try:
            if params.name == APPROVE:
                ref = await self._approve(principal, wolf, args)
                return await self._run(ctx, wolf, ref)
            target = await self._target(principal, params.name)
            task, session_id = args.get("task"), args.get("session_id")
            if not isinstance(task, str) or not task.strip() or len(task) > MAX_TASK:
                raise _invalid(f"task must be a non-empty string of at most {MAX_TASK} characters")
            if session_id is not None and not isinstance(session_id, str):
                raise _invalid("session_id must be a string")
            return await self._ask(ctx, wolf, target, task, session_id)
        except (SessionNotFound, TenantError):
            raise _invalid(f"session {args.get('session_id')!r} not found") from None
        except turns.Refused as exc:
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)

    async def _target(self, principal: Principal, name: str) -> Target:
        for target in await self._models(principal):
            if tool_name(target.model) == name:
                return target
        raise _invalid(f"unknown tool {name[:80]!r}")

    async def _ask(
        self,
        ctx: ServerRequestContext[Any, Any],
        wolf: WolfClient,
        target: Target,
        task: str,
        session_id: str | None,
    ) -> CallToolResult:
        if session_id is None:
            try:
                ref = await turns.start(wolf, target, task)
            except ValueError as exc:
                if isinstance(exc, turns.Refused):
                    raise
                raise turns.Refused(str(exc)) from None
            return await self._run(ctx, wolf, ref)
        await session_of(wolf, target, session_id)
        last = await turns.latest(wolf, session_id)
        if last is not None and turns.same_prompt(last.prompt, task):  # a retry (module docstring)
            if last.end is not None:
                return _result(last.ref, turns.TurnEnd(last.end.outcome, last.end.text))
            return await self._run(ctx, wolf, last.ref)
        return await self._run(ctx, wolf, await turns.prompt(wolf, session_id, task))

    async def _approve(self, principal: Principal, wolf: WolfClient, args: dict[str, Any]) -> turns.TurnRef:
        session_id, call_id, approved = args.get("session_id"), args.get("call_id"), args.get("approved")
        if not isinstance(session_id, str) or not isinstance(call_id, str) or not isinstance(approved, bool):
            raise _invalid("session_id and call_id (strings) and approved (a boolean) are required")
        status, _ = await reach(self.served, principal, session_id)
        turn_id = status.turn_id
        await turns.answer(wolf, session_id, call_id, approved, always=args.get("always") is True)
        if turn_id is None:
            raise turns.Refused(f"session {session_id!r} runs no turn")
        last = await turns.latest(wolf, session_id)
        base = last.ref.base if last is not None and last.ref.turn_id == turn_id else 0
        return turns.TurnRef(session_id, turn_id, base)

    async def _run(
        self, ctx: ServerRequestContext[Any, Any], wolf: WolfClient, ref: turns.TurnRef
    ) -> CallToolResult:
        """Follow the turn to its end, reporting progress; a cancelled request interrupts it."""
        end, answer, count = turns.TurnEnd(), turns.Answer(), 0
        try:
            async for event in turns.follow(wolf, ref, end):
                message = _progress(event, answer)
                if message is not None:
                    count += 1
                    await ctx.session.report_progress(count, None, message)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await wolf.interrupt(ref.session_id, "cancelled by the MCP client")
            raise
        return _result(ref, end)

    # -- resources -----------------------------------------------------------------------------

    async def _handle_list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        """The newest LISTED sessions the caller may reach (visibility filters by the key's agents
        and registry configs before the limit; a file session is checked for the served identity)."""
        principal = self._principal(ctx)
        wolf = self.served.wolf(principal)
        agents = sorted(principal.agents) if principal.agents is not None else [None]
        configs: list[str | None] = [None]
        if principal.configs is not None and SERVED not in principal.configs:
            configs = [*sorted(principal.configs)]
        found = [
            s
            for agent in agents
            for config in configs
            for s in await wolf.list_sessions(agent=agent, config=config, limit=LISTED)
        ]
        found.sort(key=lambda s: s.started or datetime.min.replace(tzinfo=UTC), reverse=True)
        files = [s.session_id for s in found if s.config is None] if self.served.manifest else []
        identities = await _identities(wolf, files)
        listed = [
            s
            for s in found
            if s.agent
            and serving.target_of(self.served, principal, s.agent, s.config, identities.get(s.session_id))
        ][:LISTED]
        return ListResourcesResult(
            resources=[
                Resource(
                    uri=TRANSCRIPT.format(session_id=s.session_id),
                    name=f"{s.agent} session {s.session_id}",
                    mime_type="application/json",
                )
                for s in listed
            ]
        )

    async def _transcript(self, session_id: str, ctx: Context) -> str:
        principal = self._principal(ctx.request_context)
        wolf = self.served.wolf(principal)
        try:
            await reach(self.served, principal, session_id)
            messages = await wolf.transcript(session_id)
        except (SessionNotFound, TenantError):
            raise ResourceNotFoundError(f"session {session_id[:80]!r} not found") from None
        return ModelMessagesTypeAdapter.dump_json(messages).decode()


async def _identities(wolf: WolfClient, session_ids: list[str]) -> dict[str, str]:
    """The manifest identity of each file session that says within IDENTITY_WAIT (visibility does
    not know it; a session whose worker does not answer in time is left out of the list)."""
    found: dict[str, str] = {}

    async def one(session_id: str) -> None:
        with contextlib.suppress(ValueError, RPCError, WorkflowQueryFailedError):
            found[session_id] = (await wolf.status(session_id)).config_id

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(IDENTITY_WAIT), asyncio.TaskGroup() as group:
            for session_id in session_ids:
                group.create_task(one(session_id))
    return found


def _progress(event: Event, answer: turns.Answer) -> str | None:
    """A progress message for `event`: the answer so far, or what a tool does."""
    if event.kind in ("text_delta", "attempt_superseded"):
        if answer.feed(event) is None and event.kind == "text_delta":
            return None
        return answer.text[-PROGRESS_TAIL:]
    if event.kind == "approval_requested":
        return f"{event.tool} waits for approval (call {event.call_id})"
    return turns.tool_note(event)


def _result(ref: turns.TurnRef, end: turns.TurnEnd) -> CallToolResult:
    status = "waiting_approval" if end.waiting else end.outcome or "failed"
    structured: dict[str, Any] = {
        "text": end.text,
        "session_id": ref.session_id,
        "turn_id": ref.turn_id,
        "status": status,
        "approvals": [p.model_dump(mode="json", include={"call_id", "tool", "args"}) for p in end.waiting],
    }
    if end.waiting:
        calls = ", ".join(f"{p.tool} (call_id {p.call_id})" for p in end.waiting)
        text = f"Waiting for approval: {calls}. Answer with {APPROVE} (session_id {ref.session_id})."
    else:
        text = end.text or f"The turn ended: {status}."
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=status in ("failed", "limit"),
    )


_SESSION_ID = re.compile(r"\b[0-9a-f]{32}\b")
"""An MCP session id as the SDK makes them (`uuid4().hex`)."""


class _SessionIdsAtDebug(logging.Filter):
    """The MCP SDK logs session ids at INFO and WARNING, and whoever holds an id can use the session
    (until it is bound to a key, which the Guard now does, and still to disrupt it): the record keeps
    its level with the id cut out, and the whole line goes to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _SESSION_ID.sub("…", message)
        if redacted != message and record.levelno > logging.DEBUG:
            log.debug("%s: %s", record.name, message)
            record.msg, record.args = redacted, None
        return True


_SDK_LOGGERS = ("mcp.server.streamable_http_manager", "mcp.server.streamable_http")


def http_routes(served: Served, path: str = "/mcp") -> list[BaseRoute]:
    """Streamable HTTP at `path`, behind the app's auth (each request's principal is its caller);
    the route's `lifespan` runs the SDK's session manager while the app serves."""
    for name in _SDK_LOGGERS:
        sdk_log = logging.getLogger(name)
        if not any(isinstance(f, _SessionIdsAtDebug) for f in sdk_log.filters):
            sdk_log.addFilter(_SessionIdsAtDebug())
    server = WolfMCP(served)
    server.streamable_http_app(
        streamable_http_path=path,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    route = Route(
        path, endpoint=StreamableHTTPASGIApp(server.session_manager), methods=["GET", "POST", "DELETE"]
    )
    route.lifespan = server.session_manager.run  # type: ignore[attr-defined]
    return [route]
