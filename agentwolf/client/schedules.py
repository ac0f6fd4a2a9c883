"""The schedule half of `WolfClient`: Temporal Schedules that run jobs or prompt sessions.

A schedule's id is `wolf/<tenant>/<name>` (so another tenant's is refused by its id, like a
session's), its action starts a `ScheduleFire` workflow (agentwolf/workflows/schedule.py), and its
memo keeps what `wolf schedule list` shows. Everything is checked before the schedule exists: the
job and its variables, the target session, the time zone; the server checks the cron expression.
"""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel
from temporalio.client import (
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleBackfill,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.access import TenantError, workflow_id
from agentwolf.client.configs import ConfigNotFound
from agentwolf.client.durations import parse_duration
from agentwolf.client.parts import ClientCore
from agentwolf.config.suggest import listing
from agentwolf.workflows.types import (
    RUN_PREFIX,
    SCHEDULE_ATTR,
    TENANT_ATTR,
    check_config_name,
    fire_id,
    run_session_id,
    schedule_id,
)

if TYPE_CHECKING:
    from agentwolf.config.jobs import BusyPolicy, Hook
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.schedule import FireInput

Overlap = Literal["skip", "buffer_one", "allow_all"]
_OVERLAP = {
    "skip": ScheduleOverlapPolicy.SKIP,
    "buffer_one": ScheduleOverlapPolicy.BUFFER_ONE,
    "allow_all": ScheduleOverlapPolicy.ALLOW_ALL,
}
MEMO = "wolf"


class ScheduleNotFound(ValueError):
    pass


class ScheduleSummary(BaseModel):
    """One schedule as `wolf schedule list/describe` shows it."""

    name: str
    target: str
    """`job NAME` or `session ID`."""
    when: str
    """`cron EXPR` or `every DURATION` (with jitter and time zone when set)."""
    paused: bool
    note: str = ""
    overlap: str
    when_busy: str | None = None
    next_runs: list[datetime] = []
    recent_runs: list[str] = []
    """The latest firings: their job runs' session ids, or (session schedules) the firings' workflow ids."""
    actions: int = 0


class ScheduleRuns(BaseModel):
    """What a schedule's firings run: a job's agent with its config (a registry config's `config_name`,
    a file's manifest identity `config_id`), or a prompt for `session`. All None: unreadable."""

    agent: str | None = None
    config_name: str | None = None
    config_id: str | None = None
    session: str | None = None


class HookRun(BaseModel):
    """What a webhook request started: a job run's session, or a delivery to `session_id`."""

    session_id: str
    firing: str
    """The workflow it started: the job run, or the delivery (a ScheduleFire run); its id derives
    from the request's dedupe key."""
    duplicate: bool = False
    """The key was seen before: nothing started, these are the first request's ids."""


class ScheduleMethods(ClientCore):
    """Schedules of this client's tenant (Temporal Schedules: visible and operable in its UI too)."""

    async def schedule_create(
        self,
        name: str,
        *,
        cron: str | None = None,
        every: str | timedelta | None = None,
        job: str | None = None,
        variables: dict[str, object] | None = None,
        manifest: Manifest | str | Path | None = None,
        config_name: str | None = None,
        session: str | None = None,
        prompt: str | None = None,
        when_busy: BusyPolicy = "queue",
        overlap: Overlap = "skip",
        jitter: str | timedelta | None = None,
        timezone: str | None = None,
        paused: bool = False,
        note: str = "",
    ) -> ScheduleSummary:
        """Create a schedule that runs `job` (with `variables`) or delivers `prompt` to `session`.

        Every input is checked first: a bad job, variable, session, duration, time zone or cron
        expression is a ValueError and nothing is created."""
        from agentwolf.workflows.schedule import ScheduleFireWorkflow  # pydantic-ai: a job's input

        check_config_name(name)
        if overlap not in _OVERLAP:
            raise ValueError(f"unknown overlap policy {overlap!r} (known: {listing(_OVERLAP)})")
        spec, when = _spec(cron, every, jitter, timezone)
        fire, target = await self._fire(
            name, job, variables, manifest, config_name, session, prompt, when_busy
        )
        attributes = TypedSearchAttributes(
            [SearchAttributePair(TENANT_ATTR, self.tenant), SearchAttributePair(SCHEDULE_ATTR, name)]
        )
        schedule = Schedule(
            action=ScheduleActionStartWorkflow(
                ScheduleFireWorkflow.run,
                fire,
                id=fire_id(self.tenant, name),
                task_queue=self.task_queue,
                typed_search_attributes=attributes,
            ),
            spec=spec,
            policy=SchedulePolicy(overlap=_OVERLAP[overlap]),
            state=ScheduleState(paused=paused, note=note or None),
        )
        memo = {"target": target, "when": when, "overlap": overlap}
        if session is not None:
            memo["when_busy"] = when_busy
        try:
            await self.client.create_schedule(
                schedule_id(self.tenant, name), schedule, memo={MEMO: memo}, search_attributes=attributes
            )
        except ScheduleAlreadyRunningError:
            raise ValueError(f"schedule {name!r} exists already in tenant {self.tenant!r}") from None
        except RPCError as exc:
            if exc.status == RPCStatusCode.INVALID_ARGUMENT:
                raise ValueError(f"schedule {name!r} refused: {exc.message}") from None
            raise
        return await self.schedule_describe(name)

    async def _fire(
        self,
        name: str,
        job: str | None,
        variables: dict[str, object] | None,
        manifest: Manifest | str | Path | None,
        config_name: str | None,
        session: str | None,
        prompt: str | None,
        when_busy: BusyPolicy,
    ) -> tuple[FireInput, str]:
        """What each firing of schedule `name` does, checked, and that in words."""
        from agentwolf.workflows.schedule import FireInput

        if (job is None) == (session is None):
            raise ValueError("a schedule runs exactly one of a job or a prompt for a session")
        if job is not None:
            if prompt is not None:
                raise ValueError("a job schedule runs the job's prompt: give variables, not a prompt")
            fire = FireInput(
                schedule=name,
                tenant=self.tenant,
                session=await self._job_session(job, dict(variables or {}), manifest, config_name),
                job=job,
                variables=dict(variables or {}),
            )
            target = f"job {job}"
        else:
            assert session is not None
            if not prompt or not prompt.strip():
                raise ValueError("a session schedule needs the prompt it delivers")
            # SessionNotFound / TenantError: nothing created; a full id `wolf/<tenant>/<id>` becomes the id.
            session = (await self._handle(session)).id.split("/", 2)[2]
            fire = FireInput(
                schedule=name, tenant=self.tenant, target=session, prompt=prompt, when_busy=when_busy
            )
            target = f"session {session}"
        return fire, target

    async def hook_fire(
        self,
        name: str,
        hook: Hook,
        body: object,
        *,
        key: str | None = None,
        manifest: Manifest | None = None,
        config_name: str | None = None,
    ) -> HookRun:
        """Start what webhook `name` does for a request `body` (a ScheduleFire run, like a schedule's
        firing). With `key` (the request's dedupe key: a digest of what its signature covers), the
        firing's id derives from it and Temporal refuses a second start with that id, running or
        closed (within the namespace's retention), so a redelivery starts nothing and names the first
        request's run: no state in this process."""
        from agentwolf.workflows.schedule import FireInput, ScheduleFireWorkflow

        trigger = f"hook-{check_config_name(name)}"
        suffix = hashlib.sha256(key.encode()).hexdigest()[:20] if key else uuid.uuid4().hex[:20]
        if hook.job is not None:  # the run itself has the id: a 202 means the session exists
            sid = f"{RUN_PREFIX}{trigger}-{suffix}"
            try:
                await self.start_job(
                    hook.job,
                    dict(hook.values(body)),
                    manifest,
                    config_name=config_name,
                    session_id=sid,
                    trigger=trigger,
                    unique=True,
                )
            except WorkflowAlreadyStartedError:
                return HookRun(session_id=sid, firing=workflow_id(self.tenant, sid), duplicate=True)
            return HookRun(session_id=sid, firing=workflow_id(self.tenant, sid))
        assert hook.session is not None
        await self._handle(hook.session)
        fire = FireInput(
            schedule=trigger,
            tenant=self.tenant,
            target=hook.session,
            prompt=hook.text(body),
            when_busy=hook.when_busy,
        )
        wid = f"{fire_id(self.tenant, trigger)}-{suffix}"
        try:
            await self.client.start_workflow(
                ScheduleFireWorkflow.run,
                fire,
                id=wid,
                task_queue=self.task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(TENANT_ATTR, self.tenant),
                        SearchAttributePair(SCHEDULE_ATTR, trigger),
                    ]
                ),
            )
        except WorkflowAlreadyStartedError:
            return HookRun(session_id=hook.session, firing=wid, duplicate=True)
        return HookRun(session_id=hook.session, firing=wid)

    def _schedule(self, name: str) -> ScheduleHandle:
        """A handle on one of this tenant's schedules (a full id `wolf/<tenant>/<name>` of another
        tenant is refused)."""
        if name.startswith("wolf/") and name.count("/") >= 2:
            _, tenant, name = name.split("/", 2)
            if tenant != self.tenant:
                raise TenantError(f"schedule {name!r} belongs to tenant {tenant!r}, not to {self.tenant!r}")
        return self.client.get_schedule_handle(schedule_id(self.tenant, check_config_name(name)))

    async def _described(self, name: str) -> tuple[ScheduleHandle, ScheduleDescription]:
        handle = self._schedule(name)
        try:
            return handle, await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise ScheduleNotFound(f"schedule {name!r} not found in tenant {self.tenant!r}") from None
            raise

    async def schedule_describe(self, name: str) -> ScheduleSummary:
        _, described = await self._described(name)
        return await _summary(name.rsplit("/", 1)[-1], described)

    async def schedule_list(self) -> list[ScheduleSummary]:
        """This tenant's schedules, by name."""
        prefix = schedule_id(self.tenant, "")
        names = sorted(
            [s.id[len(prefix) :] async for s in await self.client.list_schedules() if s.id.startswith(prefix)]
        )
        found = []
        for name in names:
            try:
                found.append(await self.schedule_describe(name))
            except ScheduleNotFound:  # deleted meanwhile
                continue
        return found

    async def schedule_runs(self, name: str) -> ScheduleRuns:
        """What `name` runs when it fires: for a registry job, the agent the job names in the config's
        current version (which the firing runs), as front ends check a key's access against it."""
        from agentwolf.workflows.schedule import FireInput

        _, described = await self._described(name)
        action = described.schedule.action
        if not isinstance(action, ScheduleActionStartWorkflow):
            return ScheduleRuns()
        try:
            (fire,) = await self.client.data_converter.decode(action.args, [FireInput])
        except ValueError:  # not a firing this version reads
            return ScheduleRuns()
        if fire.session is None:
            return ScheduleRuns(session=fire.target)
        config, agent = fire.session.config_name, fire.session.agent
        if config is not None and fire.job is not None:
            with contextlib.suppress(ConfigNotFound):
                current = (await self.config_get(config)).manifest.jobs.get(fire.job)
                agent = current.agent if current is not None else agent
        return ScheduleRuns(agent=agent, config_name=config, config_id=fire.session.manifest.identity)

    async def schedule_pause(self, name: str, note: str | None = None) -> None:
        handle, _ = await self._described(name)
        await handle.pause(note=note or "paused with wolf")

    async def schedule_resume(self, name: str, note: str | None = None) -> None:
        handle, _ = await self._described(name)
        await handle.unpause(note=note or "resumed with wolf")

    async def schedule_trigger(self, name: str) -> None:
        """Fire now, whatever the spec (the overlap policy still applies; a paused schedule fires too)."""
        handle, _ = await self._described(name)
        await handle.trigger()

    async def schedule_backfill(self, name: str, start: datetime, end: datetime) -> None:
        """Fire for every time the spec names in [start, end), as if it had run then."""
        start, end = (t if t.tzinfo else t.replace(tzinfo=UTC) for t in (start, end))  # naive: UTC
        if end <= start:
            raise ValueError("a backfill's end must come after its start")
        handle, _ = await self._described(name)
        await handle.backfill(ScheduleBackfill(start_at=start, end_at=end))

    async def schedule_delete(self, name: str) -> None:
        """Delete the schedule (runs it started go on)."""
        handle, _ = await self._described(name)
        await handle.delete()


async def _summary(name: str, described: ScheduleDescription) -> ScheduleSummary:
    memo = (await described.memo()).get(MEMO) or {}
    state = described.schedule.state
    info = described.info
    job = str(memo.get("target", "")).startswith("job ")
    recent = [
        RUN_PREFIX + run_session_id(a.action.workflow_id) if job else a.action.workflow_id
        for a in info.recent_actions
        if isinstance(a.action, ScheduleActionExecutionStartWorkflow)
    ]
    return ScheduleSummary(
        name=name,
        target=memo.get("target", "?"),
        when=memo.get("when", "?"),
        paused=state.paused,
        note=state.note or "",
        overlap=memo.get("overlap", "?"),
        when_busy=memo.get("when_busy"),
        next_runs=list(info.next_action_times),
        recent_runs=recent,
        actions=info.num_actions,
    )


def _spec(
    cron: str | None, every: str | timedelta | None, jitter: str | timedelta | None, timezone: str | None
) -> tuple[ScheduleSpec, str]:
    """When a schedule fires, checked (a ValueError names what is wrong), and that in words."""
    if (cron is None) == (every is None):
        raise ValueError("a schedule needs exactly one of a cron expression or an interval (every)")
    if timezone is not None:
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {timezone!r} (use IANA names: Europe/Berlin)") from None
    interval = parse_duration(every, "every") if isinstance(every, str) else every
    spec = ScheduleSpec(
        cron_expressions=[cron] if cron is not None else [],
        intervals=[ScheduleIntervalSpec(every=interval)] if interval is not None else [],
        jitter=parse_duration(jitter, "jitter") if isinstance(jitter, str) else jitter,
        time_zone_name=timezone,
    )
    when = f"cron {cron}" if cron is not None else f"every {every}"
    when += f", jitter {jitter}" if jitter else ""
    when += f", {timezone}" if timezone else ""
    return spec, when
