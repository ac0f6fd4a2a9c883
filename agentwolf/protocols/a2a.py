"""A2A on `wolf serve` (a2a-sdk, extra `a2a`): each agent and team at `/a2a/{agent}`.

`GET /a2a/{agent}/.well-known/agent-card.json` is its card; `POST /a2a/{agent}` is JSON-RPC, the
A2A 1.0 methods (`SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`, `SubscribeToTask`)
and the 0.3 names (`message/send`, `message/stream`, `tasks/get`, `tasks/cancel`,
`tasks/resubscribe`). A context is a session and a task is a turn: a message without `contextId`
starts a session, one with it prompts that session. A tool call waiting for approval (a `confirm`
rule) puts the task in `input-required`; the next message on that task answers it: the text
`approve`, `approve always` or `deny`, or a data part `{"approve": true|false, "always"?: bool,
"call_id"?: str}` (without `call_id` it answers every waiting call). `tasks/cancel` interrupts the
turn.

Nothing lives in this process (the SDK's own executor keeps tasks in memory and loses them when the
process dies): a task id is `TURN.BASE.SESSION` (the turn, an event offset at or before its start,
the session), so any `wolf serve` process answers `tasks/get` from the session and resubscribes by
following the turn's events again. A resubscribed stream starts with the task, then streams the
turn from its start: its first artifact chunk has `append: false`, so it replaces whatever the client
had and the answer ends up whole, once. A disconnect never stops the turn.

Answers stream as chunks of the artifact `answer`; a retried model attempt's text is withdrawn by a
chunk with `append: false` carrying the text that stands. Tool calls and their progress are
`working` status messages. Callers are `wolf serve`'s API keys and tenant scope: another tenant's
context or task is as unknown as a missing one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from importlib.metadata import version

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.request_handler import RequestHandler, validate_request_params
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentwolf.access import TenantError
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.config.manifest import Manifest, McpCapability
from agentwolf.protocols import turns
from agentwolf.protocols.a2a_tasks import (
    TERMINAL,
    A2AEvent,
    Translation,
    approvals_message,
    decision,
    ended,
    follow,
    new_task,
    no_task,
    parse_task_id,
    prompt_text,
    task_id,
)
from agentwolf.protocols.served import Served, Target, principal_of, served_of, session_of

CANCEL_WAIT = 30.0
"""How long `tasks/cancel` waits for the interrupted turn to finish before answering `working`."""


class WolfA2A(RequestHandler):
    """The A2A methods over durable sessions; the route puts the caller's WolfClient and target
    (the agent of the URL, checked against the caller's key) into the call context."""

    @staticmethod
    def _caller(context: ServerCallContext) -> tuple[WolfClient, Target]:
        return context.state["wolf"], context.state["target"]

    async def _ref(self, wolf: WolfClient, target: Target, value: str) -> turns.TurnRef:
        """The task named `value`, if it is a turn of one of the caller's sessions of this agent."""
        ref = parse_task_id(value)
        try:
            await session_of(wolf, target, ref.session_id)
        except (SessionNotFound, TenantError):
            raise no_task(value) from None
        return ref

    # -- messages --------------------------------------------------------------------------------

    async def _submit(self, wolf: WolfClient, target: Target, message: Message) -> tuple[turns.TurnRef, str]:
        """Start the turn `message` asks for, or answer the approvals its task waits for: the turn
        to follow (from where to) and the task id."""
        try:
            if message.task_id:
                ref = await self._ref(wolf, target, message.task_id)
                if message.context_id and message.context_id != ref.session_id:
                    raise InvalidParamsError(message="the task belongs to another context")
                return await self._answer(wolf, ref, message), message.task_id
            text = prompt_text(message)
            if message.context_id:
                try:
                    status = await session_of(wolf, target, message.context_id)
                except (SessionNotFound, TenantError):
                    raise InvalidParamsError(message="context not found") from None
                ref = await turns.prompt(wolf, status.session_id, text)
            else:
                ref = await turns.start(wolf, target, text)
        except turns.Refused as exc:
            raise InvalidParamsError(message=str(exc)) from None
        return ref, task_id(ref)

    async def _answer(self, wolf: WolfClient, ref: turns.TurnRef, message: Message) -> turns.TurnRef:
        approve, always, call_id = decision(message)
        status = await wolf.status(ref.session_id)
        if status.state != "waiting_approval" or status.turn_id != ref.turn_id:
            raise InvalidParamsError(message=f"task {task_id(ref)!r} is not waiting for input")
        calls = [p.call_id for p in status.pending_approvals if call_id in (None, p.call_id)]
        if not calls:
            raise InvalidParamsError(message=f"no tool call {call_id!r} waits for approval in this task")
        base = await wolf.event_offset(ref.session_id)
        for call in calls:
            await turns.answer(wolf, ref.session_id, call, approve, always=always)
        return turns.TurnRef(ref.session_id, ref.turn_id, base)

    @validate_request_params
    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        wolf, target = self._caller(context)
        ref, id = await self._submit(wolf, target, params.message)
        if params.configuration.return_immediately:
            return await self._snapshot(wolf, parse_task_id(id))
        end = turns.TurnEnd()
        async for _ in turns.follow(wolf, ref, end):
            pass
        if end.waiting:
            return new_task(
                ref, TaskState.TASK_STATE_INPUT_REQUIRED, message=approvals_message(ref, end.waiting)
            )
        return ended(parse_task_id(id), end.outcome, end.text)

    @validate_request_params
    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2AEvent]:
        wolf, target = self._caller(context)
        ref, id = await self._submit(wolf, target, params.message)
        answering = bool(params.message.task_id)
        first = TaskState.TASK_STATE_WORKING if answering else TaskState.TASK_STATE_SUBMITTED
        yield new_task(parse_task_id(id), first)
        async for event in follow(wolf, ref, Translation(ref, id)):
            yield event

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[A2AEvent]:
        wolf, target = self._caller(context)
        ref = await self._ref(wolf, target, params.id)
        snapshot = await self._snapshot(wolf, ref)
        yield snapshot
        if snapshot.status.state not in TERMINAL:
            async for event in follow(wolf, ref, Translation(ref, params.id)):
                yield event

    # -- tasks ---------------------------------------------------------------------------------

    @validate_request_params
    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        wolf, target = self._caller(context)
        return await self._snapshot(wolf, await self._ref(wolf, target, params.id))

    @validate_request_params
    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        wolf, target = self._caller(context)
        ref = await self._ref(wolf, target, params.id)
        status = await wolf.status(ref.session_id)
        if status.turn_id != ref.turn_id or status.state not in ("running", "waiting_approval"):
            raise TaskNotCancelableError(message=f"task {params.id!r} is not running")
        base = await wolf.event_offset(ref.session_id)
        await wolf.interrupt(ref.session_id, "canceled by the A2A client")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CANCEL_WAIT):
                async for _ in turns.follow(
                    wolf, turns.TurnRef(ref.session_id, ref.turn_id, base), turns.TurnEnd()
                ):
                    pass
        return await self._snapshot(wolf, ref)

    async def _snapshot(self, wolf: WolfClient, ref: turns.TurnRef) -> Task:
        """The task as the session tells it now."""
        status = await wolf.status(ref.session_id)
        if status.turn_id == ref.turn_id and status.state == "waiting_approval":
            return new_task(
                ref,
                TaskState.TASK_STATE_INPUT_REQUIRED,
                message=approvals_message(ref, status.pending_approvals),
            )
        if status.turn_id == ref.turn_id and status.state == "running":
            return new_task(ref, TaskState.TASK_STATE_WORKING)
        if await turns.expired(wolf, status, ref):
            raise TaskNotFoundError(
                message=f"task {task_id(ref)!r} has expired: its session keeps only its latest events"
            )
        seen = await turns.started(wolf, ref)
        if seen is None:
            return new_task(
                ref, TaskState.TASK_STATE_FAILED if status.state == "done" else TaskState.TASK_STATE_SUBMITTED
            )
        if seen.end is None:  # started, not running, never finished: the session ended under it
            return ended(ref, "failed", "the session closed before the turn finished", seen.prompt)
        return ended(ref, seen.end.outcome, seen.end.text, seen.prompt)

    # -- what wolf serve does not offer --------------------------------------------------------

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        raise UnsupportedOperationError(message="tasks/list is not offered: keep the task ids you get")

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise UnsupportedOperationError(
            message="the agent card at .well-known/agent-card.json is the whole card"
        )


# -- the card and the routes ---------------------------------------------------------------------


async def _manifest(served: Served, request: Request, target: Target) -> Manifest:
    manifest = target.source.get("manifest")
    if isinstance(manifest, Manifest):
        return manifest
    return (await served.wolf(principal_of(request)).config_get(target.source["config_name"])).manifest


def _describe(manifest: Manifest, agent: str) -> tuple[str, list[str]]:
    """What the agent is for (its instructions' first line) and tags (its MCP servers)."""
    team = manifest.teams.get(agent)
    if team is not None:
        return f"A team of {', '.join(team.members)} ({team.mode}).", ["team"]
    config = manifest.agents[agent]
    first = next((line.strip() for line in config.instructions.splitlines() if line.strip()), "")
    servers = [c.mcp for c in config.capabilities if isinstance(c, McpCapability)]
    return (first[:300] or f"AgentWolf agent {agent}"), ["agent", *servers]


def card(base_url: str, target: Target, manifest: Manifest, *, authenticated: bool) -> AgentCard:
    description, tags = _describe(manifest, target.agent)
    url = f"{base_url.rstrip('/')}/a2a/{target.model}"
    built = AgentCard(
        name=target.model,
        description=description,
        version=version("agentwolf"),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=protocol)
            for protocol in ("1.0", "0.3")
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id=target.model,
                name=target.model,
                description=f"{description} Each task is one durable turn; the context is its session.",
                tags=["agentwolf", *tags],
            )
        ],
    )
    if authenticated:
        built.security_schemes["wolf_api_key"].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="a wolf serve API key: Authorization: Bearer KEY"
                )
            )
        )
        built.security_requirements.append(SecurityRequirement(schemes={"wolf_api_key": StringList()}))
    return built


class _ContextBuilder(DefaultServerCallContextBuilder):
    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["headers"].pop("authorization", None)  # the caller's key goes no further
        context.state["wolf"] = served_of(request).wolf(principal_of(request))
        context.state["target"] = request.state.a2a_target
        return context


class _Routes:
    def __init__(self) -> None:
        self.dispatcher = JsonRpcDispatcher(WolfA2A(), _ContextBuilder(), enable_v0_3_compat=True)

    async def rpc(self, request: Request) -> Response:
        request.state.a2a_target = await served_of(request).resolve(
            principal_of(request), request.path_params["agent"]
        )
        return await self.dispatcher.handle_requests(request)

    async def card(self, request: Request) -> Response:
        served = served_of(request)
        target = await served.resolve(principal_of(request), request.path_params["agent"])
        manifest = await _manifest(served, request, target)
        built = card(str(request.base_url), target, manifest, authenticated=served.open_tenant is None)
        return JSONResponse(agent_card_to_dict(built))


def routes() -> list[Route]:
    """The card before the JSON-RPC endpoint: an agent may be `CONFIG/AGENT`."""
    handlers = _Routes()
    return [
        Route("/a2a/{agent:path}/.well-known/agent-card.json", handlers.card, methods=["GET"]),
        Route("/a2a/{agent:path}", handlers.rpc, methods=["POST"]),
    ]
