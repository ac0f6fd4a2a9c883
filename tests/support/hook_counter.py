"""A plugin with capabilities whose hooks leave a line in a file (outside the worker) each time
they run, so a test counts them across worker loss and continue-as-new; and one whose hook raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import ToolDefinition

from agentwolf.plugins import PluginRegistry


@dataclass
class CountHooks(AbstractCapability[Any]):
    """Appends `<hook> <turn> <step or call> attempt=<n>` to `path` from each hook it has."""

    path: str

    def _line(self, ctx: RunContext[Any], hook: str, where: str) -> None:
        with open(self.path, "a") as file:
            file.write(f"{hook} {ctx.deps.turn_id} {where} attempt={ctx.deps.attempt}\n")

    async def before_run(self, ctx: RunContext[Any]) -> None:
        self._line(ctx, "before_run", f"step={ctx.deps.step}")

    async def after_run(self, ctx: RunContext[Any], *, result: Any) -> Any:
        self._line(ctx, "after_run", f"step={ctx.deps.step}")
        return result

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        self._line(ctx, "before_model_request", f"step={ctx.deps.step}")
        return request_context

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any]
    ) -> dict[str, Any]:
        self._line(ctx, "before_tool_execute", f"call={call.tool_call_id}")
        return args


@dataclass
class Raises(AbstractCapability[Any]):
    """Raises from `hook` when the prompt (or a tool's name) contains `when`."""

    hook: str
    when: str

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if self.hook == "before_model_request" and self.when in (ctx.prompt or ""):
            raise RuntimeError(f"no requests about {self.when}")
        return request_context

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any]
    ) -> dict[str, Any]:
        if self.hook == "before_tool_execute" and self.when in call.tool_name:
            raise PermissionError(f"{call.tool_name} is not for today")
        return args


def register(wolf: PluginRegistry) -> None:
    wolf.capability(CountHooks)
    wolf.capability(Raises)
