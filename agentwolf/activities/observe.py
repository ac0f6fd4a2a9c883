"""What the activities report beyond their results: metrics (agentwolf.telemetry.metrics) and spans
for tool calls and skill reads (agentwolf.telemetry.tracing). Arguments and results go into spans
only under `WOLF_TRACE_CONTENT=1`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic_ai.messages import ModelResponse

from agentwolf.config.policy import Secrets
from agentwolf.telemetry import metrics, tracing
from agentwolf.workflows.contracts import ToolCallOutput


def model_label(spec: str, secrets: Secrets) -> str:
    """The one name a model goes by in metrics, `wolf usage` and events (so in workflow history):
    its spec with placeholders resolved as far as the worker's policy lets a value leave the worker
    (`Secrets.shown`): `${WOLF_MODEL:-local:demo}` -> `local:demo` when WOLF_MODEL is unset, but
    `openai:${MODEL_NAME}` stays so when MODEL_NAME's value is a secret the policy hides. Never an
    alias (specs are expanded) nor the provider's echo (`demo`), so tokens and cost join."""
    return secrets.shown(spec)


def answered_label(spec: str | None, response: ModelResponse, secrets: Secrets) -> str:
    """The label of the chain member that answered; when a fallback chain cannot tell which
    (`used_spec` is None), the provider's own names for it (redacted: it echoes resolved names)."""
    if spec is not None:
        return model_label(spec, secrets)
    name = response.model_name or "unknown"
    return secrets.redact(f"{response.provider_name}:{name}" if response.provider_name else name)


def model_answered(model: str, tenant: str, response: ModelResponse, cache_hit: bool) -> None:
    """A step: its tokens by model label and tenant, and whether the worker held the transcript."""
    metrics.count(metrics.STEPS, model=model, tenant=tenant)
    metrics.count(metrics.TOKENS, response.usage.input_tokens or 0, model=model, tenant=tenant, kind="input")
    metrics.count(
        metrics.TOKENS, response.usage.output_tokens or 0, model=model, tenant=tenant, kind="output"
    )
    metrics.count(metrics.TRANSCRIPT_CACHE, result="hit" if cache_hit else "miss")


class Outcome:
    """Where a traced call's result is reported (`done`); none reported means it raised."""

    def __init__(self, span: Any) -> None:
        self.span = span
        self.value = "raised"

    def done(self, output: ToolCallOutput) -> None:
        self.value = "error" if output.is_error else "ok"
        self.span.set_attribute("wolf.outcome", self.value)
        if tracing.content_enabled():
            self.span.set_attribute("gen_ai.tool.call.result", output.content)


@contextmanager
def tool_call(server: str, tool: str, arguments: dict[str, Any]) -> Iterator[Outcome]:
    """A tool call's span (server, tool, outcome) and its latency in `wolf_tool_call_seconds`."""
    started = time.perf_counter()
    attributes = {"mcp.server": server, "gen_ai.tool.name": tool, "gen_ai.operation.name": "execute_tool"}
    content = {"gen_ai.tool.call.arguments": json.dumps(arguments, default=str)}
    with tracing.span(f"call_tool {server}.{tool}", attributes, content) as span:
        outcome = Outcome(span)
        try:
            yield outcome
        finally:
            elapsed = time.perf_counter() - started
            metrics.observe(metrics.TOOL_SECONDS, elapsed, server=server, tool=tool, outcome=outcome.value)


@contextmanager
def skill_read(uri: str) -> Iterator[Outcome]:
    """A skill file read's span (uri, outcome)."""
    with tracing.span("read_skill", {"wolf.skill.uri": uri}) as span:
        yield Outcome(span)
