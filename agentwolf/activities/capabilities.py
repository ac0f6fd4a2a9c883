"""An agent's pydantic-ai capabilities inside `wolf.model_request` and the tool activities
(`wolf.call_tool`, `wolf.workspace`, `wolf.memory`): the session's side of hosts/capabilities.py
(which hooks run where, and why once: its docstring)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ToolCallPart
from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentwolf.config.aliases import resolve_model
from agentwolf.config.capabilities import CapabilityError
from agentwolf.config.manifest import Manifest, PydanticCapability
from agentwolf.hosts.capabilities import CAPABILITY_TOOLS, Capabilities, SessionDeps, context
from agentwolf.hosts.host import AgentHost
from agentwolf.workflows.contracts import CompiledAgent, ToolCallInput, ToolCallOutput
from agentwolf.workflows.memory_tools import MemoryOutput
from agentwolf.workflows.workspace_tools import WorkspaceResult

Result = TypeVar("Result", WorkspaceResult, MemoryOutput)


def built(host: AgentHost, compiled: CompiledAgent) -> Capabilities | None:
    try:
        return host.capabilities(compiled.capabilities)
    except CapabilityError as exc:  # a plugin this worker lacks, or a package not installed here
        raise ApplicationError(str(exc), type="ConfigError", non_retryable=True) from None


async def call_tool(
    host: AgentHost,
    manifest: Manifest,
    inp: ToolCallInput,
    execute: Callable[[ToolCallInput], Awaitable[ToolCallOutput]],
) -> ToolCallOutput:
    """A tool call through the agent's tool hooks (`Capabilities.call_tool`); a call to a tool a
    capability's toolset contributed runs on the host's built toolset. An agent without
    capabilities runs the call as it is."""
    agent = manifest.agents.get(inp.agent)  # the session's config (a host may serve several)
    specs = [c for c in agent.capabilities if isinstance(c, PydanticCapability)] if agent else []
    if not specs or agent is None:
        return await execute(inp)
    try:
        caps = host.capabilities(specs)
    except CapabilityError as exc:
        return ToolCallOutput(content=str(exc), is_error=True)
    assert caps is not None
    deps = SessionDeps(
        inp.ref.tenant, inp.ref.workflow_id, inp.agent, inp.turn_id, None, activity.info().attempt, host.named
    )
    call = ToolCallPart(inp.name or inp.tool, inp.arguments, inp.call_id)
    model = (
        await host.named(agent.model)
        if agent.model
        else await host.model(resolve_model(host.manifest.host.models, None))
    )
    ctx = context(deps, model, [], caps, call=call)

    async def run(args: dict[str, Any]) -> tuple[Any, bool]:
        if inp.server == CAPABILITY_TOOLS:
            return await _toolset_call(caps, ctx, inp.tool, args)
        done = await execute(inp.model_copy(update={"arguments": args}))
        return done.content, done.is_error

    content, is_error = await caps.call_tool(ctx, call, inp.arguments, run)
    return ToolCallOutput(content=content if isinstance(content, str) else _text(content), is_error=is_error)


async def call_builtin(
    host: AgentHost,
    manifest: Manifest,
    inp: ToolCallInput,
    execute: Callable[[dict[str, Any]], Awaitable[Result]],
    empty: Callable[[], Result],
) -> Result:
    """A built-in tool's call (a workspace or memory tool) through the agent's tool hooks, as
    `call_tool`: `execute` runs it with the arguments the hooks leave, and its whole result is kept
    with the content and error the hooks settle on (`empty()` when a hook answered for the call)."""
    ran: list[Result] = []

    async def run(call: ToolCallInput) -> ToolCallOutput:
        result = await execute(call.arguments)
        ran.append(result)
        return ToolCallOutput(content=result.content, is_error=result.is_error)

    out = await call_tool(host, manifest, inp, run)
    kept = ran[-1] if ran else empty()
    return kept.model_copy(update={"content": out.content, "is_error": out.is_error})


async def _toolset_call(
    caps: Capabilities, ctx: RunContext[SessionDeps], name: str, args: dict[str, Any]
) -> tuple[Any, bool]:
    tools = await caps.tools(ctx)
    if name not in tools:
        return f"unknown tool {name!r} (the capabilities offer: {', '.join(tools) or 'none'})", True
    try:
        return await caps.toolset.call_tool(name, args, ctx, tools[name]), False  # type: ignore[union-attr]
    except ModelRetry as retry:
        return f"{name}: {retry.message}", True


def _text(value: Any) -> str:
    try:
        return json.dumps(to_jsonable_python(value), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
