"""WolfClient: the Python API for sessions (start, submit, prompt, steer, interrupt, close, follow).

Light to import (`wolf status` starts in about the time `import temporalio.client` takes): it names
the session workflow's handlers by string instead of importing the workflow, and imports pydantic-ai
(transcripts, a session's start input) and workflow streams (following) in the methods that use them.
tests/test_client_imports.py keeps it so."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.access import TenantError, check_tenant_name, namespace_for, workflow_id
from agentwolf.client.configs import ConfigMethods
from agentwolf.client.forks import ForkMethods
from agentwolf.client.jobs import JobMethods
from agentwolf.client.schedules import ScheduleMethods
from agentwolf.client.sessions import SessionMethods
from agentwolf.client.usage import Spending, UsageKey, UsageReport, read_spending, usage_report
from agentwolf.client.workspaces import WorkspaceMethods
from agentwolf.connection import connect
from agentwolf.defaults import TASK_QUEUE
from agentwolf.workflows.types import (
    ACTIVE_ATTR,
    AGENT_ATTR,
    CONFIG_ATTR,
    OWNER_MEMO,
    PARENT_ATTR,
    RUN_PREFIX,
    SCHEDULE_ATTR,
    SESSION_WORKFLOW,
    STATE_ATTR,
    TENANT_ATTR,
    SessionResult,
    quote,
)

if TYPE_CHECKING:
    from agentwolf.config.manifest import Manifest, McpServerConfig
    from agentwolf.workflows.session_input import SessionInput
    from agentwolf.workflows.turn_settings import TurnSettings


class SessionSummary(BaseModel):
    """One session as Temporal visibility sees it (`wolf list`)."""

    session_id: str
    tenant: str | None
    agent: str | None
    state: str | None
    parent: str | None
    status: str
    config: str | None = None
    started: datetime | None


T = TypeVar("T")

VISIBILITY_WAIT = 30.0
"""How long a session start waits for visibility to list the session (see `_catch_up`)."""


class SessionNotFound(ValueError):
    pass


class InvalidSessionId(ValueError):
    """A session id AgentWolf cannot take: the caller's own mistake, safe to say back to them."""


class WolfClient(SessionMethods, ConfigMethods, JobMethods, ScheduleMethods, ForkMethods, WorkspaceMethods):
    """Sessions and configs of one tenant on one Temporal namespace; another tenant's sessions are refused."""

    def __init__(
        self,
        client: Client,
        *,
        tenant: str = "default",
        task_queue: str = TASK_QUEUE,
        idle_close_after: timedelta | None = None,
    ) -> None:
        """`idle_close_after`: sessions this client starts close after being idle this long, unless
        their manifest sets `host.sessions.idle_close_after` (`wolf serve` gives its sessions one)."""
        self.client = client
        self.tenant = check_tenant_name(tenant)
        self.task_queue = task_queue
        self.idle_close_after = idle_close_after
        self._owned: set[str] = set()  # workflow ids checked to be this tenant's sessions
        self._stamps_activity = True  # False once the namespace refused WolfActive (no `wolf setup` yet)

    @classmethod
    async def connect(
        cls,
        address: str | None = None,
        *,
        namespace: str | None = None,
        profile: str | None = None,
        api_key: str | None = None,
        tls: bool | None = None,
        tenant: str = "default",
        task_queue: str = TASK_QUEUE,
        idle_close_after: timedelta | None = None,
    ) -> WolfClient:
        """`namespace` defaults to the tenant's own (`WOLF_TENANT_NAMESPACES`), else the configured one;
        `idle_close_after` as for the constructor."""
        client = await connect(
            address, namespace or namespace_for(check_tenant_name(tenant)), profile, api_key=api_key, tls=tls
        )
        return cls(client, tenant=tenant, task_queue=task_queue, idle_close_after=idle_close_after)

    async def check_session(self, session_id: str) -> None:
        """Raise SessionNotFound or TenantError unless `session_id` is a session of this tenant (one
        describe, remembered: the calls that follow do not ask again)."""
        await self._checked(session_id)

    async def _handle(self, session_id: str) -> WorkflowHandle[Any, SessionResult]:
        """A handle on one of this tenant's sessions. `session_id` may be a full workflow id
        (`wolf/<tenant>/<id>`); another tenant's, or a session whose WolfTenant differs, is refused."""
        return (await self._checked(session_id))[0]

    async def _checked(
        self, session_id: str
    ) -> tuple[WorkflowHandle[Any, SessionResult], WorkflowExecutionDescription | None]:
        """`_handle`, with the description the ownership check just read (None: checked before)."""
        if session_id.startswith("wolf/") and session_id.count("/") >= 2:
            _, tenant, session_id = session_id.split("/", 2)
            if tenant != self.tenant:
                raise TenantError(
                    f"session {session_id!r} belongs to tenant {tenant!r}, not to {self.tenant!r}"
                )
        handle = self.client.get_workflow_handle(
            workflow_id(self.tenant, session_id), result_type=SessionResult
        )
        if handle.id not in self._owned:
            try:
                described = await handle.describe()
            except RPCError as exc:
                if exc.status == RPCStatusCode.NOT_FOUND:
                    raise SessionNotFound(
                        f"session {session_id!r} not found in tenant {self.tenant!r}"
                    ) from None
                raise
            # The id names this tenant; a WolfTenant that says otherwise wins (none: started by other means).
            owner = described.typed_search_attributes.get(TENANT_ATTR, self.tenant)
            if described.workflow_type != SESSION_WORKFLOW:
                raise SessionNotFound(f"{handle.id} is a {described.workflow_type}, not a session")
            if owner != self.tenant:
                raise TenantError(
                    f"session {session_id!r} belongs to tenant {owner!r}, not to {self.tenant!r}"
                )
            self._owned.add(handle.id)
            return handle, described
        return handle, None

    async def start_session(
        self,
        agent: str,
        manifest: Manifest | str | Path | None = None,
        *,
        config_name: str | None = None,
        pinned: bool = False,
        session_id: str | None = None,
        prompt: str | None = None,
        background: bool = False,
        keep: bool = False,
        output_schema: dict[str, Any] | None = None,
        trigger: str | None = None,
        unique: bool = False,
        session_servers: dict[str, McpServerConfig] | None = None,
        owner: str | None = None,
        prompt_settings: TurnSettings | None = None,
        workspace: str | Path | None = None,
    ) -> str:
        """Start a session (its first prompt optional); returns the session id. `output_schema`: the
        answer is a JSON object valid against it (a job with `output`, see `JobMethods`). `owner`: who
        it is started for (a key's subject, an API `user`, an editor's user): whose long-term memory it
        uses, and only they join MCP servers to it (`join_servers`).
        `prompt_settings`: what the first prompt's turn alone asks of the model (TurnSettings).

        The config is a manifest (file or object), or `config_name` from the registry: the session
        starts on its current version and takes new ones at turn boundaries unless `pinned`.
        `workspace`: a local folder copied in as the agent's workspace (its `workspace:` block)."""
        from agentwolf.config.loading import load_manifest
        from agentwolf.config.manifest import Manifest

        version = None
        if config_name is not None:
            if manifest is not None:
                raise ValueError("give a manifest or a registry config name, not both")
            current = await self.config_get(config_name)
            manifest, version = current.manifest, current.version
        elif pinned:
            raise ValueError("pinning applies to registry configs (config_name), not to manifest files")
        elif manifest is None:
            raise ValueError("a session needs a manifest or a registry config name")
        if not isinstance(manifest, Manifest):
            manifest = load_manifest(manifest)
        if agent not in manifest.agents and agent not in manifest.teams:
            known = sorted([*manifest.agents, *manifest.teams]) or "none"
            raise ValueError(f"unknown agent {agent!r} (agents and teams in this config: {known})")
        session_id = session_id or uuid.uuid4().hex[:12]
        if "/" in session_id:
            raise InvalidSessionId(
                f"invalid session id {session_id!r}: no '/' (it is part of the workflow id)"
            )
        if session_id.startswith(RUN_PREFIX) and trigger is None:
            raise InvalidSessionId(
                f"invalid session id {session_id!r}: a leading {RUN_PREFIX!r} marks job runs"
            )
        from agentwolf.workflows.session_input import SessionInput

        wid = workflow_id(self.tenant, session_id)
        inp = SessionInput(
            session_id=session_id,
            tenant=self.tenant,
            agent=agent,
            manifest=manifest,
            prompt=prompt,
            prompt_settings=prompt_settings,
            idle_close_after=self.idle_close_after,
            background=background,
            keep=keep,
            config_name=config_name,
            config_version=version,
            pinned=pinned,
            output_schema=output_schema,
            session_servers=await self._sealed(wid, session_servers or {}),
            workspace=await self.seed_workspace(workspace) if workspace is not None else None,
        )
        await self._launch(inp, prompt=prompt, trigger=trigger, unique=unique, owner=owner)
        self._owned.add(wid)
        if config_name is not None and version is not None and not pinned:
            await self._catch_up(session_id, config_name, version)
        return session_id

    async def _launch(
        self,
        inp: SessionInput,
        *,
        prompt: str | None,
        trigger: str | None = None,
        unique: bool = False,
        owner: str | None = None,
        memo: dict[str, Any] | None = None,
    ) -> None:
        """Start the session workflow of `inp`: its search attributes, summary and priority memo."""
        from agentwolf.config.quotas import PRIORITY_MEMO, session_priority
        from agentwolf.workflows.session.turn import short

        attributes: list[SearchAttributePair[Any]] = [
            SearchAttributePair(TENANT_ATTR, self.tenant),
            SearchAttributePair(AGENT_ATTR, inp.agent),
            SearchAttributePair(STATE_ATTR, "idle"),
        ]
        if self._stamps_activity:
            attributes.append(SearchAttributePair(ACTIVE_ATTR, datetime.now(UTC)))
        if inp.config_name is not None:
            attributes.append(SearchAttributePair(CONFIG_ATTR, inp.config_name))
        if trigger is not None:  # the schedule or webhook that started it
            attributes.append(SearchAttributePair(SCHEDULE_ATTR, trigger))
        agent, manifest, version = inp.agent, inp.manifest, inp.config_version
        options: dict[str, Any] = dict(
            id=workflow_id(self.tenant, inp.session_id),
            task_queue=self.task_queue,
            # `unique`: an id used before, even by a session that ended, is refused (idempotent starts).
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE
            if unique
            else WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            static_summary=short(f"{agent}: {prompt}" if prompt else f"{agent} (interactive)"),
            static_details=start_details(agent, manifest, inp.config_name, version, prompt),
            # The quota workflows serve interactive sessions first (config/quotas.py). A memo, not a Temporal
            # priority: the dev server (1.32) stalled a priority session's tasks after a worker restart.
            memo={PRIORITY_MEMO: session_priority(inp.background, trigger)}
            | ({OWNER_MEMO: owner} if owner is not None else {})
            | (memo or {}),
        )
        try:
            await self.client.start_workflow(
                SESSION_WORKFLOW, inp, search_attributes=TypedSearchAttributes(attributes), **options
            )
        except RPCError as exc:
            # A namespace set up before WolfActive existed: sessions start without it (they never set
            # it, and the console shows their start time as last activity) until `wolf setup` adds it.
            if not self._stamps_activity or ACTIVE_ATTR.name not in exc.message:
                raise
            self._stamps_activity = False
            unstamped = TypedSearchAttributes([a for a in attributes if a.key != ACTIVE_ATTR])
            await self.client.start_workflow(SESSION_WORKFLOW, inp, search_attributes=unstamped, **options)

    async def _catch_up(self, session_id: str, name: str, version: int) -> None:
        """Close the race between starting a session and a push of its config.

        The registry signals the sessions visibility lists, and visibility lags: a session started
        just before a push may not be listed yet. So wait until visibility lists this session (every
        later push then reaches it), then read the current version again and send it if it is newer
        than the one the session started with (a session ignores versions it already has)."""
        wid = workflow_id(self.tenant, session_id)
        query = f"WorkflowId = {quote(wid)} AND {CONFIG_ATTR.name} = {quote(name)}"
        loop = asyncio.get_running_loop()
        deadline, delay = loop.time() + VISIBILITY_WAIT, 0.02
        while not (await self.client.count_workflows(query)).count and loop.time() < deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        current = await self.config_get(name)
        if current.version > version:
            from agentwolf.workflows.configs.config_update import ConfigUpdate

            update = ConfigUpdate(name=name, version=current.version, manifest=current.manifest)
            try:
                await (await self._handle(session_id)).signal("config_changed", update)
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:  # NOT_FOUND: a short task already ended
                    raise

    async def submit(
        self,
        prompt: str,
        agent: str,
        manifest: Manifest | str | Path | None = None,
        *,
        config_name: str | None = None,
        pinned: bool = False,
        session_id: str | None = None,
        keep: bool = False,
        prompt_settings: TurnSettings | None = None,
        workspace: str | Path | None = None,
        owner: str | None = None,
    ) -> str:
        """A background task: a session whose first prompt arrives at start and that closes after it.
        `workspace`: a local folder copied in as the agent's workspace; `owner`: who it is for (whose
        long-term memory it uses), as `start_session` says."""
        return await self.start_session(
            agent,
            manifest,
            config_name=config_name,
            pinned=pinned,
            session_id=session_id,
            prompt=prompt,
            background=True,
            keep=keep,
            prompt_settings=prompt_settings,
            workspace=workspace,
            owner=owner,
        )

    async def list_sessions(
        self,
        *,
        state: str | None = None,
        agent: str | None = None,
        config: str | None = None,
        limit: int = 100,
    ) -> list[SessionSummary]:
        """This tenant's sessions, newest (by start) first, filtered through the search attributes.

        Temporal's SQL visibility cannot ORDER BY and lists running workflows before closed ones:
        both groups are asked for (running ones come newest first, closed ones by close time) and
        merged by start time."""
        clauses = [
            f"WorkflowType = '{SESSION_WORKFLOW}'",
            f"{TENANT_ATTR.name} = {quote(self.tenant)}",
        ]
        if state:
            clauses.append(f"{STATE_ATTR.name} = {quote(state)}")
            if state != "done":  # a workflow that ended without saying so (terminated) is not live
                clauses.append("ExecutionStatus = 'Running'")
        if agent:
            clauses.append(f"{AGENT_ATTR.name} = {quote(agent)}")
        if config:
            clauses.append(f"{CONFIG_ATTR.name} = {quote(config)}")
        query = " AND ".join(clauses)
        groups = (
            [query]
            if state
            else [f"{query} AND ExecutionStatus = 'Running'", f"{query} AND ExecutionStatus != 'Running'"]
        )
        sessions = [summary for group in groups async for summary in self._summaries(group, limit)]
        sessions.sort(key=lambda s: s.started or datetime.min.replace(tzinfo=UTC), reverse=True)
        return sessions[:limit]

    async def _summaries(self, query: str, limit: int) -> AsyncIterator[SessionSummary]:
        """The sessions one visibility query lists, as summaries."""
        async for wf in self.client.list_workflows(query, limit=limit):
            attrs = wf.typed_search_attributes
            yield SessionSummary(
                session_id=wf.id.split("/", 2)[-1],
                tenant=attrs.get(TENANT_ATTR),
                agent=attrs.get(AGENT_ATTR),
                state=attrs.get(STATE_ATTR) if wf.status == WorkflowExecutionStatus.RUNNING else "done",
                parent=attrs.get(PARENT_ATTR),
                status=wf.status.name.lower() if wf.status else "unknown",
                started=wf.start_time,
                config=attrs.get(CONFIG_ATTR),
            )

    async def usage(
        self, *, since: datetime | None = None, by: UsageKey = "agent", all_tenants: bool = False
    ) -> UsageReport:
        """What this tenant's sessions spent, grouped `by` (client/usage.py); `all_tenants`: every
        tenant's sessions in this namespace (an operator's view)."""
        return usage_report(await self.spending(since=since, all_tenants=all_tenants), since=since, by=by)

    async def spending(self, *, since: datetime | None = None, all_tenants: bool = False) -> list[Spending]:
        """This tenant's sessions started at or after `since`, each with its counters."""
        where = None if all_tenants else f"{TENANT_ATTR.name} = {quote(self.tenant)}"
        return await read_spending(self.client, where, since=since)


START_PROMPT_CHARS = 500
"""How much of the first prompt a session's static details show (the transcript has it whole)."""


def start_details(
    agent: str, manifest: Manifest, config_name: str | None, version: int | None, prompt: str | None
) -> str:
    """The Temporal UI's static details of a session: agent, model, config and the first prompt, cut."""
    config = f"{config_name} v{version}" if config_name else f"file ({manifest.identity})"
    own = manifest.agents.get(agent)
    model = (own.model or manifest.host.models.defaults.model or "?") if own else "team"
    lines = [f"**agent** {agent} · **model** {model} · **config** {config}"]
    if prompt:
        cut = prompt if len(prompt) <= START_PROMPT_CHARS else f"{prompt[:START_PROMPT_CHARS]}…"
        lines.append(f"**prompt** {cut}")
    return "\n\n".join(lines)
