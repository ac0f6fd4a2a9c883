"""Evals from recorded sessions (workflows/evals.py): capture a turn as a case, run cases against a
config or model with the recorded tool results, report scores and where trajectories diverge.

A run is an `EvalRun` workflow (workflows/eval_run.py); each case a background child session started
from the turn's prefix (as a fork is) with the prompt queued and the tool results recorded: matching
calls run nothing.
Datasets are JSON Lines files, one case a line."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.evals import EvalCase, EvalReport


async def capture(
    wolf: WolfClient, session_id: str, turn: int | None = None, *, expect_contains: str | None = None
) -> EvalCase:
    """Turn `turn` of the session (default: its last finished one) as an eval case."""
    from agentwolf.workflows.cuts import CutError
    from agentwolf.workflows.evals import EvalCase, prompt_of, recorded_calls, trajectory

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
        expect_contains=expect_contains,
    )


def save(case: EvalCase, dataset: Path) -> None:
    with dataset.open("a") as f:
        f.write(case.model_dump_json() + "\n")


def load(dataset: Path) -> list[EvalCase]:
    from agentwolf.workflows.evals import EvalCase

    lines = [line for line in dataset.read_text().splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"dataset {dataset} has no cases: `wolf eval capture` adds them")
    return [EvalCase.model_validate_json(line) for line in lines]


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
    from agentwolf.workflows.eval_run import EVAL_WORKFLOW, EvalRunInput
    from agentwolf.workflows.evals import EvalReport
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
