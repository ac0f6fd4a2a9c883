"""The console's session list: one page of a tenant's sessions at a time, straight from Temporal
visibility (its page token goes in the URL), so 10,000 sessions cost what 25 do.

Visibility knows state, agent, config and times; what a session has spent (turns, tokens, USD) and
whether it waits on a provider's limits are asked of each listed session afterwards (`figures`),
so the page never waits for them; what cannot be asked shows as unknown.

Last activity is the session's `WolfActive` attribute (set at start and at each state change); an
older session without it shows its start time. Sorting by it asks visibility to (`ORDER BY`, which
Elasticsearch visibility does); SQL visibility (the dev server's) cannot, and then the page's own rows
are sorted."""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime

from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionAsyncIterator,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError

from agentwolf.access import Principal, TenantError
from agentwolf.client.wolf_client import SessionNotFound
from agentwolf.protocols.auth import SERVED
from agentwolf.protocols.served import ApiError, Served, reach
from agentwolf.workflows.types import (
    ACTIVE_ATTR,
    AGENT_ATTR,
    CONFIG_ATTR,
    PARENT_ATTR,
    SCHEDULE_ATTR,
    SESSION_WORKFLOW,
    STATE_ATTR,
    TENANT_ATTR,
    quote,
    workflow_id,
)

PAGE_SIZE = 25
STATES = ("idle", "running", "waiting_approval", "done")
SORTS = ("", "active")
"""Visibility's order (running first, newest first), or the latest activity first."""
FIGURES_WAIT = 3.0
"""Seconds one session's figures may take (a session whose worker is gone never answers)."""


@dataclass(frozen=True)
class Filters:
    state: str = ""
    agent: str = ""
    config: str = ""
    search: str = ""
    """The start of a session id."""
    sort: str = ""
    """One of SORTS."""

    def clauses(self, tenant: str) -> list[str]:
        clauses = [
            f"WorkflowType = '{SESSION_WORKFLOW}'",
            f"{TENANT_ATTR.name} = {quote(tenant)}",
            "ExecutionStatus != 'ContinuedAsNew'",  # a session's earlier runs: its latest stands for it
        ]
        if self.state == "done":
            clauses.append("ExecutionStatus != 'Running'")
        elif self.state:
            clauses += [f"{STATE_ATTR.name} = {quote(self.state)}", "ExecutionStatus = 'Running'"]
        if self.agent:
            clauses.append(f"{AGENT_ATTR.name} = {quote(self.agent)}")
        if self.config:
            clauses.append(f"{CONFIG_ATTR.name} = {quote(self.config)}")
        if self.search:
            clauses.append(f"WorkflowId STARTS_WITH {quote(workflow_id(tenant, self.search))}")
        return clauses


@dataclass(frozen=True)
class Row:
    session_id: str
    agent: str
    state: str
    config: str
    parent: str | None
    schedule: str | None
    started: datetime | None
    closed: datetime | None
    active: datetime | None
    """Its last state change, else its start."""


@dataclass(frozen=True)
class Page:
    rows: list[Row]
    next_token: str | None
    """The next page's token for the URL (None: this is the last)."""
    sorted_here: bool = False
    """Visibility could not sort: only this page's rows are in activity order."""


def _row(wf: WorkflowExecution) -> Row:
    attrs = wf.typed_search_attributes
    running = wf.status == WorkflowExecutionStatus.RUNNING
    return Row(
        session_id=wf.id.split("/", 2)[-1],
        agent=attrs.get(AGENT_ATTR) or "?",
        state=(attrs.get(STATE_ATTR) or "unknown") if running else "done",
        config=attrs.get(CONFIG_ATTR) or "file",
        parent=attrs.get(PARENT_ATTR),
        schedule=attrs.get(SCHEDULE_ATTR),
        started=wf.start_time,
        closed=wf.close_time,
        active=attrs.get(ACTIVE_ATTR) or wf.start_time,
    )


async def sessions_page(
    client: Client, principal: Principal, filters: Filters, token: str | None, size: int = PAGE_SIZE
) -> Page:
    """One page of the principal's sessions (running first, then by close time, as visibility orders
    them); a key limited to some agents or configs sees only sessions of those."""
    clauses = filters.clauses(principal.tenant)
    if principal.agents is not None:
        agents = ", ".join(map(quote, sorted(principal.agents))) or quote("")
        clauses.append(f"{AGENT_ATTR.name} IN ({agents})")
    try:
        page_token = base64.urlsafe_b64decode(token) if token else None
    except (binascii.Error, ValueError):
        raise ApiError(400, "that page token is not one this console gave", code="invalid_page") from None
    query, sorted_here = " AND ".join(clauses), False
    try:
        listing = await _fetch(client, query, filters.sort, size, page_token)
    except RPCError as exc:  # visibility cannot sort, or the namespace has no WolfActive yet
        unsortable = "order by" in exc.message.lower() or ACTIVE_ATTR.name in exc.message
        if not (filters.sort and unsortable):
            raise
        listing, sorted_here = await _fetch(client, query, "", size, page_token), True
    rows = [
        _row(wf)
        for wf in listing.current_page or []
        if principal.may_use(wf.typed_search_attributes.get(CONFIG_ATTR) or SERVED, _row(wf).agent)
    ]
    if sorted_here:
        rows.sort(key=lambda r: r.active or datetime.min.replace(tzinfo=UTC), reverse=True)
    following = listing.next_page_token
    return Page(rows, base64.urlsafe_b64encode(following).decode() if following else None, sorted_here)


async def _fetch(
    client: Client, query: str, sort: str, size: int, token: bytes | None
) -> WorkflowExecutionAsyncIterator:
    """One page of `query`, in `sort` order (RPCError naming ORDER BY where visibility cannot)."""
    order = f" ORDER BY {ACTIVE_ATTR.name} DESC" if sort == "active" else ""
    listing = client.list_workflows(query + order, page_size=size, next_page_token=token)
    try:
        await listing.fetch_next_page()
    except RPCError as exc:
        if "token" in exc.message.lower() or ("invalid" in exc.message.lower() and not order):
            raise ApiError(400, "that page token is not one this console gave", code="invalid_page") from None
        raise
    return listing


@dataclass(frozen=True)
class Figures:
    """What one listed session has done, by its own account (None: it could not say)."""

    turns: int | None = None
    tokens: int | None = None
    cost_usd: float | None = None
    config_version: int | None = None
    approvals: int = 0
    rate_limited: bool = False


async def figures(served: Served, principal: Principal, session_ids: list[str]) -> dict[str, Figures]:
    """Each session's figures, asked at once; one that does not answer in FIGURES_WAIT, or that the
    principal may not reach (access.reach), is unknown."""
    wolf = served.wolf(principal)

    async def one(session_id: str) -> Figures:
        try:
            async with asyncio.timeout(FIGURES_WAIT):
                status, _ = await reach(served, principal, session_id)
                waiting = await wolf.waiting(session_id) if status.state == "running" else None
        except (RPCError, WorkflowQueryFailedError, TimeoutError, SessionNotFound, TenantError):
            return Figures()
        usage = status.counters.total
        return Figures(
            turns=status.counters.turns,
            tokens=usage.total_tokens,
            cost_usd=usage.cost_usd,
            config_version=status.config_version,
            approvals=len(status.pending_approvals),
            rate_limited=waiting is not None,
        )

    found = await asyncio.gather(*(one(s) for s in session_ids))
    return dict(zip(session_ids, found, strict=True))
