"""Eval evaluators, with pydantic-evals' names and semantics for text answers (pydantic-evals itself
pins an older pydantic-ai than AgentWolf's): `SameTrajectory`, `EqualsExpected`, `Equals`,
`Contains`, `MatchesSchema`, `LLMJudge`, and the ones plugins register (`@wolf.evaluator`).

They run in the `wolf.eval_score` activity (activities/evals.py), so each verdict is recorded in the
eval run's history once. The LLM judge is one model request on the config's host, the path a
session's requests take (providers, secrets, shared limits)."""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from temporalio.exceptions import ApplicationError

from agentwolf.activities import live
from agentwolf.activities.model_request import PERMANENT_HTTP
from agentwolf.activities.provider_errors import http_failure
from agentwolf.activities.session_io import heartbeating
from agentwolf.config.aliases import resolve_model
from agentwolf.config.manifest import Manifest
from agentwolf.config.policy import redact
from agentwolf.hosts.host import HostRegistry
from agentwolf.plugins import EvaluationReason, Evaluator, EvaluatorContext, PluginError
from agentwolf.workflows.evals.cases import SAME_TRAJECTORY, Evaluation, EvaluatorSpec

JUDGE_INSTRUCTIONS = (
    "You grade an AI agent's answer against a rubric. Answer with one JSON object and nothing else: "
    '{"reason": "<why, in one sentence>", "pass": <true if the answer meets the rubric, else false>, '
    '"score": <a number from 0 to 1>}'
)


class Grading(BaseModel):
    """The judge's answer (pydantic-evals' `GradingOutput`)."""

    model_config = ConfigDict(populate_by_name=True)

    reason: str
    passed: bool = Field(alias="pass")
    score: float | None = None


def _short(text: str | None) -> str:
    return repr(text if text is None or len(text) <= 60 else text[:57] + "...")


def equals_expected(ctx: EvaluatorContext) -> EvaluationReason | None:
    """The answer is the case's expected output (no verdict when the case has none)."""
    if ctx.expected_output is None:
        return None
    return equals(ctx, ctx.expected_output)


def equals(ctx: EvaluatorContext, value: str) -> EvaluationReason:
    same = ctx.output == value
    return EvaluationReason(
        same, None if same else f"answered {_short(ctx.output)}, expected {_short(value)}"
    )


def contains(ctx: EvaluatorContext, value: str, case_sensitive: bool = True) -> EvaluationReason:
    output = ctx.output or ""
    found = value in output if case_sensitive else value.lower() in output.lower()
    return EvaluationReason(found, None if found else f"the answer {_short(ctx.output)} lacks {value!r}")


def matches_schema(ctx: EvaluatorContext, schema: dict[str, Any]) -> EvaluationReason:
    """The answer is JSON that validates against `schema` (pydantic-evals' `IsInstance`, for text)."""
    try:
        jsonschema.validate(json.loads(ctx.output or ""), schema)
    except json.JSONDecodeError:
        return EvaluationReason(False, f"the answer {_short(ctx.output)} is not JSON")
    except jsonschema.ValidationError as exc:
        return EvaluationReason(False, f"the answer does not match the schema: {exc.message}")
    return EvaluationReason(True)


BUILT_IN: dict[str, Evaluator] = {
    "EqualsExpected": equals_expected,
    "Equals": equals,
    "Contains": contains,
    "MatchesSchema": matches_schema,
}
"""The evaluators that need nothing but the case (SameTrajectory and LLMJudge are Evaluators')."""


@dataclass(frozen=True)
class Target:
    """Whose case is scored: the tenant (from the calling run's id), the case's agent, and how to get
    the config the case ran (asked of the run only when a judge needs it)."""

    tenant: str
    agent: str
    manifest: Callable[[], Awaitable[Manifest]]


class Evaluators:
    """The built-in evaluators and the worker's plugins' ones, by the name a dataset gives."""

    def __init__(self, hosts: HostRegistry) -> None:
        self.hosts = hosts
        self.plugins = hosts.plugins.evaluators
        clash = sorted(set(self.plugins) & {*BUILT_IN, SAME_TRAJECTORY, "LLMJudge"})
        if clash:
            raise PluginError(f"plugins register evaluators named as built-in ones: {', '.join(clash)}")

    async def run(
        self,
        spec: EvaluatorSpec,
        ctx: EvaluatorContext,
        diverged: str | None,
        target: Target,
    ) -> Evaluation | None:
        """One evaluator's verdict (None: it has none for this case). An evaluator that raises, or
        that the dataset calls with wrong arguments, fails the case with the error as its reason."""
        args, kwargs = spec.call_arguments()
        try:
            if spec.name == SAME_TRAJECTORY:
                verdict: Any = EvaluationReason(diverged is None, diverged)
            elif spec.name == "LLMJudge":
                verdict = await self.judge(ctx, target, *args, **kwargs)
            elif (evaluator := BUILT_IN.get(spec.name) or self.plugins.get(spec.name)) is not None:
                verdict = await _call(evaluator, ctx, args, kwargs)
            else:
                known = ", ".join(sorted({*BUILT_IN, SAME_TRAJECTORY, "LLMJudge", *self.plugins}))
                verdict = EvaluationReason(
                    False, f"no evaluator named {spec.name!r} on this worker ({known})"
                )
        except ModelHTTPError as exc:
            if exc.status_code not in PERMANENT_HTTP:  # retried, as a session's model request is
                raise ApplicationError(redact(http_failure(exc)), type="ModelHTTPError") from None
            verdict = EvaluationReason(False, f"{spec.name} failed: {http_failure(exc)}")
        except Exception as exc:  # noqa: BLE001 - a failing evaluator is a failed verdict, said
            verdict = EvaluationReason(False, f"{spec.name} failed: {type(exc).__name__}: {exc}")
        found = _evaluation(spec.name, verdict)
        if found is not None and found.reason:  # a judge's error may name a provider URL with a key
            found.reason = redact(found.reason)  # every secret value this process resolved
        return found

    async def judge(
        self,
        ctx: EvaluatorContext,
        target: Target,
        rubric: str,
        model: str | None = None,
        include_input: bool = False,
        include_expected_output: bool = False,
    ) -> EvaluationReason:
        """pydantic-evals' `LLMJudge`: one request to `model` (default: the case's agent's model)."""
        config, tenant = await target.manifest(), target.tenant
        host = self.hosts.ensure(config, tenant)
        specs = resolve_model(config.host.models, model or config.agents[target.agent].model)
        parts = [f"<Input>\n{ctx.inputs}\n</Input>"] if include_input else []
        parts.append(f"<Output>\n{ctx.output or ''}\n</Output>")
        if include_expected_output and ctx.expected_output is not None:
            parts.append(f"<ExpectedOutput>\n{ctx.expected_output}\n</ExpectedOutput>")
        parts.append(f"<Rubric>\n{rubric}\n</Rubric>")
        request = ModelRequest(parts=[UserPromptPart("\n".join(parts))], instructions=JUDGE_INSTRUCTIONS)
        with self.hosts.serving(config.identity, tenant):
            built = await heartbeating(host.model(specs))
            response = await heartbeating(
                live.request(built, [request], ModelSettings(), ModelRequestParameters(), None)
            )
        found = re.search(r"\{.*\}", response.text or "", re.DOTALL)
        try:
            grading = Grading.model_validate_json(found.group(0) if found else "")
        except ValidationError:
            return EvaluationReason(
                False, f"the judge did not answer the JSON asked for: {_short(response.text)}"
            )
        return EvaluationReason(grading.passed, grading.reason)


async def _call(evaluator: Evaluator, ctx: EvaluatorContext, args: list[Any], kwargs: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(evaluator):
        return await evaluator(ctx, *args, **kwargs)
    return await asyncio.to_thread(evaluator, ctx, *args, **kwargs)


def _evaluation(name: str, verdict: Any) -> Evaluation | None:
    if verdict is None:
        return None
    if not isinstance(verdict, EvaluationReason):
        verdict = EvaluationReason(verdict)
    value = verdict.value
    if not isinstance(value, bool) and not (isinstance(value, int | float) and 0 <= value <= 1):
        return Evaluation(
            name=name, value=False, reason=f"{name} returned {value!r}, not a bool or a 0-1 score"
        )
    return Evaluation(name=name, value=value, reason=verdict.reason)
