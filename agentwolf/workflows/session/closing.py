"""What a closing session lets go: its ACP agent, its workspace's folder, the MCP servers its
client brought. Imported passed through, like loop.py: it calls only `workflow.*` and deterministic
helpers."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError

import agentwolf.workflows.session.workspace as workspace
from agentwolf.workflows.session.turn import RELEASE_SESSION_SERVERS, TOOL_RETRY, cause_message

if TYPE_CHECKING:
    from agentwolf.workflows.session.acp import AcpRunner
    from agentwolf.workflows.session.core import SessionCore

RELEASE_FAILURE_SAID = "release-failure-said"  # patch: a failed release at close is an event, not a failure


async def release(core: SessionCore, acp: AcpRunner) -> None:
    """The session closes: the MCP servers its client brought stop (on the worker this runs on;
    another that started one stops it when idle), and its workspace's folder goes. Only sessions
    that have such servers (or a workspace) run it.

    A release that fails for good is said (log, event), not raised: the session has closed
    already (`session_closed` is out), and the pool's idle reaper stops the servers anyway."""
    await acp.release()
    if core.inp.workspace is not None:
        await workspace.release_workspace(core.inp.workspace, core.ref())
    if not (core.inp.session_servers and workflow.patched(RELEASE_SESSION_SERVERS)):
        return
    try:
        await workflow.execute_activity(
            "wolf.release_session",
            core.ref(),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=TOOL_RETRY,
        )
    except ActivityError as err:
        if not workflow.patched(RELEASE_FAILURE_SAID):
            raise  # runs recorded before failed here
        workflow.logger.warning("releasing the client's MCP servers failed: %s", cause_message(err))
        core.publish("error", text=f"the client's MCP servers were not released: {cause_message(err)}")
