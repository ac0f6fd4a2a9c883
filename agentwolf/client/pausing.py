"""Holding a session (`wolf pause` / `wolf unpause`) with Temporal's workflow pause: its next step
waits without cancelling anything, e.g. while a tool's backend is down. Signals (steers, approvals)
wait with it and apply on unpause; prompts are refused meanwhile. The server must allow it
(`frontend.WorkflowPauseEnabled`, which the local stack turns on)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable

from temporalio.api.workflowservice.v1 import PauseWorkflowExecutionRequest, UnpauseWorkflowExecutionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.access import TenantError
from agentwolf.workflows.types import workflow_id


class PauseError(Exception):
    """A pause or unpause that cannot be done, said in one sentence."""


def session_workflow(tenant: str, session_id: str) -> str:
    """The session's workflow id; a full id (`wolf/<tenant>/<id>`) only of this tenant."""
    if session_id.startswith("wolf/") and session_id.count("/") >= 2:
        _, owner, session_id = session_id.split("/", 2)
        if owner != tenant:
            raise TenantError(f"session {session_id!r} belongs to tenant {owner!r}, not to {tenant!r}")
    return workflow_id(tenant, session_id)


async def pause(client: Client, tenant: str, session_id: str, reason: str) -> None:
    wid = session_workflow(tenant, session_id)
    await _call(
        client.workflow_service.pause_workflow_execution(
            PauseWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_id=wid,
                reason=reason,
                identity=client.identity,
                request_id=str(uuid.uuid4()),
            )
        ),
        session_id,
    )


async def unpause(client: Client, tenant: str, session_id: str) -> None:
    wid = session_workflow(tenant, session_id)
    await _call(
        client.workflow_service.unpause_workflow_execution(
            UnpauseWorkflowExecutionRequest(
                namespace=client.namespace,
                workflow_id=wid,
                reason="wolf unpause",
                identity=client.identity,
                request_id=str(uuid.uuid4()),
            )
        ),
        session_id,
    )


async def _call(request: Awaitable[object], session_id: str) -> None:
    try:
        await request
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise PauseError(f"no session {session_id!r}") from None
        if "not enabled" in exc.message:
            raise PauseError(
                "this Temporal server has workflow pause off: start it with "
                "--dynamic-config-value frontend.WorkflowPauseEnabled=true (the local stack does)"
            ) from None
        if exc.status in (RPCStatusCode.FAILED_PRECONDITION, RPCStatusCode.INVALID_ARGUMENT):
            raise PauseError(f"session {session_id!r}: {exc.message}") from None
        raise
