"""What a schedule's (or webhook's) firing asks of the world: `wolf.deliver_prompt` (a prompt for a
session, under a busy policy) and `wolf.job_session` (a registry job's run, on the config's current
version).

The target's tenant is the firing's, from its workflow id, never from input. A retry after a
delivered prompt delivers nothing twice: the prompt update's id is the firing's (Temporal returns
the first update's result for a repeated id within the session's run, and a retry asks the runs the
session continued as new from since its first attempt). Firings send `steer` and
`interrupt` themselves (workflows/schedule.py); this activity still does for firings that began on
older code.
"""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.access import caller_tenant, workflow_id
from agentwolf.workflows.configs.config_registry import ConfigRegistryWorkflow
from agentwolf.workflows.schedule import DeliverInput, Delivery, JobRequest, job_session
from agentwolf.workflows.session_input import SessionInput
from agentwolf.workflows.types import registry_id

BUSY_STATES = ("running", "waiting_approval")


@activity.defn(name="wolf.deliver_prompt")
async def deliver_prompt(inp: DeliverInput) -> Delivery:
    info = activity.info()
    since = info.scheduled_time if info.attempt > 1 else None  # a retry: look back to the first attempt
    return await deliver(
        activity.client(),
        caller_tenant(),
        inp,
        update_id=f"{info.workflow_id}/{info.activity_id}",
        since=since,
    )


@activity.defn(name="wolf.job_session")
async def registry_job_session(req: JobRequest) -> SessionInput:
    """The run of `req.job` on the current version of the tenant's config `req.config_name`; a
    config, job or variable that no longer fits fails the firing (retrying cannot fix it)."""
    tenant = caller_tenant()
    registry = activity.client().get_workflow_handle(registry_id(tenant, req.config_name))
    try:
        current = await registry.query(ConfigRegistryWorkflow.current)
        if current is None:
            raise ValueError("it has no version")
        return job_session(
            current.manifest,
            req.job,
            req.variables,
            tenant=tenant,
            config_name=req.config_name,
            version=current.version,
        )
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        problem = "it does not exist"
    except ValueError as exc:  # JobError too: the job or its variables no longer fit
        problem = str(exc)
    raise ApplicationError(
        f"job {req.job!r} of config {req.config_name!r} cannot run: {problem}",
        type="JobError",
        non_retryable=True,
    )


async def deliver(
    client: Client, tenant: str, inp: DeliverInput, *, update_id: str, since: datetime | None = None
) -> Delivery:
    """Deliver `inp.prompt` to the tenant's session: `queue` waits its turn, `steer` joins a running
    turn (or starts one), `interrupt` stops a running turn and runs next, `skip` leaves a busy session
    alone. `update_id` makes a repeated delivery of the same firing return the first one's turn;
    `since` (a retry: when the first attempt began) finds it in runs the session continued as new
    from since then, which Temporal's update ids do not reach."""
    handle = client.get_workflow_handle(workflow_id(tenant, inp.session_id))
    try:
        earlier = await _delivered_before(client, handle.id, update_id, since) if since else None
        if earlier is not None:
            return Delivery(session_id=inp.session_id, delivered=True, turn_id=earlier, detail=inp.when_busy)
        if inp.when_busy == "skip":
            status = await handle.query("status")
            if status["state"] in BUSY_STATES or status["queued"]:
                return Delivery(
                    session_id=inp.session_id,
                    delivered=False,
                    detail=f"skipped: the session is {status['state']}",
                )
        if inp.when_busy == "steer":
            await handle.signal("steer", inp.prompt)
            return Delivery(session_id=inp.session_id, delivered=True, detail="steered")
        if inp.when_busy == "interrupt":
            await handle.signal("interrupt", f"interrupted by schedule {inp.schedule}")
        turn_id = await handle.execute_update("prompt", inp.prompt, id=update_id, result_type=str)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise ApplicationError(
                f"session {inp.session_id!r} not found in tenant {tenant!r}",
                type="SessionNotFound",
                non_retryable=True,
            ) from None
        raise
    except WorkflowUpdateFailedError as exc:  # the session refused the prompt (closed, queue full)
        raise ApplicationError(
            f"session {inp.session_id!r} refused the prompt: {exc.cause}",
            type="PromptRefused",
            non_retryable=True,
        ) from None
    return Delivery(session_id=inp.session_id, delivered=True, turn_id=turn_id, detail=inp.when_busy)


async def _delivered_before(client: Client, wid: str, update_id: str, since: datetime) -> str | None:
    """The turn id prompt update `update_id` got in a run before the current one, searched back
    through the runs that began after `since` (the first attempt went to the run current then)."""
    run_id = None
    while True:
        history = client.get_workflow_handle(wid, run_id=run_id).fetch_history_events(page_size=1)
        first = await anext(aiter(history))
        if first.event_time.ToDatetime(tzinfo=UTC) < since:
            return None
        run_id = first.workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            return None
        try:
            earlier = client.get_workflow_handle(wid, run_id=run_id).get_update_handle(
                update_id, result_type=str
            )
            return str(await earlier.result())
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
