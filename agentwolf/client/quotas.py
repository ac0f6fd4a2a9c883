"""What provider quotas shows a user: each endpoint's quota workflow (`wolf quotas`), and what a
session's model request waits for (`wolf status`), read from the pending activity's heartbeat
details (agentwolf/hosts/quotas.py), so no workflow is asked to keep it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.service import RPCError

from agentwolf.workflows.quotas import QUOTA_WORKFLOW, QuotaStatus, QuotaWorkflow


class SessionWait(BaseModel):
    """A session's model request waiting for its provider's limits (from its `LiveText` details)."""

    model_config = ConfigDict(extra="ignore")

    waiting: str
    """`rate_limited: <what>` (cooldown, rpm, input_tpm, output_tpm, concurrency, reserved, probing,
    queued)."""
    resumes_at: datetime | None = None

    def resumes_in(self, now: datetime | None = None) -> float | None:
        if self.resumes_at is None:
            return None
        return max(0.0, (self.resumes_at - (now or datetime.now(UTC))).total_seconds())

    def line(self) -> str:
        """`waiting: rate_limited, resumes in 12s (cooldown)`."""
        kind, _, reason = self.waiting.partition(": ")
        seconds = self.resumes_in()
        when = f", resumes in {seconds:.0f}s" if seconds is not None else ""
        return f"waiting: {kind}{when}" + (f" ({reason})" if reason else "")


async def session_wait(client: Client, workflow_id: str) -> SessionWait | None:
    """What the session's running model request waits for, or None."""
    described = await client.get_workflow_handle(workflow_id).describe()
    for pending in described.raw_description.pending_activities:
        beat = pending.heartbeat_details.payloads
        if pending.activity_type.name != "wolf.model_request" or not beat:
            continue
        try:  # a LiveText (workflows/contracts.py), read as JSON: the client never imports pydantic-ai
            (details,) = await client.data_converter.decode(beat, [dict])
            if details.get("waiting"):
                return SessionWait.model_validate(details, strict=False)
        except Exception:  # noqa: BLE001, S112 - another version's details: nothing to show
            continue
    return None


async def endpoints(client: Client, tenant: str | None) -> list[QuotaStatus]:
    """Every running quota workflow's status; waiting sessions only of `tenant` (None: every tenant's)."""
    found = [
        execution.id
        async for execution in client.list_workflows(
            f"WorkflowType = '{QUOTA_WORKFLOW}' AND ExecutionStatus = 'Running'"
        )
        if execution.status == WorkflowExecutionStatus.RUNNING
    ]

    async def status(wid: str) -> QuotaStatus | None:
        try:
            return await client.get_workflow_handle(wid).query(QuotaWorkflow.status)
        except (RPCError, WorkflowQueryFailedError):  # ended meanwhile, or no worker to answer
            return None

    out = [s for s in await asyncio.gather(*(status(w) for w in found)) if s is not None]
    for s in out:
        if tenant is not None:
            s.waiting = [w for w in s.waiting if w.tenant == tenant]
    return sorted(out, key=lambda s: s.label)
