"""ScheduleFire: what one firing of a Temporal Schedule does. Deterministic code only.

A schedule's action can only start a workflow, so every AgentWolf schedule starts this one
(id `wolf-fire/<tenant>/<name>`, to which Temporal appends the firing time). Aimed at a job, it
starts the job's session as a child (session id `<name>-<firing time>`, search attribute
`WolfSchedule`) and waits for it, so the schedule's overlap policy applies to job runs. Aimed at a
session, it delivers the prompt under the busy policy through `wolf.deliver_prompt` (a workflow
cannot send an update, and `skip` needs the session's state).
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agentwolf.config.jobs import BusyPolicy
    from agentwolf.workflows.session_input import SessionInput
    from agentwolf.workflows.types import (
        AGENT_ATTR,
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


class FireInput(BaseModel):
    """A job run (`session`: the session to start, its id filled per firing) or a prompt for
    `target` (a session of the schedule's tenant) under `when_busy`."""

    schedule: str
    tenant: str
    session: SessionInput | None = None
    target: str | None = None
    prompt: str | None = None
    when_busy: BusyPolicy = "queue"


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


@workflow.defn(name="ScheduleFire")
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
            return await self._run_job(inp, run_session_id(wid))
        assert inp.target is not None and inp.prompt is not None
        return await workflow.execute_activity(
            "wolf.deliver_prompt",
            DeliverInput(
                session_id=inp.target, prompt=inp.prompt, when_busy=inp.when_busy, schedule=inp.schedule
            ),
            result_type=Delivery,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=DELIVER_RETRY,
        )

    async def _run_job(self, inp: FireInput, session_id: str) -> Delivery:
        assert inp.session is not None
        session = inp.session.model_copy(update={"session_id": session_id, "tenant": inp.tenant})
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
                ]
            ),
        )
        return Delivery(session_id=session_id, delivered=True, result=result)
