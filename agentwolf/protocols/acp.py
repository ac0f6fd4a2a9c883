"""`wolf acp`: AgentWolf as an ACP agent for editors (Zed and other Agent Client Protocol clients).

An ACP session is a durable session (the same id). `session/new` starts one with the served agent and
config; `session/load` reattaches to a session of the tenant that runs the served agent from the served
config (any other is "not found", as on every front end), replaying its transcript as `session/update`s,
then following it live; `session/resume` only follows. `session/fork` forks such a session
(`WolfClient.fork`: nothing in the prefix runs again) after its last finished turn, or after the step of
a message id this agent sent (`_meta: {"agentwolf": {"at": "turn-4.2.0"}}`; a fork point such as `4` or
`4.2` works too), into a new session the editor prompts like any other. `session/prompt` sends a turn
and answers with its stop reason once the turn ends, while the session's follower streams what happens
(acp_updates.py). A tool call waiting for approval becomes `session/request_permission` (allow once,
allow always: the tool for the rest of the session, reject), answered with approve/deny.
`session/cancel` interrupts the running turn. The session's slash commands (from its compiled agent) go
out with `available_commands_update` whenever it compiles (hot reload included). The MCP servers the
client passes (stdio, streamable HTTP) join that session only, and only a session started for the same
user (`editor_principal`): the worker registers them at the extension registry's SESSION scope, starts
them under its policy and stops them when the session closes; their `env` and header values are sealed
out of history (agentwolf/config/session_servers.py). Loading another user's session shows it without
joining the editor's servers (and its credentials) to it.

Nothing lives in this process but followers: a turn runs in its session whatever happens to the
editor or to `wolf acp`, and a new `wolf acp` that loads the session shows what happened meanwhile.
The process acts as one tenant: another tenant's session is "not found", as on `wolf serve`.

Over 500 lines on purpose: one ACP agent, a method per protocol method and the translations of
the editor's arguments only they use; its session updates are acp_updates.py, its framing ndjson.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import wraps
from importlib.metadata import version
from typing import Any, ParamSpec, TypeVar, cast

from acp import PROTOCOL_VERSION, RequestError
from acp.agent.connection import AgentSideConnection
from acp.interfaces import Agent, Client
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    AvailableCommand,
    AvailableCommandsUpdate,
    ForkSessionResponse,
    HttpMcpServer,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpCapabilities,
    McpServerStdio,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionForkCapabilities,
    SessionResumeCapabilities,
    StopReason,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
)
from acp.stdio import stdio_streams
from pydantic_ai.messages import ModelMessage
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from agentwolf.access import TenantError
from agentwolf.client.sessions import NotOwner
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.config.manifest import McpServerConfig
from agentwolf.protocols import served as serving
from agentwolf.protocols.acp_updates import Updates, replay, title, tool_finished
from agentwolf.protocols.ndjson import MAX_LINE, NdjsonTransport
from agentwolf.workflows.types import LIVE_KINDS, Event, PendingApproval, SessionStatus

log = logging.getLogger(__name__)

SNAPSHOT_TRIES = 20
"""Reads of a busy session's transcript before `session/load` takes one that may overlap its events."""
FOLLOW_RETRIES = 5
MESSAGE_ID = re.compile(r"^(turn-\d+\.\d+)\.\d+$")
"""A message id of the updates this agent sends (`<turn>.<step>.<attempt>`, acp_updates.py)."""

PERMISSION_OPTIONS = [
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="always", name="Always allow this tool", kind="allow_always"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]

P = ParamSpec("P")
T = TypeVar("T")


def _protocol_errors(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """What the session layer refuses, as JSON-RPC errors: another tenant's session is not found
    (whose it is stays unsaid), bad input is invalid params, Temporal's refusal says why."""

    @wraps(method)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except (SessionNotFound, TenantError):
            raise RequestError.resource_not_found(_session_arg(kwargs)) from None
        except WorkflowUpdateFailedError as exc:
            raise RequestError.invalid_request({"details": str(exc.cause or exc)}) from None
        except ValueError as exc:
            raise RequestError.invalid_params({"details": str(exc)}) from None
        except RPCError as exc:
            raise RequestError.internal_error({"details": f"Temporal: {exc.message}"}) from None

    return run


def _session_arg(kwargs: dict[str, Any]) -> str | None:
    value = kwargs.get("session_id")
    return f"session:{value}" if isinstance(value, str) else None


@dataclass(frozen=True)
class Served:
    """The agent `session/new` starts, and its config (`start_session` keywords: a manifest or a
    registry config name)."""

    agent: str
    source: dict[str, Any]


@dataclass
class _Attached:
    """One session this connection follows."""

    session_id: str
    updates: Updates = field(default_factory=Updates)
    finished: dict[str, Event] = field(default_factory=dict)
    """`turn_finished` by turn id, for the prompts that wait for them."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False
    asking: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Permission requests in flight, by call id."""
    commands: dict[str, str] | None = None
    task: asyncio.Task[None] | None = None

    def poke(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class WolfAgent:
    """The ACP agent: a thin translation onto WolfClient (the acp.Agent protocol)."""

    def __init__(self, wolf: WolfClient, served: Served, principal: str | None = None) -> None:
        self.wolf = wolf
        self.served = served
        self.principal = principal or editor_principal()
        self.sessions: dict[str, _Attached] = {}
        self.conn: Client | None = None

    def on_connect(self, conn: Client) -> None:
        self.conn = conn

    @property
    def client(self) -> Client:
        if self.conn is None:
            raise RuntimeError("the agent is not connected")
        return self.conn

    async def initialize(self, protocol_version: int, **_: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(embedded_context=True),
                mcp_capabilities=McpCapabilities(http=True),
                session_capabilities=SessionCapabilities(
                    resume=SessionResumeCapabilities(), fork=SessionForkCapabilities()
                ),
            ),
            agent_info=Implementation(name="agentwolf", title="AgentWolf", version=version("agentwolf")),
        )

    # -- sessions ------------------------------------------------------------------------------

    @_protocol_errors
    async def new_session(
        self, cwd: str, mcp_servers: list[Any] | None = None, **_: Any
    ) -> NewSessionResponse:
        session_id = await self.wolf.start_session(
            self.served.agent,
            **self.served.source,
            session_servers=session_servers(mcp_servers),
            owner=self.principal,
        )
        self._attach(session_id, 0)
        return NewSessionResponse(session_id=session_id)

    @_protocol_errors
    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **_: Any
    ) -> LoadSessionResponse:
        status = await self._join(session_id, mcp_servers)
        messages, offset = await self._snapshot(session_id)
        updates = list(replay(messages))
        if status.turn_id is not None:
            updates += await self._held_results(session_id, status.turn_id, messages, offset)
        for update in updates:
            await self.client.session_update(session_id, update)
        attached = self._attach(session_id, offset)
        for pending in status.pending_approvals:
            self._ask(attached, pending)
        return LoadSessionResponse()

    @_protocol_errors
    async def resume_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **_: Any
    ) -> ResumeSessionResponse:
        status = await self._join(session_id, mcp_servers)
        attached = self._attach(session_id, await self.wolf.event_offset(session_id))
        for pending in status.pending_approvals:
            self._ask(attached, pending)
        return ResumeSessionResponse()

    @_protocol_errors
    async def fork_session(
        self,
        cwd: str,
        session_id: str,
        mcp_servers: list[Any] | None = None,
        agentwolf: dict[str, Any] | None = None,
        **_: Any,
    ) -> ForkSessionResponse:
        """A new session from a session of the served agent and config, cut where `agentwolf["at"]`
        (the request's `_meta`) says; the editor's MCP servers join the fork, which is its user's."""
        joining = session_servers(mcp_servers)
        await serving.session_of(self.wolf, self.served, session_id)
        made = await self.wolf.fork(session_id, at=fork_point(agentwolf), owner=self.principal)
        if joining:
            await self.wolf.join_servers(made.session_id, joining, owner=self.principal)
        self._attach(made.session_id, 0)
        return ForkSessionResponse(session_id=made.session_id)

    async def _join(self, session_id: str, servers: list[Any] | None) -> SessionStatus:
        """The session's status, once the client's MCP servers (if any) have joined it: a session of
        the served agent and config only (`agentwolf.access.runs`, the rule of every front end), and
        servers only into a session started for this user."""
        status = await serving.session_of(self.wolf, self.served, session_id)
        if joining := session_servers(servers):
            try:
                await self.wolf.join_servers(session_id, joining, owner=self.principal)
            except NotOwner:
                log.warning(
                    "session %s was started for another user: the editor's MCP servers do not join it",
                    session_id,
                )
        return status

    async def _snapshot(self, session_id: str) -> tuple[list[ModelMessage], int]:
        """The transcript and the offset of the first event after it: read until no event came in
        between (one did when the offset moved), so the replay and the follower neither miss nor
        repeat anything."""
        for _ in range(SNAPSHOT_TRIES):
            before = await self.wolf.event_offset(session_id)
            messages = await self.wolf.transcript(session_id)
            if await self.wolf.event_offset(session_id) == before:
                return messages, before
        log.warning("session %s kept changing while it was loaded: events may repeat", session_id)
        return messages, before

    async def _held_results(
        self, session_id: str, turn_id: str, messages: list[ModelMessage], offset: int
    ) -> list[Any]:
        """Results of the running turn's calls that finished but are not in its transcript yet (they
        join it with the step's next model request): from the turn's events before `offset`."""
        calls: dict[str, set[str]] = {"tool_call": set(), "tool_call_update": set()}
        for update in replay(messages):
            if isinstance(update, ToolCallStart | ToolCallProgress):
                calls[update.session_update].add(update.tool_call_id)
        waiting = calls["tool_call"] - calls["tool_call_update"]
        if not waiting or offset == 0:
            return []
        held = []
        async for position, event in self.wolf.events(session_id, 0, live=False):
            call_id = (event.call_id or "").partition("#")[0]
            if event.kind == "tool_call_finished" and event.turn_id == turn_id and call_id in waiting:
                held.append(tool_finished(call_id, event.outcome, event.text or ""))
            if position >= offset - 1:
                break
        return held

    def _attach(self, session_id: str, offset: int) -> _Attached:
        if (old := self.sessions.pop(session_id, None)) is not None and old.task is not None:
            old.task.cancel()
        attached = self.sessions[session_id] = _Attached(session_id)
        attached.task = asyncio.create_task(self._follow(attached, offset))
        return attached

    def _attached(self, session_id: str) -> _Attached:
        attached = self.sessions.get(session_id)
        if attached is None:
            raise RequestError.invalid_params(
                {"details": f"session {session_id!r} is not open here: session/new or session/load it"}
            )
        return attached

    # -- turns ---------------------------------------------------------------------------------

    @_protocol_errors
    async def prompt(self, prompt: list[Any], session_id: str, **_: Any) -> PromptResponse:
        attached = self._attached(session_id)
        if attached.ended:
            raise RequestError.invalid_request({"details": f"session {session_id!r} has ended"})
        text = _prompt_text(prompt)
        attached.updates.own.append(text)
        try:
            turn_id = await self.wolf.prompt(session_id, text)
        except BaseException:
            attached.updates.own.remove(text)  # no turn: a turn with this prompt from elsewhere shows it
            raise
        while turn_id not in attached.finished and not attached.ended:
            await attached.changed.wait()
        finished = attached.finished.pop(turn_id, None)
        if finished is None:
            raise RequestError.internal_error({"details": "the session ended before the turn did"})
        return PromptResponse(stop_reason=_stop_reason(finished))

    async def cancel(self, session_id: str, **_: Any) -> None:
        if session_id in self.sessions:
            try:
                await self.wolf.interrupt(session_id, "cancelled in the editor (ACP session/cancel)")
            except (RPCError, ValueError) as exc:
                log.warning("could not interrupt %s: %s", session_id, exc)

    # -- following -----------------------------------------------------------------------------

    async def _follow(self, attached: _Attached, offset: int) -> None:
        """Send the session's updates until it ends; a broken subscription is taken up again from
        the last durable event (text already sent is skipped by its index)."""
        failures = 0
        try:
            while failures <= FOLLOW_RETRIES:
                try:
                    async for position, event in self.wolf.events(attached.session_id, offset):
                        failures = 0
                        if event.kind not in LIVE_KINDS:
                            offset = position + 1
                        await self._on_event(attached, event)
                    return
                except ConnectionError:  # the editor went away
                    return
                except Exception as exc:  # noqa: BLE001 - followed again, or given up on below
                    failures += 1
                    log.warning("following %s failed (%s): retrying", attached.session_id, exc)
                    await asyncio.sleep(0.5 * failures)
        finally:
            attached.ended = True
            attached.poke()

    async def _on_event(self, attached: _Attached, event: Event) -> None:
        for update in attached.updates.of(event):
            await self.client.session_update(attached.session_id, update)
        if event.kind == "approval_requested" and event.call_id and event.tool:
            self._ask(
                attached, PendingApproval(call_id=event.call_id, tool=event.tool, args=event.args or {})
            )
        elif event.kind == "approval_resolved" and (asking := attached.asking.pop(event.call_id or "", None)):
            asking.cancel()  # answered elsewhere (another client, a timeout)
        elif event.kind == "compiled":
            await self._send_commands(attached)
        elif event.kind == "turn_finished" and event.turn_id:
            attached.finished[event.turn_id] = event
            attached.poke()

    async def _send_commands(self, attached: _Attached) -> None:
        commands = await self.wolf.commands(attached.session_id)
        if commands == attached.commands:
            return
        attached.commands = commands
        update = AvailableCommandsUpdate(
            session_update="available_commands_update",
            available_commands=[
                AvailableCommand(name=name.removeprefix("/"), description=description)
                for name, description in sorted(commands.items())
            ],
        )
        await self.client.session_update(attached.session_id, update)

    def _ask(self, attached: _Attached, pending: PendingApproval) -> None:
        if pending.call_id not in attached.asking:
            task = asyncio.create_task(self._permission(attached, pending))
            attached.asking[pending.call_id] = task
            task.add_done_callback(lambda _: attached.asking.pop(pending.call_id, None))

    async def _permission(self, attached: _Attached, pending: PendingApproval) -> None:
        """Ask the editor; its answer goes to the session (a cancelled request denies the call)."""
        call = ToolCallUpdate(
            tool_call_id=pending.call_id.partition("#")[0],
            title=title(pending.tool, pending.args),
            status="pending",
            raw_input=pending.args,
        )
        sid = attached.session_id
        try:
            answer = await self.client.request_permission(
                session_id=sid, tool_call=call, options=PERMISSION_OPTIONS
            )
            outcome = answer.outcome
            if isinstance(outcome, AllowedOutcome) and outcome.option_id in ("allow", "always"):
                await self.wolf.approve(sid, pending.call_id, always=outcome.option_id == "always")
            else:
                reason = (
                    "cancelled in the editor" if outcome.outcome == "cancelled" else "rejected in the editor"
                )
                await self.wolf.deny(sid, pending.call_id, reason)
        except (ValueError, RequestError, ConnectionError, RPCError) as exc:  # answered elsewhere, gone
            log.info("permission for %s in %s: %s", pending.call_id, sid, exc)

    async def close(self) -> None:
        tasks = [t for a in self.sessions.values() for t in (a.task, *a.asking.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def editor_principal() -> str:
    """Who this editor acts for: the user running `wolf acp` on this host (the process has no key of
    its own; its Temporal credentials are the tenant's). Sessions record it as their owner."""
    return f"acp:{getpass.getuser()}@{socket.gethostname()}"


def session_servers(servers: list[Any] | None) -> dict[str, McpServerConfig]:
    """The client's MCP servers as the session's own (stdio and streamable HTTP; SSE and ACP-tunnelled
    ones are refused). Whether a command may run is the worker policy's call, when the agent compiles."""
    out: dict[str, McpServerConfig] = {}
    for server in servers or []:
        if isinstance(server, McpServerStdio):
            env = {v.name: v.value for v in server.env}
            config = McpServerConfig(command=server.command, args=server.args, env=env)
        elif isinstance(server, HttpMcpServer):
            config = McpServerConfig(url=server.url, headers={h.name: h.value for h in server.headers})
        else:
            raise ValueError(f"MCP server {server.name!r}: only stdio and http servers can join a session")
        if not server.name or server.name in out:
            raise ValueError(f"MCP server names must be present and unique ({server.name!r})")
        out[server.name] = config
    return out


def fork_point(meta: dict[str, Any] | None) -> str | None:
    """Where `session/fork` cuts: after the step of a message id this agent sent (`turn-4.2.0`), at a
    fork point (`4`, `4.2`), or (None) after the last finished turn."""
    if meta is not None and not isinstance(meta, dict):
        raise ValueError(f'_meta.agentwolf is an object such as {{"at": "4.2"}}, not {meta!r}')
    at = (meta or {}).get("at")
    if at is None:
        return None
    if not isinstance(at, str):
        raise ValueError(f"_meta.agentwolf.at is a message id or a fork point such as 4.2, not {at!r}")
    message = MESSAGE_ID.match(at.strip())
    return message[1] if message else at


def _prompt_text(blocks: list[Any]) -> str:
    """Text blocks as they are; embedded files and links as context the model can read."""
    parts: list[str] = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(f"<context uri={block.resource.uri!r}>\n{block.resource.text}\n</context>")
        elif kind == "resource_link":
            parts.append(f"[{block.name}]({block.uri})")
        else:
            raise ValueError(f"this agent takes text and embedded text resources, not {kind!r} blocks")
    text = "\n\n".join(p for p in parts if p)
    if not text.strip():
        raise ValueError("the prompt has no text")
    return text


def _stop_reason(finished: Event) -> StopReason:
    if finished.outcome == "completed":
        return "end_turn"
    if finished.outcome == "interrupted":
        return "cancelled"
    if finished.outcome == "limit":
        return "max_tokens" if "token" in (finished.text or "") else "max_turn_requests"
    raise RequestError.internal_error({"details": finished.text or "the turn failed", "outcome": "failed"})


async def serve_stdio(wolf: WolfClient, served: Served) -> None:
    """Serve one editor on stdin/stdout until it closes them."""
    reader, writer = await stdio_streams(limit=MAX_LINE)
    agent = WolfAgent(wolf, served)
    connection = AgentSideConnection(
        cast(Agent, agent),  # what it does not implement, the SDK answers with "method not found"
        NdjsonTransport(reader, writer),
        listening=False,
        use_unstable_protocol=True,  # session/resume
    )
    try:
        await connection.listen()
    finally:
        await agent.close()
        with contextlib.suppress(Exception):
            await connection.close()
