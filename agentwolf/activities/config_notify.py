"""`wolf.config_notify`: tell the running sessions of a config about its new version.

Thin: a visibility query and one signal per session. Safe to run twice: a session ignores a
version it already has.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.access import caller_tenant
from agentwolf.workflows.configs.config_registry import NotifyInput
from agentwolf.workflows.types import CONFIG_ATTR, SESSION_WORKFLOW, TENANT_ATTR, quote

CONTINUE_AS_NEW_GAP = timedelta(minutes=1)
"""While a session continues as new, visibility may show its old run closed before its new run is
indexed: sessions that continued as new this recently are signalled too (by id: the latest run)."""
PARALLEL_SIGNALS = 32


def sessions_query(tenant: str, name: str, since: datetime) -> str:
    """The sessions of (tenant, config name) that are running, or were continuing as new since `since`."""
    return (
        f"WorkflowType = '{SESSION_WORKFLOW}' AND {TENANT_ATTR.name} = {quote(tenant)} "
        f"AND {CONFIG_ATTR.name} = {quote(name)}"
        " AND (ExecutionStatus = 'Running' OR (ExecutionStatus = 'ContinuedAsNew' AND CloseTime >= "
        f"{quote(since.isoformat())}))"
    )


@activity.defn(name="wolf.config_notify")
async def config_notify(inp: NotifyInput) -> int:
    """Signal `config_changed` to every running session of the config; returns how many were signalled."""
    client = activity.client()
    tenant = caller_tenant(inp.tenant)  # the registry's, from its id, never from input
    query = sessions_query(tenant, inp.update.name, datetime.now(UTC) - CONTINUE_AS_NEW_GAP)
    ids = sorted({wf.id async for wf in client.list_workflows(query)})
    gate = asyncio.Semaphore(PARALLEL_SIGNALS)

    async def signal(wid: str) -> bool:
        async with gate:
            try:
                await client.get_workflow_handle(wid).signal("config_changed", inp.update)
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:  # it ended meanwhile
                    return False
                raise
            activity.heartbeat()
            return True

    return sum(await asyncio.gather(*(signal(wid) for wid in ids)))
