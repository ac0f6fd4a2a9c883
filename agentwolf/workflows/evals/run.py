"""EvalRun: one `wolf eval run` as a workflow, its cases as child sessions (workflows/evals/cases.py).

Each case is a background session started from the recorded turn's prefix with its prompt queued
and its tool results recorded; at most `concurrency` run at once, and the run survives worker
restarts like any workflow (`progress` says how far it is). A finished case is scored by
`wolf.eval_score`: it reads the case's trajectory (a query of the child, the new messages only, so
history stays small) and runs the case's evaluators, the LLM judge and plugins' evaluators included,
so their verdicts are recorded once and a worker lost mid-run loses none. Deterministic code only."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic import BaseModel
from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from agentwolf.config.manifest import Manifest
    from agentwolf.config.quotas import PRIORITY_MEMO, session_priority
    from agentwolf.workflows.evals.cases import (
        CaseResult,
        EvalCase,
        EvalReport,
        Scored,
        ScoreInput,
        Step,
        case_score,
        divergence,
    )
    from agentwolf.workflows.session_input import SessionInput
    from agentwolf.workflows.types import (
        AGENT_ATTR,
        PARENT_ATTR,
        SESSION_WORKFLOW,
        STATE_ATTR,
        TENANT_ATTR,
        Counters,
        Prompt,
        SessionResult,
        tenant_of,
        workflow_id,
    )

EVAL_WORKFLOW = "EvalRun"
STEPS_RETRY = RetryPolicy(maximum_attempts=5)
EVALUATORS = "eval-evaluators"
"""Patch: a case is scored by `wolf.eval_score` (evaluators); runs recorded before it read the
trajectory with `wolf.eval_steps` and scored it here."""
EVAL_TENANT = "eval-tenant"
"""Patch: a run whose id names no tenant is refused; runs recorded before it ran their cases as
tenant "default"."""


class EvalRunInput(BaseModel):
    cases: list[EvalCase]
    manifest: Manifest
    live_tools: bool = False
    concurrency: int = 10


class StepsInput(BaseModel):
    """Which child to read, from which transcript index on."""

    workflow_id: str
    start: int


@workflow.defn(name=EVAL_WORKFLOW)
class EvalRunWorkflow:
    @workflow.init
    def __init__(self, inp: EvalRunInput) -> None:
        self.finished = 0
        self.total = len(inp.cases)
        self.inp = inp

    @workflow.run
    async def run(self, inp: EvalRunInput) -> EvalReport:
        run_id = workflow.info().workflow_id
        if tenant_of(run_id) is None and workflow.patched(EVAL_TENANT):  # its cases' tenant comes from it
            raise ApplicationError(
                f"refused: eval run {run_id!r} names no tenant (eval runs are wolf/<tenant>/...)",
                type="TenantMismatch",
                non_retryable=True,
            )
        gate = asyncio.Semaphore(max(1, inp.concurrency))

        async def one(n: int, case: EvalCase) -> CaseResult:
            async with gate:
                result = await self._case(inp, case, f"{run_id.rsplit('/', 1)[-1]}.case-{n}")
            self.finished += 1
            return result

        cases = await asyncio.gather(*(one(n, c) for n, c in enumerate(inp.cases, 1)))
        return EvalReport(cases=list(cases), run_id=run_id)

    async def _case(self, inp: EvalRunInput, case: EvalCase, session_id: str) -> CaseResult:
        tenant = tenant_of(workflow.info().workflow_id) or "default"  # "default": runs before EVAL_TENANT
        wid = workflow_id(tenant, session_id)
        try:
            result = await workflow.execute_child_workflow(
                SESSION_WORKFLOW,
                SessionInput(
                    session_id=session_id,
                    tenant=tenant,
                    agent=case.agent,
                    manifest=inp.manifest,
                    background=True,
                    transcript=case.prefix,
                    counters=Counters(turn_seq=1),
                    queue=[Prompt(turn_id="turn-1", text=case.prompt)],
                    recorded=case.calls,
                    live_tools=inp.live_tools,
                ),
                id=wid,
                result_type=SessionResult,
                static_summary=f"eval case {case.name}",
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(TENANT_ATTR, tenant),
                        SearchAttributePair(AGENT_ATTR, case.agent),
                        SearchAttributePair(STATE_ATTR, "idle"),
                        SearchAttributePair(PARENT_ATTR, workflow.info().workflow_id),
                    ]
                ),
                memo={PRIORITY_MEMO: session_priority(True, None)},
            )
        except ChildWorkflowError as err:
            return _failed(case, session_id, f"the case's session failed: {err.cause or err}")
        if workflow.patched(EVALUATORS):
            try:
                scored = await workflow.execute_activity(
                    "wolf.eval_score",
                    ScoreInput.of(case, wid, result.output),
                    result_type=Scored,
                    start_to_close_timeout=timedelta(minutes=5),
                    retry_policy=STEPS_RETRY,
                )
            except ActivityError as err:  # e.g. the judge's provider down past every retry
                return _failed(case, session_id, f"the case could not be scored: {err.cause or err}")
            score, diverged, evaluations = (
                case_score(scored.evaluations),
                scored.divergence,
                scored.evaluations,
            )
        else:
            steps = await workflow.execute_activity(
                "wolf.eval_steps",
                StepsInput(workflow_id=wid, start=len(case.prefix)),
                result_type=list[Step],
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=STEPS_RETRY,
            )
            diverged, evaluations = divergence(case.steps, steps), []
            score = 1.0 if diverged is None else 0.0
        usage = result.counters.usage
        return CaseResult(
            name=case.name,
            session_id=session_id,
            score=score,
            divergence=diverged,
            output=result.output,
            requests=usage.requests,
            cost_usd=usage.cost_usd,
            evaluations=evaluations,
        )

    @workflow.query(description="Cases finished, of how many.")
    def progress(self) -> tuple[int, int]:
        return self.finished, self.total

    @workflow.query(description="The config the cases run (an LLM judge's model and providers).")
    def manifest(self) -> Manifest:
        return self.inp.manifest


def _failed(case: EvalCase, session_id: str, why: str) -> CaseResult:
    return CaseResult(
        name=case.name,
        session_id=session_id,
        score=0.0,
        divergence=why,
        output=None,
        requests=0,
        cost_usd=None,
    )
