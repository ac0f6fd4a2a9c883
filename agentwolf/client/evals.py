"""Evals from recorded sessions (workflows/evals.py): capture a turn as a case, run cases against a
config or model with the recorded tool results, report scores and where trajectories diverge.

A case runs as a background session of its own, started from the snapshot of the turn's prefix (as a
fork is) with the turn's prompt queued and its tool results recorded: matching calls run nothing.
Datasets are JSON Lines files, one case a line."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

if TYPE_CHECKING:
    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.evals import EvalCase


class CaseResult(BaseModel):
    name: str
    session_id: str
    score: float
    divergence: str | None
    """Where the trajectory left the recorded one (None: the same)."""
    output: str | None
    requests: int
    cost_usd: float | None


class EvalReport(BaseModel):
    cases: list[CaseResult]

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cases) / len(self.cases) if self.cases else 0.0


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
    """Each case asked again of `manifest`'s agent (its model replaced by `model`), as a background
    session with the recorded tool results; cases run `concurrency` at once."""
    gate = asyncio.Semaphore(concurrency)
    batch = uuid.uuid4().hex[:8]

    async def one(n: int, case: EvalCase) -> CaseResult:
        async with gate:
            return await _run_case(wolf, case, f"eval-{batch}-{n}", manifest, model, live_tools)

    return EvalReport(cases=list(await asyncio.gather(*(one(n, c) for n, c in enumerate(cases, 1)))))


async def _run_case(
    wolf: WolfClient, case: EvalCase, session_id: str, manifest: Manifest, model: str | None, live_tools: bool
) -> CaseResult:
    from agentwolf.workflows.evals import divergence, trajectory
    from agentwolf.workflows.session_input import SessionInput
    from agentwolf.workflows.types import Counters, Prompt

    if case.agent not in manifest.agents:
        raise ValueError(f"the config has no agent {case.agent!r}, which case {case.name} recorded")
    if model is not None:
        agent = manifest.agents[case.agent].model_copy(update={"model": model})
        manifest = manifest.model_copy(update={"agents": {**manifest.agents, case.agent: agent}})
    inp = SessionInput(
        session_id=session_id,
        tenant=wolf.tenant,
        agent=case.agent,
        manifest=manifest,
        background=True,
        transcript=case.prefix,
        counters=Counters(turn_seq=1),
        queue=[Prompt(turn_id="turn-1", text=case.prompt)],
        recorded=case.calls,
        live_tools=live_tools,
    )
    await wolf.start_from(inp, prompt=case.prompt)
    result = await wolf.result(session_id)
    transcript = await wolf.transcript(session_id)
    steps = trajectory(transcript[len(case.prefix) :])
    diverged = divergence(case.steps, steps)
    expected = case.expect_contains is None or case.expect_contains in (result.output or "")
    if diverged is None and not expected:
        diverged = f"the answer lacks {case.expect_contains!r}"
    usage = result.counters.usage
    return CaseResult(
        name=case.name,
        session_id=session_id,
        score=1.0 if diverged is None else 0.0,
        divergence=diverged,
        output=result.output,
        requests=usage.requests,
        cost_usd=usage.cost_usd,
    )
