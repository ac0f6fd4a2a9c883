"""Evals from recorded sessions (workflows/evals/cases.py): capture a turn as a case, run cases against a
config or model with the recorded tool results, report scores and where trajectories diverge.

A run is an `EvalRun` workflow (workflows/evals/run.py); each case a background child session started
from the turn's prefix (as a fork is) with the prompt queued and the tool results recorded: matching
calls run nothing.
A dataset is a JSON Lines file (one case a line) when named by a path, or an `EvalDataset` workflow of
the client's tenant (workflows/evals/datasets.py) when named by a plain name (no `.` or `/`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from temporalio.client import WorkflowExecution

    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.evals.cases import EvalCase, EvalReport


class DatasetNotFound(ValueError):
    pass


class DatasetSummary(BaseModel):
    """One registry dataset as `wolf eval datasets` shows it (from visibility: no worker needed)."""

    name: str
    cases: int


def in_registry(dataset: str | Path) -> bool:
    """A plain name (`regressions`) names a registry dataset; anything with `.` or `/` a file, and so
    does a path that exists (a dataset file kept under a plain name before datasets had a registry)."""
    from agentwolf.workflows.types import is_config_name

    return isinstance(dataset, str) and is_config_name(dataset) and not Path(dataset).exists()


async def capture(
    wolf: WolfClient,
    session_id: str,
    turn: int | None = None,
    *,
    expected_output: str | None = None,
    evaluators: Sequence[Any] = (),
) -> EvalCase:
    """Turn `turn` of the session (default: its last finished one) as an eval case, scored by
    `SameTrajectory` and `evaluators` (EvaluatorSpec or their dataset forms: `{"Contains": "x"}`)."""
    from agentwolf.workflows.evals.cases import (
        SAME_TRAJECTORY,
        EvalCase,
        prompt_of,
        recorded_calls,
        trajectory,
    )
    from agentwolf.workflows.session.cuts import CutError

    source = await wolf.snapshot(session_id)
    finished = [m for m in source.turns if m.end is not None]
    if turn is None:
        mark = finished[-1] if finished else None
    else:
        mark = next((m for m in finished if m.turn_id == f"turn-{turn}"), None)
    if mark is None or mark.end is None:
        names = ", ".join(m.turn_id for m in finished) or "none"
        raise CutError(f"no finished turn {turn or ''} to capture in {session_id} (finished: {names})")
    messages = source.transcript[mark.start : mark.end]
    steps = trajectory(messages)
    return EvalCase(
        name=f"{source.session_id}:{mark.turn_id}",
        agent=source.agent,
        prefix=source.transcript[: mark.start],
        prompt=prompt_of(messages),
        calls=recorded_calls(messages),
        steps=steps,
        output=steps[-1].text if steps else None,
        expected_output=expected_output,
        evaluators=[
            SAME_TRAJECTORY,
            *(["EqualsExpected"] if expected_output is not None else []),
            *evaluators,
        ],
    )


async def save(wolf: WolfClient, case: EvalCase, dataset: str | Path) -> int:
    """Append the case to the dataset (a registry dataset is created by its first case); its size."""
    if not in_registry(dataset):
        path = Path(dataset)
        with path.open("a") as f:
            f.write(case.model_dump_json() + "\n")
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    from temporalio.client import WithStartWorkflowOperation
    from temporalio.common import SearchAttributePair, TypedSearchAttributes, WorkflowIDConflictPolicy

    from agentwolf.workflows.evals.datasets import DatasetInput, EvalDatasetWorkflow, dataset_id
    from agentwolf.workflows.types import TENANT_ATTR

    name = str(dataset)
    start = WithStartWorkflowOperation(
        EvalDatasetWorkflow.run,
        DatasetInput(name=name),
        id=dataset_id(wolf.tenant, name),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        task_queue=wolf.task_queue,
        search_attributes=TypedSearchAttributes([SearchAttributePair(TENANT_ATTR, wolf.tenant)]),
    )
    return await wolf.client.execute_update_with_start_workflow(
        EvalDatasetWorkflow.add, case, start_workflow_operation=start
    )


async def load(wolf: WolfClient, dataset: str | Path) -> list[EvalCase]:
    """A dataset's cases: a file's lines, or the registry dataset of the client's tenant."""
    from agentwolf.workflows.evals.cases import EvalCase

    if in_registry(dataset):
        cases = await _registry_cases(wolf, str(dataset))
    else:
        lines = [line for line in Path(dataset).read_text().splitlines() if line.strip()]
        cases = [EvalCase.model_validate_json(line) for line in lines]
    if not cases:
        raise ValueError(f"dataset {dataset} has no cases: `wolf eval capture` adds them")
    return cases


async def _registry_cases(wolf: WolfClient, name: str) -> list[EvalCase]:
    from temporalio.service import RPCError, RPCStatusCode

    from agentwolf.workflows.evals.datasets import EvalDatasetWorkflow, dataset_id

    handle = wolf.client.get_workflow_handle_for(EvalDatasetWorkflow.run, dataset_id(wolf.tenant, name))
    try:
        return await handle.query(EvalDatasetWorkflow.cases)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise DatasetNotFound(
                f"no dataset named {name!r} in tenant {wolf.tenant!r} (`wolf eval capture ID --dataset "
                f"{name}` creates it; a file is named by a path, ./{name})"
            ) from None
        raise


async def datasets(wolf: WolfClient) -> list[DatasetSummary]:
    """The client's tenant's registry datasets, by name."""
    from agentwolf.workflows.evals.datasets import DATASET_WORKFLOW
    from agentwolf.workflows.types import TENANT_ATTR, quote

    query = (
        f"WorkflowType = '{DATASET_WORKFLOW}' AND {TENANT_ATTR.name} = {quote(wolf.tenant)}"
        " AND ExecutionStatus = 'Running'"
    )
    # A run that just continued as new stays Running in visibility until its close is indexed, beside
    # the run that took over: its size is the older one, so each dataset's newest run is the one read.
    newest: dict[str, WorkflowExecution] = {}
    async for wf in wolf.client.list_workflows(query):
        name = wf.id.rsplit("/", 1)[-1]
        if name not in newest or wf.start_time > newest[name].start_time:
            newest[name] = wf
    return [
        DatasetSummary(name=name, cases=int((await wf.memo()).get("cases", 0)))
        for name, wf in sorted(newest.items())
    ]


async def run(
    wolf: WolfClient,
    cases: list[EvalCase],
    manifest: Manifest,
    *,
    model: str | None = None,
    live_tools: bool = False,
    concurrency: int = 10,
) -> EvalReport:
    """Each case asked again of `manifest`'s agent (its model replaced by `model`): an `EvalRun`
    workflow whose children are the cases' sessions, `concurrency` at once."""
    from agentwolf.workflows.evals.cases import EvalReport
    from agentwolf.workflows.evals.run import EVAL_WORKFLOW, EvalRunInput
    from agentwolf.workflows.types import workflow_id

    for case in cases:
        if case.agent not in manifest.agents:
            raise ValueError(f"the config has no agent {case.agent!r}, which case {case.name} recorded")
    if model is not None:
        agents = {name: a.model_copy(update={"model": model}) for name, a in manifest.agents.items()}
        manifest = manifest.model_copy(update={"agents": agents})
    run_id = workflow_id(wolf.tenant, f"_eval-{uuid.uuid4().hex[:8]}")
    inp = EvalRunInput(cases=cases, manifest=manifest, live_tools=live_tools, concurrency=concurrency)
    return await wolf.client.execute_workflow(
        EVAL_WORKFLOW, inp, id=run_id, task_queue=wolf.task_queue, result_type=EvalReport
    )
