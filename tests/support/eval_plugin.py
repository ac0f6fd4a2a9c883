"""A plugin registering a custom eval evaluator (tests/test_evaluators.py)."""

from __future__ import annotations

from agentwolf.plugins import EvaluationReason, EvaluatorContext, PluginRegistry


def register(wolf: PluginRegistry) -> None:
    @wolf.evaluator
    def mentions_case(ctx: EvaluatorContext, prefix: str = "done") -> EvaluationReason:
        """The answer says `<prefix> N` for the case's prompt `case N`."""
        wanted = f"{prefix} {ctx.inputs.split()[-1]}"
        found = wanted in (ctx.output or "")
        return EvaluationReason(found, None if found else f"no {wanted!r} in the answer")
