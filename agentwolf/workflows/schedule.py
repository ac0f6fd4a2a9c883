"""ScheduleFire: what one firing of a Temporal Schedule does. Deterministic code only.

A schedule's action can only start a workflow, so every AgentWolf schedule starts this one
(id `wolf-fire/<tenant>/<name>`, to which Temporal appends the firing time). Aimed at a job, it
starts the job's session as a child (session id `_<name>-<firing time>`, search attribute
`WolfSchedule`) and waits for it, so the schedule's overlap policy applies to job runs. Aimed at a
session, it delivers the prompt under the busy policy through `wolf.deliver_prompt` (a workflow
cannot send an update, and `skip` needs the session's state).

A job of a registry config runs the config's version current at the firing (`wolf.job_session`), not
the one current when the schedule was made. A `steer`, and the `interrupt` before an interrupting
prompt, are signals this workflow sends itself: recorded commands, sent once, so a retried delivery
activity neither steers twice nor interrupts the turn its own first attempt started.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agentwolf.config.jobs import BusyPolicy
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.session_input import SessionInput
    from agentwolf.workflows.types import (
        AGENT_ATTR,
        CONFIG_ATTR,
        RUN_PREFIX,
        SCHEDULE_ATTR,
        SESSION_WORKFLOW,
        STATE_ATTR,
        TENANT_ATTR,
        SessionResult,
        fire_id,
        run_session_id,
        tenant_of,
        workflow_id,
    )

DELIVER_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10), maximum_attempts=5
)
CURRENT_CONFIG_PATCH = "fire-current-config"
"""Firings that resolve a registry job's current version (an activity before the child starts)."""
SIGNAL_ONCE_PATCH = "fire-signals-once"
"""Firings that send `steer` and `interrupt` themselves instead of from the delivery activity."""
RUN_IDS_PATCH = "fire-reserved-run-ids"
"""Firings whose job runs' session ids start with `RUN_PREFIX` (no client can take them first)."""


class FireInput(BaseModel):
    """A job run (`session`: the session to start, its id filled per firing) or a prompt for
    `target` (a session of the schedule's tenant) under `when_busy`."""

    schedule: str
    tenant: str
    session: SessionInput | None = None
    target: str | None = None
    prompt: str | None = None
    when_busy: BusyPolicy = "queue"
    job: str | None = None
    """The job `session` runs; of a registry config, it is rendered with `variables` from the
    version current at each firing (schedules made before this field run `session` as it is)."""
    variables: dict[str, Any] = {}


class JobRequest(BaseModel):
    """`job` of registry config `config_name` with `variables`, as its current version has it."""

    config_name: str
    job: str
    variables: dict[str, Any] = {}


def job_session(
    manifest: Manifest,
    job: str,
    variables: dict[str, object],
    *,
    tenant: str,
    config_name: str | None = None,
    version: int | None = None,
) -> SessionInput:
    """The background session a run of `job` starts, its id left to the caller (a bad job or
    variable is a ValueError before anything starts)."""
    spec = manifest.job(job)
    return SessionInput(
        session_id="",
        tenant=tenant,
        agent=spec.agent,
        manifest=manifest,
        prompt=spec.render(variables),
        background=True,
        config_name=config_name,
        config_version=version,
        output_schema=spec.output,
    )


class DeliverInput(BaseModel):
    session_id: str
    prompt: str
    when_busy: BusyPolicy
    schedule: str


class Delivery(BaseModel):
    """What a firing did: `session_id` ran (a job), or got the prompt (`turn_id`), or was skipped."""

    session_id: str
    delivered: bool
    turn_id: str | None = None
    detail: str = ""
    result: SessionResult | None = None


SCHEDULE_WORKFLOW = "ScheduleFire"


@workflow.defn(name=SCHEDULE_WORKFLOW)
class ScheduleFireWorkflow:
    @workflow.run
    async def run(self, inp: FireInput) -> Delivery:
        wid = workflow.info().workflow_id
        prefix = fire_id(inp.tenant, inp.schedule)
        if tenant_of(wid) != inp.tenant or not wid.startswith(prefix):
            raise ApplicationError(
                f"refused: firing {wid!r} is not one of schedule {inp.schedule!r} of tenant {inp.tenant!r}",
                type="TenantMismatch",
                non_retryable=True,
            )
        if inp.session is not None:
            prefix = RUN_PREFIX if workflow.patched(RUN_IDS_PATCH) else ""
            return await self._run_job(inp, prefix + run_session_id(wid))
        assert inp.target is not None and inp.prompt is not None
        when_busy = inp.when_busy
        if when_busy in ("steer", "interrupt") and workflow.patched(SIGNAL_ONCE_PATCH):
            if when_busy == "steer":
                await self._signal(inp, "steer", inp.prompt)
                return Delivery(session_id=inp.target, delivered=True, detail="steered")
            await self._signal(inp, "interrupt", f"interrupted by schedule {inp.schedule}")
            when_busy = "queue"  # the prompt update (deduplicated by its id) runs next
        delivery = await workflow.execute_activity(
            "wolf.deliver_prompt",
            DeliverInput(
                session_id=inp.target, prompt=inp.prompt, when_busy=when_busy, schedule=inp.schedule
            ),
            result_type=Delivery,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=DELIVER_RETRY,
        )
        if when_busy != inp.when_busy:  # an interrupt, then the prompt queued in its place
            return delivery.model_copy(update={"detail": inp.when_busy})
        return delivery

    async def _signal(self, inp: FireInput, signal: str, arg: str) -> None:
        assert inp.target is not None
        target = workflow.get_external_workflow_handle(workflow_id(inp.tenant, inp.target))
        try:
            await target.signal(signal, arg)
        except ApplicationError:  # the server found no running session by that id
            raise ApplicationError(
                f"session {inp.target!r} not found in tenant {inp.tenant!r}",
                type="SessionNotFound",
                non_retryable=True,
            ) from None

    async def _run_job(self, inp: FireInput, session_id: str) -> Delivery:
        assert inp.session is not None
        session, attributes = inp.session, []
        config = session.config_name
        if inp.job is not None and config and workflow.patched(CURRENT_CONFIG_PATCH):
            session = await workflow.execute_activity(
                "wolf.job_session",
                JobRequest(config_name=config, job=inp.job, variables=inp.variables),
                result_type=SessionInput,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=DELIVER_RETRY,
            )
            attributes.append(SearchAttributePair(CONFIG_ATTR, config))  # later pushes reach the run too
        session = session.model_copy(update={"session_id": session_id, "tenant": inp.tenant})
        result = await workflow.execute_child_workflow(
            SESSION_WORKFLOW,
            session,
            id=workflow_id(inp.tenant, session_id),
            result_type=SessionResult,
            search_attributes=TypedSearchAttributes(
                [
                    SearchAttributePair(TENANT_ATTR, inp.tenant),
                    SearchAttributePair(AGENT_ATTR, session.agent),
                    SearchAttributePair(STATE_ATTR, "idle"),
                    SearchAttributePair(SCHEDULE_ATTR, inp.schedule),
                    *attributes,
                ]
            ),
        )
        return Delivery(session_id=session_id, delivered=True, result=result)
