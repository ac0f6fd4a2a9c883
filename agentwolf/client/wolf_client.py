"""WolfClient: the Python API for sessions (start, submit, prompt, steer, interrupt, close, follow).

Light to import (`wolf status` starts in about the time `import temporalio.client` takes): it names
the session workflow's handlers by string instead of importing the workflow, and imports pydantic-ai
(transcripts, a session's start input) and workflow streams (following) in the methods that use them.
tests/test_client_imports.py keeps it so."""

from __future__ import annotations

import asyncio
import contextlib
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
    WorkflowQueryFailedError,
)
from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.access import TenantError, check_tenant_name, namespace_for, workflow_id
from agentwolf.client.configs import ConfigMethods
from agentwolf.client.forks import ForkMethods
from agentwolf.client.jobs import JobMethods
from agentwolf.client.schedules import ScheduleMethods
from agentwolf.client.transient import NO_POLLER, patiently, resent, transient
from agentwolf.client.usage import Spending, UsageKey, UsageReport, read_spending, usage_report
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
    Approval,
    Event,
    SessionResult,
    SessionStatus,
    quote,
)

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from agentwolf.client.quotas import SessionWait
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

RUNNING_QUERY_WAIT = 5.0
"""How long a live follower waits to learn which step runs (a session without a worker never says)."""
VISIBILITY_WAIT = 30.0
"""How long a session start waits for visibility to list the session (see `_catch_up`)."""


class SessionNotFound(ValueError):
    pass


class InvalidSessionId(ValueError):
    """A session id AgentWolf cannot take: the caller's own mistake, safe to say back to them."""


class NotOwner(PermissionError):
    """The session was started for someone else (another editor's user): its servers are not theirs."""


ANSWER_CHECK = timedelta(seconds=10)
"""How long `approve`/`deny` wait for a worker to say which calls wait before sending the answer
unchecked (WolfClient._answer)."""


class WolfClient(ConfigMethods, JobMethods, ScheduleMethods, ForkMethods):
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
    ) -> str:
        """Start a session (its first prompt optional); returns the session id. `output_schema`: the
        answer is a JSON object valid against it (a job with `output`, see `JobMethods`). `owner`: who
        it is started for (a key's subject, an API `user`, an editor's user): whose long-term memory it
        uses, and only they join MCP servers to it (`join_servers`).
        `prompt_settings`: what the first prompt's turn alone asks of the model (TurnSettings).

        The config is a manifest (file or object), or `config_name` from the registry: the session
        starts on its current version and takes new ones at turn boundaries unless `pinned`."""
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
        owner: str | None = None,
    ) -> str:
        """A background task: a session whose first prompt arrives at start and that closes after it.
        `owner`: who it is for (whose long-term memory it uses), as `start_session` says."""
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
            owner=owner,
        )

    async def prompt(self, session_id: str, text: str, settings: TurnSettings | None = None) -> str:
        """Start (or queue) a turn; returns its turn id. `settings`: what this turn alone asks of the
        model (TurnSettings); sent only when given, so workers from before them take the prompt too.
        A call a busy server cuts is sent again with the same update id (`resent`): taken once."""
        handle = await self._handle(session_id)
        args: list[Any] = [text] if settings is None else [text, settings]
        update_id = uuid.uuid4().hex
        return await resent(lambda: handle.execute_update("prompt", args=args, id=update_id, result_type=str))

    async def prompt_or_leave(
        self, session_id: str, text: str, settings: TurnSettings | None = None
    ) -> str | None:
        """`prompt`, or while no worker polls the session's task queue (its status query says so, or
        goes unanswered for ANSWER_CHECK), the prompt left in the session's history as a signal: the
        turn runs once a worker polls, and None says so (no turn id before a worker takes it; a
        prompt the session refuses then is dropped with an error event). `prompt` itself needs a
        worker: an update is only taken by one. For callers that need no answer now (`wolf chat`)."""
        from agentwolf.workflows.contracts import PROMPT_LATER_SIGNAL

        handle = await self._handle(session_id)
        try:
            await handle.query("status", rpc_timeout=ANSWER_CHECK)
        except RPCError as exc:
            if NO_POLLER not in exc.message and exc.status not in (
                RPCStatusCode.CANCELLED,
                RPCStatusCode.DEADLINE_EXCEEDED,
            ):
                raise
            await handle.signal(PROMPT_LATER_SIGNAL, args=[text] if settings is None else [text, settings])
            return None
        return await self.prompt(session_id, text, settings)

    async def steer(self, session_id: str, text: str) -> bool:
        """Refused here when the session's steer queue is full (the workflow would drop it, with an
        error event). A signal needs no worker: while none polls the session's task queue, the steer
        is sent unchecked and waits in the session's history until one does; False says so."""
        try:
            room = (await self.status(session_id)).steer_room
        except RPCError as exc:
            if NO_POLLER not in exc.message:
                raise
            room = None
        if room is not None and room <= 0:
            raise ValueError(
                f"session {session_id!r} has too many steers waiting (host.sessions.max_steers): try again "
                "later"
            )
        await (await self._handle(session_id)).signal("steer", text)
        return room is not None

    async def approve(self, session_id: str, call_id: str, *, always: bool = False) -> None:
        await self._answer(session_id, "approve", Approval(call_id=call_id, always=always))

    async def deny(self, session_id: str, call_id: str, reason: str | None = None) -> None:
        await self._answer(session_id, "deny", Approval(call_id=call_id, reason=reason))

    async def _answer(
        self,
        session_id: str,
        signal: str,
        answer: Approval,
    ) -> None:
        """Refuse answers for calls that do not wait (signals cannot report errors themselves).

        Checking asks a worker (a query). A session no worker answers for within ANSWER_CHECK (its
        worker was lost and the next is not up yet) is sent the answer unchecked: the signal waits in
        its history for the next worker, and the session ignores an answer for a call that does not
        wait. Refusing there lost the answer of a person who approved while a worker restarted."""
        handle, _ = await self._checked(session_id)
        try:
            status = await patiently(
                lambda: handle.query("status", result_type=SessionStatus, rpc_timeout=ANSWER_CHECK)
            )
        except RPCError as exc:
            if exc.status not in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED) and not transient(
                exc
            ):
                raise
        else:
            waiting = {p.call_id for p in status.pending_approvals}
            if answer.call_id not in waiting:
                raise ValueError(
                    f"no tool call {answer.call_id!r} waits for approval in session {session_id!r} "
                    f"(waiting: {', '.join(sorted(waiting)) or 'none'})"
                )
        await handle.signal(signal, answer)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        await (await self._handle(session_id)).signal("interrupt", reason)

    async def join_servers(
        self, session_id: str, servers: dict[str, McpServerConfig], *, owner: str | None = None
    ) -> None:
        """MCP servers (by name) that join this session only, as `start_session(session_servers=...)`
        does: an editor's; a same-named one is replaced, and the agent recompiles before its next step.

        Only for the session's `owner` (NotOwner otherwise): another user's servers, and the
        credentials they carry, would act in a session that is not theirs."""
        from agentwolf.config.session_servers import Compiled

        handle = await self._handle(session_id)
        started_for = await (await handle.describe()).memo_value(OWNER_MEMO, None)
        if started_for != owner:
            raise NotOwner(f"session {session_id!r} was not started for {owner or 'this client'!r}")
        compiled = await patiently(lambda: handle.query("compiled", result_type=Compiled | None))  # type: ignore[arg-type]
        sealed = await self._sealed(handle.id, servers, compiled.by_name() if compiled else {})
        await handle.signal("join_servers", sealed)

    async def _sealed(
        self,
        wid: str,
        servers: dict[str, McpServerConfig],
        current: dict[str, McpServerConfig] | None = None,
    ) -> dict[str, McpServerConfig]:
        """`servers` with their secrets sealed out of history (config/session_servers.py); one the
        session already has unchanged (`current`, by name) keeps its sealing, so its label and process."""
        from agentwolf.config.session_servers import same_secrets, seal

        converter, sealed = self.client.data_converter, {}
        for name, config in servers.items():
            previous = (current or {}).get(name)
            if previous is not None and await same_secrets(converter, wid, previous, config):
                sealed[name] = previous
            else:
                sealed[name] = await seal(converter, self.client.namespace, wid, config)
        return sealed

    async def close(self, session_id: str) -> None:
        await (await self._handle(session_id)).signal("close")

    async def compact(self, session_id: str) -> None:
        """Compact the session's working context at its next safe point (between steps or turns)."""
        await (await self._handle(session_id)).signal("compact")

    async def pin(self, session_id: str, text: str) -> None:
        """Pin a note: sent with the instructions in every model request, never compacted."""
        await (await self._handle(session_id)).signal("pin", text)

    async def status(self, session_id: str) -> SessionStatus:
        """The session's own account; `done` whatever it says once its workflow has ended (a terminated
        workflow never got to say so)."""
        handle, described = await self._checked(session_id)
        status = await patiently(lambda: handle.query("status", result_type=SessionStatus))
        if (
            status.state != "done"
            and (described or await handle.describe()).status != WorkflowExecutionStatus.RUNNING
        ):
            status.state = "done"
        return status

    async def waiting(self, session_id: str) -> SessionWait | None:
        """What the session's model request waits for (its provider's limits), or None."""
        from agentwolf.client.quotas import session_wait

        return await session_wait(self.client, (await self._handle(session_id)).id)

    async def commands(self, session_id: str) -> dict[str, str]:
        """The session's slash commands as its compiled agent knows them (`/skill`, `/server:prompt`),
        by name with their descriptions; none from an old worker or a closed session."""
        from agentwolf.workflows.contracts import COMPILED_QUERY, CompiledAgent

        handle = self.client.get_workflow_handle(workflow_id(self.tenant, session_id))
        try:
            # temporalio's stub says `type`; its pydantic converter decodes any type hint, None included
            compiled = await handle.query(COMPILED_QUERY, result_type=CompiledAgent | None)  # type: ignore[arg-type]
        except (RPCError, WorkflowQueryFailedError):
            return {}
        return dict(compiled.commands) if compiled else {}

    async def transcript(self, session_id: str) -> list[ModelMessage]:
        """The whole transcript, its archived messages read back from the payload store."""
        from agentwolf.transcript_store import read_transcript

        handle = await self._handle(session_id)
        converter = self.client.data_converter
        return await patiently(lambda: read_transcript(handle.query, converter))

    async def result(self, session_id: str) -> SessionResult:
        return await (await self._handle(session_id)).result()

    async def events(
        self, session_id: str, from_offset: int = 0, *, live: bool = True
    ) -> AsyncIterator[tuple[int, Event]]:
        """The session's events from `from_offset` on, across continue-as-new; ends when it ends.

        With `live`, streamed text and tool progress come too, as agentwolf/client/live.py describes:
        a step's `text_delta`s join to its `model_text`."""
        handle = await self._handle(session_id)
        running = None
        if live:
            # A finished session with no worker left cannot answer: it has no running step either.
            with contextlib.suppress(RPCError, WorkflowQueryFailedError, TimeoutError):
                status = await asyncio.wait_for(
                    handle.query("status", result_type=SessionStatus), RUNNING_QUERY_WAIT
                )
                running = (status.turn_id, status.step) if status.turn_id else None
        from agentwolf.client.live import follow

        async for item in follow(self.client, handle, from_offset, live=live, running=running):
            yield item

    async def event_offset(self, session_id: str) -> int:
        """The offset the next event will have (to follow only what happens from now on)."""
        from temporalio.contrib.workflow_streams import WorkflowStreamClient

        return await WorkflowStreamClient.create(
            self.client, (await self._handle(session_id)).id
        ).get_offset()

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
