"""The eval run's one activity: a finished case's trajectory, read from its session (eval_run.py)."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage
from temporalio import activity

from agentwolf.workflows.contracts import TRANSCRIPT_QUERY
from agentwolf.workflows.eval_run import StepsInput
from agentwolf.workflows.evals import Step, trajectory


@activity.defn(name="wolf.eval_steps")
async def eval_steps(inp: StepsInput) -> list[Step]:
    """The steps of the case's session after its recorded prefix (only they enter history)."""
    handle = activity.client().get_workflow_handle(inp.workflow_id)
    transcript = await handle.query(TRANSCRIPT_QUERY, result_type=list[ModelMessage])
    return trajectory(transcript[inp.start :])
