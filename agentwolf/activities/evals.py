"""The eval run's activities (eval_run.py): `wolf.eval_score` reads a finished case's trajectory from
its session and runs the case's evaluators (activities/evaluators.py); `wolf.eval_steps` only reads
the trajectory, for runs recorded before evaluators."""

from __future__ import annotations

from temporalio import activity

from agentwolf.access import caller_tenant
from agentwolf.activities.evaluators import Evaluators, Target
from agentwolf.config.manifest import Manifest
from agentwolf.hosts.host import HostRegistry
from agentwolf.plugins import EvaluatorContext
from agentwolf.transcript_store import read_transcript
from agentwolf.workflows.evals.cases import Scored, ScoreInput, Step, divergence, trajectory
from agentwolf.workflows.evals.run import StepsInput
from agentwolf.workflows.types import tenant_of


@activity.defn(name="wolf.eval_steps")
async def eval_steps(inp: StepsInput) -> list[Step]:
    """The steps of the case's session after its recorded prefix (only they enter history): of a
    session of the calling run's own tenant only."""
    caller_tenant(_tenant_named(inp.workflow_id))
    return await _steps(inp.workflow_id, inp.start)


def _tenant_named(workflow_id: str) -> str:
    """The tenant a case's session id names ("" for an id that names none: nobody's)."""
    return tenant_of(workflow_id) or ""


async def _steps(workflow_id: str, start: int) -> list[Step]:
    client = activity.client()
    handle = client.get_workflow_handle(workflow_id)
    transcript = await read_transcript(handle.query, client.data_converter)
    return trajectory(transcript[start:])


class EvalActivities:
    def __init__(self, hosts: HostRegistry) -> None:
        self.hosts = hosts
        self.evaluators = Evaluators(hosts)

    @activity.defn(name="wolf.eval_score")
    async def eval_score(self, inp: ScoreInput) -> Scored:
        """The case's new trajectory, where it left the recorded one, and each evaluator's verdict."""
        run_id = activity.info().workflow_id or ""
        tenant = caller_tenant(_tenant_named(inp.workflow_id), self.hosts.tenant)
        steps = await _steps(inp.workflow_id, inp.start)
        diverged = divergence(inp.steps, steps)
        ctx = EvaluatorContext(
            name=inp.name,
            inputs=inp.prompt,
            output=inp.output,
            expected_output=inp.expected_output,
            recorded_output=inp.steps[-1].text if inp.steps else None,
            steps=[s.model_dump() for s in steps],
        )

        async def manifest() -> Manifest:
            return await activity.client().get_workflow_handle(run_id).query("manifest", result_type=Manifest)

        target = Target(tenant=tenant, agent=inp.agent, manifest=manifest)
        evaluations = [
            found
            for spec in inp.evaluators
            if (found := await self.evaluators.run(spec, ctx, diverged, target)) is not None
        ]
        return Scored(steps=steps, divergence=diverged, evaluations=evaluations)
