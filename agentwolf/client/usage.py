"""`wolf usage` and the console's usage page: what sessions spent (tokens, tool calls, USD), grouped
by agent, model, session or tenant, read from visibility and each session's own counters.

Each session counts only its own requests (`Counters.usage`); a subagent is a session of its own, so
summing sessions counts its spending once. A running session answers the `status` query, a finished
one its result (a failed task's failure carries its counters); other endings are asked by query,
which needs a worker, and are listed as unreadable when none answers.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowQueryFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from agentwolf.workflows.types import (
    AGENT_ATTR,
    SESSION_WORKFLOW,
    TENANT_ATTR,
    Counters,
    SessionResult,
    SessionStatus,
    Usage,
)

UsageKey = Literal["agent", "model", "session", "tenant"]
READERS = 16
"""Sessions read at once."""


class UsageRow(BaseModel):
    key: str
    """The agent, model spec, session id or tenant."""
    sessions: int
    usage: Usage


class UsageReport(BaseModel):
    by: UsageKey
    since: datetime | None
    rows: list[UsageRow]
    """Most expensive first (known USD, then tokens)."""
    total: Usage
    sessions: int
    unreadable: list[str] = []
    """Sessions whose counters no one could answer for (ended without a result, no worker)."""


@dataclass(frozen=True)
class Spending:
    """One session as visibility lists it, and its counters (None: no one could answer for them)."""

    execution: WorkflowExecution
    counters: Counters | None


async def read_spending(
    client: Client, where: str | None, *, since: datetime | None = None
) -> list[Spending]:
    """Sessions matching the visibility clause `where` (a tenant's) whose current run started at or
    after `since`, each with its counters."""
    clauses = [f"WorkflowType = '{SESSION_WORKFLOW}'", "ExecutionStatus != 'ContinuedAsNew'"]
    if where is not None:
        clauses.append(where)
    if since is not None:
        clauses.append(f"StartTime >= '{since.isoformat()}'")
    executions = [wf async for wf in client.list_workflows(" AND ".join(clauses))]
    gate = asyncio.Semaphore(READERS)

    async def read(wf: WorkflowExecution) -> Spending:
        async with gate:
            return Spending(wf, await _counters(client, wf))

    return list(await asyncio.gather(*(read(wf) for wf in executions)))


def usage_report(
    spending: list[Spending], *, since: datetime | None = None, by: UsageKey = "agent"
) -> UsageReport:
    """The sessions' spending grouped `by`."""
    groups: dict[str, Usage] = defaultdict(Usage)
    members: dict[str, set[str]] = defaultdict(set)
    total, unreadable = Usage(), []
    for spent in spending:
        wf, counters = spent.execution, spent.counters
        if counters is None:
            unreadable.append(wf.id)
            continue
        total = total.plus(counters.usage)
        for key, usage in parts(wf, counters, by):
            groups[key] = groups[key].plus(usage)
            members[key].add(wf.id)
    rows = [UsageRow(key=k, sessions=len(members[k]), usage=u) for k, u in groups.items()]
    rows.sort(key=lambda r: (-r.usage.spent, -r.usage.total_tokens, r.key))
    return UsageReport(
        by=by, since=since, rows=rows, total=total, sessions=len(spending), unreadable=unreadable
    )


def parts(wf: WorkflowExecution, counters: Counters, by: UsageKey) -> list[tuple[str, Usage]]:
    """What one session spent, split by the `by` key (by model: one part per model)."""
    if by == "model":
        return list(counters.models.items())
    attrs = wf.typed_search_attributes
    key = {
        "agent": attrs.get(AGENT_ATTR),
        "session": wf.id.split("/", 2)[-1],
        "tenant": attrs.get(TENANT_ATTR),
    }[by]
    return [(key or "?", counters.usage)]


async def _counters(client: Client, wf: WorkflowExecution) -> Counters | None:
    handle = client.get_workflow_handle(wf.id, run_id=wf.run_id, result_type=SessionResult)
    if wf.status == WorkflowExecutionStatus.COMPLETED:
        return (await handle.result(follow_runs=False)).counters
    if wf.status == WorkflowExecutionStatus.FAILED:
        try:
            await handle.result(follow_runs=False)
        except WorkflowFailureError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.details:
                return Counters.model_validate(cause.details[0])
    try:  # running, or ended without a result (terminated, cancelled): its worker answers
        return (await handle.query("status", result_type=SessionStatus)).counters
    except (RPCError, WorkflowQueryFailedError):
        return None
