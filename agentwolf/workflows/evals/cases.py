"""Evals from recorded sessions: a case is one recorded turn (the transcript before it, its prompt,
its tool calls with their results, its answer); a run asks the turn again of a config or model
with the recorded tool results, and compares the trajectories step by step.

In the session workflow a `Recording` answers tool calls: a call with the same tool and arguments as
a recorded one (not yet served) gets the recorded result and runs nothing; a call that diverges
runs only if the tool is read-only or idempotent (or the run allows live tools), else it is
answered "not run". Pure data and deterministic helpers, imported passed through."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, model_serializer, model_validator
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolReturnPart, UserPromptPart

from agentwolf.workflows.contracts import ToolCallOutput, ToolOutcome, ToolSpec

RECORDED = "recorded-tools"  # patch: an eval session's tool calls get recorded results (session/tools.py)
NOT_RUN = "not run: this call differs from the recording, and the tool may have side effects (eval)"


def call_key(tool: str, args: dict[str, Any]) -> str:
    """A call as recordings match it: the tool and its arguments in canonical JSON."""
    return f"{tool} {json.dumps(args, sort_keys=True, default=str)}"


class RecordedCall(BaseModel):
    tool: str
    args: dict[str, Any]
    content: str
    is_error: bool = False


class Step(BaseModel):
    """One step of a trajectory: the calls the model asked for (canonical), or its answer."""

    calls: list[str] = []
    text: str | None = None


SAME_TRAJECTORY = "SameTrajectory"
"""The evaluator every captured case starts with: the new trajectory is the recorded one."""


class EvaluatorSpec(BaseModel):
    """An evaluator as a dataset names it, in pydantic-evals' short forms: `"EqualsExpected"` (no
    arguments), `{"Contains": "Tokyo"}` (one positional argument), `{"LLMJudge": {"rubric": "...",
    "model": "openai:gpt-4o"}}` (keyword arguments)."""

    name: str
    arguments: Any = None
    """None, one positional argument, or a dict of keyword arguments."""

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"name": data}
        if isinstance(data, dict) and len(data) == 1 and "name" not in data:
            ((name, arguments),) = data.items()
            return {"name": name, "arguments": arguments}
        return data

    @model_serializer
    def _dump(self) -> Any:
        return self.name if self.arguments is None else {self.name: self.arguments}

    def call_arguments(self) -> tuple[list[Any], dict[str, Any]]:
        if self.arguments is None:
            return [], {}
        if isinstance(self.arguments, dict):
            return [], self.arguments
        return [self.arguments], {}


class EvalCase(BaseModel):
    """One recorded turn, as `wolf eval capture` writes it (a line of a dataset's JSONL file)."""

    name: str
    agent: str
    prefix: list[ModelMessage]
    prompt: str
    calls: list[RecordedCall]
    steps: list[Step]
    output: str | None
    """The recorded answer."""
    expected_output: str | None = None
    """What `EqualsExpected` compares the new answer with (`--expect-exact`)."""
    evaluators: list[EvaluatorSpec] = [EvaluatorSpec(name=SAME_TRAJECTORY)]

    @model_validator(mode="before")
    @classmethod
    def _older_expectation(cls, data: Any) -> Any:
        """Datasets written before evaluators said `expect_contains`: a `Contains` evaluator now."""
        if isinstance(data, dict) and "expect_contains" in data:
            data = dict(data)
            contains = data.pop("expect_contains")
            if contains is not None:
                data["evaluators"] = [SAME_TRAJECTORY, {"Contains": contains}]
        return data


class Evaluation(BaseModel):
    """One evaluator's verdict on one case: an assertion (bool) or a score in [0, 1]."""

    name: str
    value: bool | float
    reason: str | None = None

    @property
    def score(self) -> float:
        return float(self.value)


class CaseResult(BaseModel):
    name: str
    session_id: str
    score: float
    """The mean of the evaluations' scores (1 when the case has none)."""
    divergence: str | None
    """Where the trajectory left the recorded one (None: the same)."""
    output: str | None
    requests: int
    cost_usd: float | None
    evaluations: list[Evaluation] = []


class EvalReport(BaseModel):
    cases: list[CaseResult]
    run_id: str = ""
    """The `EvalRun` workflow's id."""

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cases) / len(self.cases) if self.cases else 0.0

    def by_evaluator(self) -> dict[str, float]:
        """Each evaluator's mean score over the cases it judged (pydantic-evals' averages)."""
        scores: dict[str, list[float]] = {}
        for evaluation in (e for c in self.cases for e in c.evaluations):
            scores.setdefault(evaluation.name, []).append(evaluation.score)
        return {name: sum(s) / len(s) for name, s in scores.items()}


class Recording:
    """Recorded results, served once each in order per (tool, arguments)."""

    def __init__(self, calls: list[RecordedCall], live: bool = False) -> None:
        self.live = live
        self.waiting: dict[str, list[RecordedCall]] = {}
        for call in calls:
            self.waiting.setdefault(call_key(call.tool, call.args), []).append(call)

    def serve(self, spec: ToolSpec, args: dict[str, Any]) -> ToolCallOutput | None:
        """The recorded result, a refusal for a divergent call with side effects, or None (run it)."""
        recorded = self.waiting.get(call_key(spec.name, args))
        if recorded:
            call = recorded.pop(0)
            return ToolCallOutput(content=call.content, is_error=call.is_error)
        if spec.repeat_safe or self.live:
            return None
        return ToolCallOutput(content=NOT_RUN, is_error=True)


def trajectory(messages: list[ModelMessage]) -> list[Step]:
    """The steps of a turn's messages: each response's calls, or its answer."""
    return [
        Step(calls=[call_key(c.tool_name, c.args_as_dict()) for c in m.tool_calls])
        if m.tool_calls
        else Step(text=m.text)
        for m in messages
        if isinstance(m, ModelResponse)
    ]


def recorded_calls(messages: list[ModelMessage]) -> list[RecordedCall]:
    """The calls a turn made that reached their tool, with their results."""
    results = {
        p.tool_call_id: p
        for m in messages
        for p in getattr(m, "parts", [])
        if isinstance(p, ToolReturnPart) and p.outcome in (ToolOutcome.SUCCESS, ToolOutcome.FAILED)
    }
    return [
        RecordedCall(
            tool=c.tool_name,
            args=c.args_as_dict(),
            content=str(results[c.tool_call_id].content),
            is_error=results[c.tool_call_id].outcome == ToolOutcome.FAILED,
        )
        for m in messages
        if isinstance(m, ModelResponse)
        for c in m.tool_calls
        if c.tool_call_id in results
    ]


def prompt_of(messages: list[ModelMessage]) -> str:
    first = messages[0] if messages else None
    texts = [p.content for p in getattr(first, "parts", []) if isinstance(p, UserPromptPart)]
    if not texts or not isinstance(texts[0], str):
        raise ValueError("this turn did not start with a text prompt")
    return texts[0]


def divergence(recorded: list[Step], new: list[Step]) -> str | None:
    """Where and how the new trajectory leaves the recorded one, or None when they are the same."""
    for n, (was, now) in enumerate(zip(recorded, new, strict=False), 1):
        if was.calls != now.calls:
            return f"step {n}: called {now.calls or 'nothing'} instead of {was.calls or 'nothing'}"
        if was.text != now.text:
            return f"step {n}: answered {_short(now.text)} instead of {_short(was.text)}"
    if len(recorded) != len(new):
        return f"step {min(len(recorded), len(new)) + 1}: {len(new)} steps instead of {len(recorded)}"
    return None


def _short(text: str | None) -> str:
    return repr(text if text is None or len(text) <= 60 else text[:57] + "...")


def case_score(evaluations: list[Evaluation]) -> float:
    return sum(e.score for e in evaluations) / len(evaluations) if evaluations else 1.0


class ScoreInput(BaseModel):
    """`wolf.eval_score`: read a finished case's trajectory from its session and run the case's
    evaluators (the case without its prefix and recorded calls, so history stays small)."""

    workflow_id: str
    start: int
    """The transcript index where the case's new messages begin (after the recorded prefix)."""
    name: str
    agent: str
    prompt: str
    steps: list[Step]
    """The recorded trajectory."""
    expected_output: str | None
    evaluators: list[EvaluatorSpec]
    output: str | None
    """The new answer."""

    @classmethod
    def of(cls, case: EvalCase, workflow_id: str, output: str | None) -> ScoreInput:
        return cls(
            workflow_id=workflow_id,
            start=len(case.prefix),
            **case.model_dump(include={"name", "agent", "prompt", "steps", "expected_output"}),
            evaluators=case.evaluators,
            output=output,
        )


class Scored(BaseModel):
    steps: list[Step]
    divergence: str | None
    evaluations: list[Evaluation]
