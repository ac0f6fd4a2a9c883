"""`wolf.workspace`: a workspace tool call, or a turn's snapshot, on the host whose folder holds the
session's workspace (its home task queue, as an ACP agent's turn runs on its process's host).

A `bash` retried after a worker loss is never run again: its first attempt may have changed part of
the folder, so the folder goes back to the last snapshot and the model is told so. The file tools
run again (they are exact: the same write twice is one write)."""

from __future__ import annotations

import asyncio
import shutil

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentwolf import workspace_store
from agentwolf.access import check_caller
from agentwolf.activities import capabilities
from agentwolf.activities.acp import home_queue
from agentwolf.activities.session import SessionActivities
from agentwolf.activities.session_io import after_lost_attempt, heartbeating
from agentwolf.hosts import workspaces
from agentwolf.hosts.bubblewrap import BubblewrapBackend, SandboxUnavailable
from agentwolf.hosts.host import AgentHost
from agentwolf.workflows.contracts import HostRef
from agentwolf.workflows.workspace_tools import WorkspaceCall, WorkspaceResult


def interrupted(turn: int | None) -> str:
    state = f"as of turn {turn}" if turn else "as it was when the session started"
    return f"interrupted by a worker loss; the workspace is {state} (the command was not run again)"


class WorkspaceActivities:
    def __init__(self, sessions: SessionActivities) -> None:
        self.sessions = sessions

    @activity.defn(name="wolf.workspace")
    async def call(self, inp: WorkspaceCall) -> WorkspaceResult:
        return await self._call(inp, None)

    @activity.defn(name="wolf.workspace_here")
    async def call_here(self, inp: WorkspaceCall) -> WorkspaceResult:
        """A read-only tool as a local activity of the worker running the session, when that worker
        is on the workspace's home host and has the session's host (else `elsewhere`: the workflow
        asks the home instead; a local activity cannot query its own workflow for the manifest)."""
        host = self.sessions.hosts.find(inp.ref.config_id, inp.ref.tenant)
        if inp.home != home_queue(activity.info().task_queue) or host is None:
            return WorkspaceResult(elsewhere=True)
        return await self._call(inp, host)

    @activity.defn(name="wolf.workspace_release")
    async def release(self, ref: HostRef) -> None:
        """The session closed: its folder goes (its snapshots stay in the payload store)."""
        check_caller(ref.workflow_id, ref.tenant, self.sessions.hosts.tenant)
        await asyncio.to_thread(workspaces.remove, workspaces.folder(ref.tenant, ref.workflow_id))

    async def _call(self, inp: WorkspaceCall, host: AgentHost | None) -> WorkspaceResult:
        hosts = self.sessions.hosts
        check_caller(inp.ref.workflow_id, inp.ref.tenant, hosts.tenant)
        cut = inp.tool == "bash" and await after_lost_attempt()  # first: see session.call_tool
        if inp.tool is not None and host is None:  # its agent's tool hooks run around the call
            host = await self.sessions.host(inp.ref)
        root = workspaces.folder(inp.ref.tenant, inp.ref.workflow_id)
        try:
            ws = workspaces.backend(root, inp.settings, hosts.policy.workspaces)
        except SandboxUnavailable as exc:
            raise ApplicationError(str(exc), type="SandboxUnavailable", non_retryable=True) from None
        converter = activity.client().data_converter
        uid = ws.uid if isinstance(ws, BubblewrapBackend) else None

        async def work() -> WorkspaceResult:
            async with workspaces.locked(root):  # waiting for it heartbeats too
                if cut:
                    if inp.last is not None:
                        await workspace_store.restore(
                            converter, inp.last.tree, root, workspaces.off_loop, uid
                        )
                    else:
                        await asyncio.to_thread(shutil.rmtree, root, True)
                    turn = inp.last.turn if inp.last else None
                    return WorkspaceResult(content=interrupted(turn), is_error=True, restored=turn or 0)
                note = await workspaces.prepare(inp, root, ws, converter)
                if inp.tool is None:
                    return WorkspaceResult(snapshot=await workspaces.snapshot(root, converter, inp.turn))
                assert host is not None
                result = await capabilities.call_builtin(
                    host,
                    hosts.manifests[inp.ref.config_id],
                    inp.as_tool_call(),
                    lambda args: workspaces.run_tool(ws, root, inp.tool or "", args, inp.settings),
                    WorkspaceResult,
                )
            if note is None:
                return result
            assert inp.last is not None
            return result.model_copy(
                update={"content": f"{note}\n{result.content}", "restored": inp.last.turn}
            )

        return await heartbeating(work())
