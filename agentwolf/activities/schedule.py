"""`wolf.deliver_prompt`: a schedule's (or webhook's) prompt for a session, under a busy policy.

The target's tenant is the firing's, from its workflow id, never from input. A retry after a
delivered prompt delivers nothing twice: the prompt update's id is the firing's (Temporal returns
the first update's result for a repeated id within the session's run).
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.workflows.schedule import DeliverInput, Delivery
from agentwolf.workflows.types import tenant_of, workflow_id

BUSY_STATES = ("running", "waiting_approval")


@activity.defn(name="wolf.deliver_prompt")
async def deliver_prompt(inp: DeliverInput) -> Delivery:
    tenant = tenant_of(activity.info().workflow_id or "")
    if tenant is None:
        raise ApplicationError("refused: a delivery outside a schedule firing", non_retryable=True)
    info = activity.info()
    return await deliver(activity.client(), tenant, inp, update_id=f"{info.workflow_id}/{info.activity_id}")


async def deliver(client: Client, tenant: str, inp: DeliverInput, *, update_id: str) -> Delivery:
    """Deliver `inp.prompt` to the tenant's session: `queue` waits its turn, `steer` joins a running
    turn (or starts one), `interrupt` stops a running turn and runs next, `skip` leaves a busy session
    alone. `update_id` makes a repeated delivery of the same firing return the first one's turn."""
    handle = client.get_workflow_handle(workflow_id(tenant, inp.session_id))
    try:
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
