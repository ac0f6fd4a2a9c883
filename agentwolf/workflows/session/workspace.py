"""The session's workspace in the workflow: its tool calls as `wolf.workspace` activities on its home
host's task queue, a snapshot at each turn's end that changed files, and the state a fork or rewind
starts from (workflows/workspace_tools.py has the records).

A home nobody serves any more (its host is gone) is replaced once, as an ACP agent's is: the new
host finds no folder and restores the last snapshot, and the model is told which turn's state it
got. Imported passed through, like tools.py: it calls only `workflow.*` and deterministic helpers.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout

from agentwolf.config.manifest import AgentConfig, WorkspaceSettings
from agentwolf.workflows.contracts import HostRef, ToolCallOutput
from agentwolf.workflows.session.turn import HEARTBEAT_TIMEOUT, short
from agentwolf.workflows.workspace_tools import (
    READ_ONLY,
    WorkspaceCall,
    WorkspaceResult,
    WorkspaceState,
    line_turns,
    turn_number,
)

if TYPE_CHECKING:
    from agentwolf.workflows.session.core import SessionCore

WORKSPACES = "workspaces"  # patch: workspace tools and turn-end snapshots run as `wolf.workspace`

HOME_WAIT = timedelta(minutes=2)
"""How long a call waits for its home host before the workspace moves to another one."""
WORKSPACE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
SNAPSHOT_TIMEOUT = timedelta(minutes=10)
LOCAL_READ_TIMEOUT = timedelta(seconds=60)


def workspace_settings(agent: AgentConfig | None) -> WorkspaceSettings | None:
    return agent.workspace if agent is not None else None


async def _on_home(state: WorkspaceState, call: WorkspaceCall, timeout: timedelta) -> WorkspaceResult:
    """`call` on the workspace's home host, placing it first; a home nobody serves is replaced once."""
    for _ in range(2):
        if state.home is None:
            state.home = await workflow.execute_activity(
                "wolf.acp_home", result_type=str, start_to_close_timeout=timedelta(seconds=30)
            )
        try:
            return await workflow.execute_activity(
                "wolf.workspace",
                call,
                result_type=WorkspaceResult,
                task_queue=state.home,
                start_to_close_timeout=timeout,
                schedule_to_start_timeout=HOME_WAIT,
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=WORKSPACE_RETRY,
                summary=short(f"{call.tool or 'snapshot'} {next(iter(call.arguments.values()), '')}"),
            )
        except ActivityError as err:
            cause = err.cause
            if not (isinstance(cause, ActivityTimeout) and cause.type == TimeoutType.SCHEDULE_TO_START):
                raise
            state.home = None
    raise NoWorkspaceHost()


class NoWorkspaceHost(RuntimeError):
    """No worker host serves workspaces (none polls the home queues)."""

    def __init__(self) -> None:
        super().__init__("no worker host serves this session's workspace")


async def run_workspace(
    state: WorkspaceState,
    ref: HostRef,
    tool: str,
    arguments: dict[str, Any],
    settings: WorkspaceSettings,
    turn: int,
    line: set[int],
    *,
    agent: str,
    turn_id: str,
    call_id: str,
) -> ToolCallOutput:
    """One workspace tool call, permitted already; recorded like any tool result. `line`: the turn
    numbers of the session's line (the snapshots a restore may use); the agent, turn id and call id
    are what its capabilities' tool hooks see."""
    call = WorkspaceCall(
        ref=ref,
        tool=tool,
        arguments=arguments,
        settings=settings,
        last=state.last(line),
        restore=state.restore,
        epoch=state.epoch,
        turn=turn,
        agent=agent,
        turn_id=turn_id,
        call_id=call_id,
    )
    timeout = timedelta(seconds=settings.bash_timeout_s) + SNAPSHOT_TIMEOUT
    result = None
    if tool in READ_ONLY and state.home is not None and not state.restore:
        # A read on the home host's own worker skips the server round trip: safe to repeat.
        result = await workflow.execute_local_activity(
            "wolf.workspace_here",
            call.model_copy(update={"home": state.home}),
            result_type=WorkspaceResult,
            start_to_close_timeout=LOCAL_READ_TIMEOUT,
            retry_policy=WORKSPACE_RETRY,
            summary=short(f"{tool} {next(iter(arguments.values()), '')}"),
        )
    try:
        if result is None or result.elsewhere:
            result = await _on_home(state, call, timeout)
    except NoWorkspaceHost as exc:
        return ToolCallOutput(content=str(exc), is_error=True)
    state.restore = False
    if tool not in READ_ONLY:
        state.changed = True
    return ToolCallOutput(content=result.content, is_error=result.is_error)


async def snapshot_turn(
    state: WorkspaceState, ref: HostRef, settings: WorkspaceSettings, turn: int, line: set[int]
) -> None:
    """At a turn's end: the folder into the payload store, if a tool may have changed it. A failure
    (or an interrupt arriving meanwhile) is said, not raised, so the turn's end is still recorded: the
    last snapshot stays the one a restore would use, and the next turn's end tries again."""
    if not state.changed or state.home is None:
        return
    call = WorkspaceCall(ref=ref, tool=None, settings=settings, last=state.last(line), turn=turn)
    try:
        result = await _on_home(state, call, SNAPSHOT_TIMEOUT)
    except (ActivityError, NoWorkspaceHost, asyncio.CancelledError) as err:
        workflow.logger.warning("the workspace snapshot of turn %d failed: %r", turn, err)
        return
    if result.snapshot is not None:
        state.snapshots = [s for s in state.snapshots if s.turn != turn] + [result.snapshot]
        state.changed = False


def session_settings(core: SessionCore) -> WorkspaceSettings | None:
    """The session's agent's workspace settings (None: the agent has no workspace)."""
    return workspace_settings(core.inp.manifest.agents.get(core.inp.agent))


async def session_call(
    core: SessionCore, settings: WorkspaceSettings, tool: str, arguments: dict[str, Any], call_id: str
) -> ToolCallOutput:
    """A workspace tool call of the running turn (the workspace made on the session's first call)."""
    line = line_turns([m.turn_id for m in core.log.turns])
    turn_id = core.running.turn_id or ""
    state, turn = core.workspace(), turn_number(turn_id)
    return await run_workspace(
        state,
        core.ref(),
        tool,
        arguments,
        settings,
        turn,
        line,
        agent=core.inp.agent,
        turn_id=turn_id,
        call_id=call_id,
    )


async def turn_ended(core: SessionCore, turn_id: str) -> None:
    """A turn that may have changed its workspace's files ends with their snapshot."""
    state, settings = core.inp.workspace, session_settings(core)
    if state is None or settings is None or not state.changed:
        return
    line = line_turns([m.turn_id for m in core.log.turns])
    await snapshot_turn(state, core.ref(), settings, turn_number(turn_id), line)


async def release_workspace(state: WorkspaceState, ref: HostRef) -> None:
    """The session closes: its home host removes the folder (the snapshots stay, for forks and `wolf
    workspace`). Said, not raised, when the host is gone: its folder is left behind."""
    if state.home is None:
        return
    try:
        await workflow.execute_activity(
            "wolf.workspace_release",
            ref,
            task_queue=state.home,
            start_to_close_timeout=timedelta(minutes=2),
            schedule_to_start_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=2),
        )
    except ActivityError as err:
        workflow.logger.warning("removing the workspace folder failed: %s", err.cause)
