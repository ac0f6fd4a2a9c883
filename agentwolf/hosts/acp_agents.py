"""External agents over the Agent Client Protocol: the live process of one session's ACP agent.

The host owns it (like an MCP connection): a turn's activity drives it step by step, and between steps
(while a person answers its permission request) the prompt stays in flight in the process. A worker
that dies takes the process with it; the next attempt loads the session (`session/load`) or says the
agent's own state is lost. Client side of the ACP Python SDK (`acp.spawn_agent_process`).

The agent runs with what AgentWolf gives it, not what its working directory says: a home of its own
(HOME, CLAUDE_CONFIG_DIR), the session mode the manifest names (set after every new or loaded
session), and, for Claude-based adapters, no project settings unless the manifest trusts them.

An agent whose session has a workspace is told the client reads and writes text files: its
`fs/read_text_file` and `fs/write_text_file` are served from the workspace folder (through the
workspace's backend, paths confined to the folder), so what it writes is in the session's snapshots."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, cast

import psutil
from acp import PROTOCOL_VERSION, Client, RequestError, spawn_agent_process, text_block
from acp.client.connection import ClientSideConnection
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    Implementation,
    PermissionOption,
    PromptResponse,
    ReadTextFileResponse,
    RequestPermissionResponse,
    SessionModeState,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    WriteTextFileResponse,
)
from pydantic_ai.workspaces import LocalWorkspaceBackend, WorkspaceError

from agentwolf.access import NAME
from agentwolf.hosts import workspaces
from agentwolf.paths import data_dir
from agentwolf.workflows.acp_types import (
    AcpOption,
    AcpPermission,
    AcpSession,
    AcpToolCall,
    AcpTurnInput,
    AcpTurnOutput,
)

log = logging.getLogger(__name__)

CANCEL_GRACE = 5.0
"""Seconds an agent has to end its prompt after `session/cancel` before the process is stopped."""


DEFAULT_MODE = "default"
"""The mode set when the manifest names none, if the agent offers it (Claude's adapters do)."""
USER_SETTINGS_ONLY = {"claudeCode": {"options": {"settingSources": ["user"]}}}
"""`_meta` for a new or loaded session: Claude-based adapters then read the settings of the agent's
own home only, not the working directory's `.claude/` (allow lists, hooks) or CLAUDE.md. Agents
that do not know the key ignore it, as ACP asks."""


class AcpAgentGone(Exception):
    """The agent process ended or broke the protocol; a retry starts it again."""


class AcpModeRefused(Exception):
    """The agent does not offer the session mode the manifest names."""


def agent_home(tenant: str, agent: str) -> Path:
    """The agent process's own home under the worker's data folder (private; kept across restarts,
    since agents keep their sessions there): the worker user's settings and logins are not its own."""
    name = agent if NAME.fullmatch(agent) else "agent-" + hashlib.sha256(agent.encode()).hexdigest()[:16]
    home = data_dir() / "acp" / tenant / name
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    return home


def agent_env(home: Path, env: dict[str, str]) -> dict[str, str]:
    """The agent's environment: its own home (Claude Code's config folder in it), then the manifest's
    variables, which may name another."""
    return {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude"), **env}


class AcpRun:
    """One session's agent process and its ACP session, driven a step at a time; the ACP client side
    for it (the methods the agent calls). The fs capability is announced when the session has a
    workspace (`workspace` set before `start`); no terminal capability is, so that stays out."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.conn: ClientSideConnection | None = None
        self.session: AcpSession | None = None
        self.turn_id: str | None = None
        self.prompt: asyncio.Task[PromptResponse] | None = None
        self.text = ""
        self.thinking = ""
        self.tool_calls: dict[str, AcpToolCall] = {}
        self.asked_as: dict[str, tuple[str | None, Any]] = {}
        """Each tool call's kind and raw input as the agent announced them (a permission request may
        repeat only its id)."""
        self.answers: dict[str, str] = {}
        self.asking: tuple[AcpPermission, asyncio.Future[str]] | None = None
        self.replaying = False
        self._changed = asyncio.Event()
        self._stack = AsyncExitStack()
        self._process: Any = None
        self.workspace: tuple[LocalWorkspaceBackend, Path] | None = None
        """The session's workspace backend and folder, which serve the agent's `fs/*` requests."""
        self.wrote = False
        """The agent wrote to the workspace since the last step reported it."""

    async def start(self, command: str, args: list[str], env: dict[str, str], cwd: str) -> bool:
        """Spawn and initialize the agent; whether it can load sessions."""
        conn, self._process = await self._stack.enter_async_context(
            spawn_agent_process(cast(Client, self), command, *args, env=env, cwd=cwd)
        )
        self.conn = conn
        fs = self.workspace is not None
        init = await conn.initialize(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs)
            ),
            client_info=Implementation(name="agentwolf", version="1"),
        )
        return bool(init.agent_capabilities and init.agent_capabilities.load_session)

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    async def open(
        self,
        recorded: AcpSession | None,
        cwd: str,
        loadable: bool,
        mode: str | None = DEFAULT_MODE,
        project_settings: bool = False,
    ) -> str:
        """Attach to the recorded session (loaded, its replayed updates not shown again) or a new one,
        in `mode`; how: `new`, `loaded` or `lost`."""
        assert self.conn is not None
        meta: dict[str, Any] = {} if project_settings else USER_SETTINGS_ONLY
        if recorded is not None and recorded.loadable and loadable:
            self.replaying = True
            try:
                loaded = await self.conn.load_session(
                    cwd=recorded.cwd, session_id=recorded.session_id, **meta
                )
                self.session = recorded
                await self._keep_mode(loaded.modes, mode)
                return "loaded"
            except RequestError as exc:  # an agent that cannot load it after all: state lost
                log.warning("%s: session/load %s failed: %s", self.label, recorded.session_id, exc)
            finally:
                self.replaying = False
        created = await self.conn.new_session(cwd=cwd, **meta)
        self.session = AcpSession(session_id=created.session_id, cwd=cwd, loadable=loadable)
        await self._keep_mode(created.modes, mode)
        return "new" if recorded is None else "lost"

    async def _keep_mode(self, modes: SessionModeState | None, mode: str | None) -> None:
        """Put the session in `mode`, whatever mode the agent's (or its checkout's) settings chose."""
        assert self.conn is not None and self.session is not None
        offered = [m.id for m in modes.available_modes] if modes else []
        if mode is None or (modes is not None and modes.current_mode_id == mode):
            return
        if mode not in offered:
            if mode == DEFAULT_MODE:
                return
            raise AcpModeRefused(
                f"{self.label} offers no session mode {mode!r} (it offers: {', '.join(offered) or 'none'})"
            )
        await self.conn.set_session_mode(session_id=self.session.session_id, mode_id=mode)

    async def step(self, inp: AcpTurnInput, prompt: str) -> AcpTurnOutput:
        """Run the turn until it ends or asks for a permission nobody answered yet."""
        assert self.conn is not None and self.session is not None
        self.text, self.thinking = "", ""  # this step's
        starting = self.prompt is None or self.turn_id != inp.turn_id
        if starting:  # answers hold for one turn: an agent may reuse its tool call ids
            await self.stop_prompt()
            self.turn_id, self.tool_calls, self.asked_as, self.answers = inp.turn_id, {}, {}, {}
        self.answers.update(inp.answers)
        if self.asking is not None and self.asking[0].tool_call_id in self.answers:
            self.asking[1].set_result(self.answers[self.asking[0].tool_call_id])
            self.asking = None
        running = self.prompt
        if starting or running is None:
            running = self.prompt = asyncio.create_task(
                self.conn.prompt(session_id=self.session.session_id, prompt=[text_block(prompt)])
            )
        while self.asking is None and not running.done():
            self._changed.clear()
            waiter = asyncio.ensure_future(self._changed.wait())
            await asyncio.wait({waiter, running}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        out = AcpTurnOutput(
            session=self.session,
            text=self.text,
            tool_calls=list(self.tool_calls.values()),
            workspace_changed=self.wrote,
        )
        self.wrote = False
        if self.asking is not None:
            return out.model_copy(update={"permission": self.asking[0]})
        self.prompt = None
        try:
            response = running.result()
        except RequestError as exc:
            raise AcpAgentGone(f"{self.label}: session/prompt failed: {exc}") from None
        except (ConnectionError, EOFError, RuntimeError) as exc:
            raise AcpAgentGone(f"{self.label}: the agent process stopped: {exc}") from None
        return out.model_copy(update={"stop_reason": response.stop_reason})

    async def stop_prompt(self) -> None:
        """`session/cancel` (an interrupt): the agent ends its prompt; a waiting permission is cancelled."""
        if self.prompt is None:
            return
        if self.asking is not None:
            self.asking[1].set_result("")
            self.asking = None
        if self.conn is not None and self.session is not None and not self.prompt.done():
            with contextlib.suppress(Exception):
                await self.conn.cancel(session_id=self.session.session_id)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(self.prompt), CANCEL_GRACE)
        if not self.prompt.done():
            self.prompt.cancel()
        self.prompt = None

    async def close(self) -> None:
        if self.prompt is not None:
            self.prompt.cancel()
        spawned = _descendants(self._process)
        with contextlib.suppress(Exception):
            await self._stack.aclose()
        await _stop(spawned)

    # -- the ACP client side: what the agent calls --------------------------------------------------

    async def session_update(self, session_id: str, update: Any, **_: Any) -> None:
        if self.replaying:  # session/load replays the conversation: shown once already
            return
        if isinstance(update, AgentMessageChunk) and isinstance(update.content, TextContentBlock):
            self.text += update.content.text
        elif isinstance(update, AgentThoughtChunk) and isinstance(update.content, TextContentBlock):
            self.thinking += update.content.text
        elif isinstance(update, ToolCallStart | ToolCallProgress):
            kind, raw_input = self.asked_as.get(update.tool_call_id, (None, None))
            self.asked_as[update.tool_call_id] = (
                update.kind or kind,
                raw_input if update.raw_input is None else update.raw_input,
            )
            known = self.tool_calls.get(update.tool_call_id)
            self.tool_calls[update.tool_call_id] = AcpToolCall(
                call_id=update.tool_call_id,
                title=update.title or (known.title if known else update.tool_call_id),
                status=update.status or (known.status if known else None),
            )
        self._changed.set()

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **_: Any
    ) -> RequestPermissionResponse:
        key = tool_call.tool_call_id
        if key not in self.answers:  # else answered already (before a worker loss): delivered once
            kind, raw_input = self.asked_as.get(key, (None, None))
            asked = AcpPermission(
                tool_call_id=key,
                title=tool_call.title or (self.tool_calls[key].title if key in self.tool_calls else key),
                kind=tool_call.kind or kind or "other",
                raw_input=raw_input if tool_call.raw_input is None else tool_call.raw_input,
                options=[AcpOption(option_id=o.option_id, name=o.name, kind=o.kind) for o in options],
            )
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            self.asking = (asked, future)
            self._changed.set()
            self.answers[key] = await future
        option = self.answers[key]
        if not option:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(option_id=option, outcome="selected"))

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **_: Any
    ) -> ReadTextFileResponse:
        args = {"path": path, "offset": line, "limit": limit}
        return ReadTextFileResponse(content=await self._in_workspace(workspaces.read_file, args))

    async def write_text_file(
        self, session_id: str, path: str, content: str, **_: Any
    ) -> WriteTextFileResponse:
        self.wrote = True  # before: a write that fails half way may have changed the folder
        await self._in_workspace(workspaces.write_file, {"path": path, "content": content})
        return WriteTextFileResponse()

    async def _in_workspace(self, tool: Any, args: dict[str, Any]) -> str:
        """A file tool on the workspace (its lock held), its refusal the agent's error: a path outside
        the folder (`../`, an absolute path elsewhere) is refused, never read or written."""
        if self.workspace is None:  # not announced: an agent that calls anyway
            raise RequestError.method_not_found("fs (this session has no workspace)")
        ws, root = self.workspace
        try:
            async with workspaces.locked(root):
                return str(await tool(ws, root, args))
        except FileNotFoundError:
            raise RequestError.resource_not_found(str(args["path"])) from None
        except (workspaces.ToolError, OSError, UnicodeDecodeError, WorkspaceError) as exc:
            raise RequestError.invalid_params({"path": args["path"], "error": str(exc)}) from None


def _descendants(process: Any) -> list[psutil.Process]:
    """The live agent's own processes. The SDK stops only the one it started (stdin closed, then
    SIGTERM): an npm launcher such as codex-acp's dies of it, and the agent it started, which ignores
    the end of its input, would live on."""
    if process is None or process.returncode is not None:
        return []
    try:
        return psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        return []


async def _stop(processes: list[psutil.Process]) -> None:
    """SIGTERM what is left of them, SIGKILL after CANCEL_GRACE (psutil tells a reused PID apart)."""
    left = [p for p in processes if p.is_running()]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = await asyncio.to_thread(psutil.wait_procs, left, timeout=CANCEL_GRACE)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
