"""WolfClient: the Python API for sessions (start, submit, prompt, steer, interrupt, close, follow)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage
from temporalio.client import Client, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.envconfig import ClientConfig

from agentwolf.activities.types import TRANSCRIPT_QUERY
from agentwolf.config.loading import load_manifest
from agentwolf.config.manifest import Manifest
from agentwolf.payloads import data_converter
from agentwolf.worker.main import TASK_QUEUE
from agentwolf.workflows.session import SessionWorkflow
from agentwolf.workflows.types import (
    AGENT_ATTR,
    EVENTS_TOPIC,
    PARENT_ATTR,
    STATE_ATTR,
    TENANT_ATTR,
    Approval,
    Event,
    SessionInput,
    SessionResult,
    SessionStatus,
    workflow_id,
)


async def connect(
    address: str | None = None, namespace: str | None = None, profile: str | None = None
) -> Client:
    """Connect the way every Temporal tool does (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, API key, TLS,
    profiles), with AgentWolf's pydantic data converter; explicit arguments win."""
    config = ClientConfig.load_client_connect_config(profile=profile)
    if address:
        config["target_host"] = address
    if namespace:
        config["namespace"] = namespace
    config.setdefault("target_host", "localhost:7233")
    return await Client.connect(**config, data_converter=data_converter())


class SessionSummary(BaseModel):
    """One session as Temporal visibility sees it (`wolf list`)."""

    session_id: str
    tenant: str | None
    agent: str | None
    state: str | None
    parent: str | None
    status: str
    started: datetime | None


class WolfClient:
    """Sessions of one tenant on one Temporal namespace."""

    def __init__(self, client: Client, *, tenant: str = "default", task_queue: str = TASK_QUEUE) -> None:
        self.client = client
        self.tenant = tenant
        self.task_queue = task_queue

    @classmethod
    async def connect(
        cls, address: str | None = None, *, namespace: str | None = None, tenant: str = "default", **kwargs: str
    ) -> WolfClient:
        return cls(await connect(address, namespace), tenant=tenant, **kwargs)

    def _handle(self, session_id: str) -> WorkflowHandle[SessionWorkflow, SessionResult]:
        return self.client.get_workflow_handle_for(SessionWorkflow.run, workflow_id(self.tenant, session_id))

    async def start_session(
        self,
        agent: str,
        manifest: Manifest | str | Path,
        *,
        session_id: str | None = None,
        prompt: str | None = None,
        background: bool = False,
        keep: bool = False,
    ) -> str:
        """Start a session (its first prompt optional); returns the session id."""
        if not isinstance(manifest, Manifest):
            manifest = load_manifest(manifest)
        if agent not in manifest.agents and agent not in manifest.teams:
            known = sorted([*manifest.agents, *manifest.teams]) or "none"
            raise ValueError(f"unknown agent {agent!r} (agents and teams in this config: {known})")
        session_id = session_id or uuid.uuid4().hex[:12]
        await self.client.start_workflow(
            SessionWorkflow.run,
            SessionInput(
                session_id=session_id,
                tenant=self.tenant,
                agent=agent,
                manifest=manifest,
                prompt=prompt,
                background=background,
                keep=keep,
            ),
            id=workflow_id(self.tenant, session_id),
            task_queue=self.task_queue,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(TENANT_ATTR, self.tenant),
                    SearchAttributePair(AGENT_ATTR, agent),
                    SearchAttributePair(STATE_ATTR, "idle"),
                ]
            ),
        )
        return session_id

    async def submit(
        self, prompt: str, agent: str, manifest: Manifest | str | Path, *, session_id: str | None = None, keep: bool = False
    ) -> str:
        """A background task: a session whose first prompt arrives at start and that closes after it."""
        return await self.start_session(
            agent, manifest, session_id=session_id, prompt=prompt, background=True, keep=keep
        )

    async def prompt(self, session_id: str, text: str) -> str:
        """Start (or queue) a turn; returns its turn id."""
        return await self._handle(session_id).execute_update(SessionWorkflow.prompt, text)

    async def steer(self, session_id: str, text: str) -> None:
        await self._handle(session_id).signal(SessionWorkflow.steer, text)

    async def approve(self, session_id: str, call_id: str, *, always: bool = False) -> None:
        await self._answer(session_id, SessionWorkflow.approve, Approval(call_id=call_id, always=always))

    async def deny(self, session_id: str, call_id: str, reason: str | None = None) -> None:
        await self._answer(session_id, SessionWorkflow.deny, Approval(call_id=call_id, reason=reason))

    async def _answer(self, session_id: str, signal: object, answer: Approval) -> None:
        """Refuse answers for calls that do not wait (signals cannot report errors themselves)."""
        waiting = {p.call_id for p in (await self.status(session_id)).pending_approvals}
        if answer.call_id not in waiting:
            raise ValueError(f"no tool call {answer.call_id!r} waits for approval in session {session_id!r} (waiting: {sorted(waiting) or 'none'})")
        await self._handle(session_id).signal(signal, answer)  # type: ignore[arg-type]

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        await self._handle(session_id).signal(SessionWorkflow.interrupt, reason)

    async def close(self, session_id: str) -> None:
        await self._handle(session_id).signal(SessionWorkflow.close)

    async def status(self, session_id: str) -> SessionStatus:
        return await self._handle(session_id).query(SessionWorkflow.status)

    async def transcript(self, session_id: str) -> list[ModelMessage]:
        return await self._handle(session_id).query(TRANSCRIPT_QUERY, result_type=list[ModelMessage])

    async def result(self, session_id: str) -> SessionResult:
        return await self._handle(session_id).result()

    async def events(self, session_id: str, from_offset: int = 0) -> AsyncIterator[tuple[int, Event]]:
        """The session's events from `from_offset` on, live, across continue-as-new; ends when it ends."""
        stream = WorkflowStreamClient.create(self.client, workflow_id(self.tenant, session_id))
        async for item in stream.subscribe(EVENTS_TOPIC, from_offset, result_type=Event):
            yield item.offset, item.data

    async def event_offset(self, session_id: str) -> int:
        """The offset the next event will have (to follow only what happens from now on)."""
        return await WorkflowStreamClient.create(self.client, workflow_id(self.tenant, session_id)).get_offset()

    async def list_sessions(
        self, *, state: str | None = None, agent: str | None = None, limit: int = 100
    ) -> list[SessionSummary]:
        """This tenant's sessions, newest first, filtered through the search attributes."""
        clauses = [f"WorkflowType = '{SessionWorkflow.__name__}'", f"{TENANT_ATTR.name} = {_quote(self.tenant)}"]
        if state:
            clauses.append(f"{STATE_ATTR.name} = {_quote(state)}")
        if agent:
            clauses.append(f"{AGENT_ATTR.name} = {_quote(agent)}")
        sessions = []
        async for wf in self.client.list_workflows(" AND ".join(clauses), limit=limit):
            attrs = wf.typed_search_attributes
            sessions.append(
                SessionSummary(
                    session_id=wf.id.split("/", 2)[-1],
                    tenant=attrs.get(TENANT_ATTR),
                    agent=attrs.get(AGENT_ATTR),
                    state=attrs.get(STATE_ATTR),
                    parent=attrs.get(PARENT_ATTR),
                    status=wf.status.name.lower() if wf.status else "unknown",
                    started=wf.start_time,
                )
            )
        return sessions


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
