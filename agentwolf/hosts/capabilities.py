"""An agent's pydantic-ai capabilities on a worker: what they contribute to a request, and their hooks,
called where pydantic-ai's agent graph calls them, each inside the activity of the thing it wraps.

AgentWolf's loop is a workflow, so no hook runs in workflow code: the model-request hooks (and the
tool preparation, the run's instructions and model settings, and the run hooks of the turn's first
and last step) run inside `wolf.model_request`, the tool hooks inside `wolf.call_tool` (inside
`wolf.workspace` and `wolf.memory` for the workspace and memory tools). What a hook decides (the
request sent, the model chosen, a response or tool result rewritten, a call refused) ends up in
that activity's result, which history records: a replay, a new worker or a continued session reads
it and never runs the hook again for that step. A retried activity (a lost worker, a timeout) runs
its hooks again, as it runs the request again. docs/guides/capabilities.md says so per hook.

The capabilities are built on each worker from the specs the compiled agent carries (recorded by
`wolf.compile`), so every worker runs the same ones; a host keeps them built, per spec list.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai._instructions import normalize_instructions
from pydantic_ai._system_prompt import SystemPromptRunner
from pydantic_ai.agent import _build_run_capabilities, _combine_duplicate_capabilities
from pydantic_ai.capabilities import AbstractCapability, CombinedCapability
from pydantic_ai.exceptions import ModelRetry, SkipModelRequest, SkipToolExecution
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestContext, ModelRequestParameters
from pydantic_ai.native_tools import AbstractNativeTool
from pydantic_ai.run import AgentRunResult
from pydantic_ai.settings import ModelSettings, merge_model_settings
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.usage import RunUsage

from agentwolf.config.capabilities import CapabilityTypes, build
from agentwolf.config.manifest import PydanticCapability

CAPABILITY_TOOLS = "@capabilities"
"""The tool source of the tools capabilities contribute (their toolsets): permission rules name them
`@capabilities:<tool>`."""

Send = Callable[[Model, list[ModelMessage], ModelSettings, ModelRequestParameters], Awaitable[ModelResponse]]


class HookError(Exception):
    """A capability's hook raised: the request or call it wraps fails with this message."""


@dataclass
class SessionDeps:
    """`ctx.deps` for a hook in a session: where it runs, and the session's models by name."""

    tenant: str
    session: str
    """The session's workflow id."""
    agent: str
    turn_id: str
    step: int | None
    """The turn's step (None in a tool call: its `ctx.tool_call_id` says which)."""
    attempt: int
    """The activity's attempt: a retried activity runs its hooks again (attempt 2, 3, ...)."""
    models: Callable[[str], Awaitable[Model]] = field(repr=False)
    """A model alias or spec of the manifest -> the worker's model (its quotas, its secrets)."""

    async def model(self, name: str) -> Model:
        """The manifest's model `name` (an alias or a spec), for a hook that chooses the model."""
        return await self.models(name)


class Capabilities:
    """One agent's pydantic-ai capabilities, combined as pydantic-ai combines an agent's (ordering,
    duplicates by id), with what they contribute and their hooks."""

    def __init__(self, specs: Sequence[PydanticCapability], types: CapabilityTypes) -> None:
        self.items: list[AbstractCapability[Any]] = [build(spec, types) for spec in specs]
        # As `Agent.__init__` does: duplicates by id combined, then every leaf registered by id.
        root = _combine_duplicate_capabilities(CombinedCapability(self.items), [self.items])
        assert isinstance(root, CombinedCapability)
        self.root = root
        self.by_id: dict[str, AbstractCapability[Any]] = _build_run_capabilities(root)
        toolset = self.root.get_toolset()
        self.toolset: AbstractToolset[Any] | None = toolset if isinstance(toolset, AbstractToolset) else None
        self.instructions = normalize_instructions(self.root.get_instructions())

    def static_instructions(self) -> list[str]:
        """The instructions that need no run (compiled into the agent)."""
        return [i for i in self.instructions if isinstance(i, str)]

    def static_settings(self) -> ModelSettings:
        settings = self.root.get_model_settings()
        return dict(settings) if isinstance(settings, dict) else {}  # type: ignore[return-value]

    async def run_instructions(self, ctx: RunContext[SessionDeps]) -> list[str]:
        """The per-run instructions (functions of the run context), in their order."""
        texts: list[str] = []
        for instruction in self.instructions:
            if isinstance(instruction, str) or not callable(instruction):
                continue
            text = await SystemPromptRunner(instruction).run(ctx)
            content = getattr(text, "content", text)
            if content:
                texts.append(str(content))
        return texts

    def settings(self, ctx: RunContext[SessionDeps], base: ModelSettings | None) -> ModelSettings | None:
        """Per-step settings (a function of the run context) over `base`; static ones are compiled."""
        contributed = self.root.get_model_settings()
        if not callable(contributed):
            return base
        ctx.model_settings = base
        return merge_model_settings(base, contributed(ctx))

    async def tools(self, ctx: RunContext[SessionDeps]) -> dict[str, Any]:
        """The toolsets' tools (name -> pydantic-ai ToolsetTool)."""
        return await self.toolset.get_tools(ctx) if self.toolset is not None else {}

    async def request(
        self,
        ctx: RunContext[SessionDeps],
        model: Model,
        messages: list[ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
        send: Send,
        *,
        first: bool,
        streaming: bool,
    ) -> tuple[ModelResponse, Model]:
        """One model request through the hooks, as pydantic-ai's graph runs them: `before_run` (the
        turn's first request), `prepare_tools`, then `wrap_model_request` around `before_model_request`
        and one attempt (`prepare_model_request`, the request with `on_model_request_error`,
        `after_model_request`). Returns the response and the model that answered. A hook that raises
        raises HookError; the request's own errors pass through unchanged."""
        root = self.root
        sent: list[BaseException] = []
        answered: list[Model] = [model]

        async def lifecycle(rc: ModelRequestContext) -> ModelResponse:
            rc = await root.before_model_request(ctx, rc)
            rc = await root.prepare_model_request(ctx, rc)
            answered[0] = rc.model
            try:
                response = await send(
                    rc.model, rc.messages, rc.model_settings or {}, rc.model_request_parameters
                )
            except Exception as exc:
                try:
                    response = await root.on_model_request_error(ctx, request_context=rc, error=exc)
                except BaseException as raised:
                    if raised is exc:
                        sent.append(exc)
                    raise
            return await root.after_model_request(ctx, request_context=rc, response=response)

        try:
            if first:
                await root.before_run(ctx)
            params.function_tools = await root.prepare_tools(ctx, list(params.function_tools))
            rc = ModelRequestContext(
                model=model,
                messages=messages,
                model_settings=settings,
                model_request_parameters=params,
                streaming=streaming,
            )
            try:
                response = await root.wrap_model_request(ctx, request_context=rc, handler=lifecycle)
            except SkipModelRequest as skip:
                response = skip.response
        except Exception as exc:
            if sent and exc is sent[0]:
                raise
            raise HookError(f"a capability's hook refused the model request: {_said(exc)}") from exc
        return response, answered[0]

    async def after_run(self, ctx: RunContext[SessionDeps], response: ModelResponse) -> ModelResponse:
        """`after_run` on the turn's last response (no tool calls): a changed output replaces its text."""
        result: AgentRunResult[Any] = AgentRunResult(output=response.text or "")
        try:
            changed = await self.root.after_run(ctx, result=result)
        except Exception as exc:
            raise HookError(f"a capability's after_run hook failed: {_said(exc)}") from exc
        if changed.output == result.output:
            return response
        text = changed.output if isinstance(changed.output, str) else json.dumps(changed.output, default=str)
        parts = [p for p in response.parts if not isinstance(p, TextPart)]
        return ModelResponse(
            parts=[*parts, TextPart(text)],
            usage=response.usage,
            model_name=response.model_name,
            timestamp=response.timestamp,
            provider_name=response.provider_name,
            provider_details=response.provider_details,
            provider_response_id=response.provider_response_id,
            finish_reason=response.finish_reason,
        )

    async def call_tool(
        self,
        ctx: RunContext[SessionDeps],
        call: ToolCallPart,
        arguments: dict[str, Any],
        execute: Callable[[dict[str, Any]], Awaitable[tuple[Any, bool]]],
    ) -> tuple[Any, bool]:
        """One tool call through the tool hooks: `wrap_tool_validate` (`before_tool_validate`,
        `after_tool_validate`) then `wrap_tool_execute` (`before_tool_execute`, the call with
        `on_tool_execute_error`, `after_tool_execute`). `execute` returns (content, is_error). Returns
        the content the model sees and whether it is an error: a refusal (a hook's ModelRetry or any
        exception) is an error the model reads; SkipToolExecution's result stands for the call; what
        `execute` raises passes through unchanged."""
        root = self.root
        tool_def = ToolDefinition(name=call.tool_name)
        failed: list[bool] = [False]
        raised: list[BaseException] = []

        async def validate(raw: str | dict[str, Any]) -> dict[str, Any]:
            raw = await root.before_tool_validate(ctx, call=call, tool_def=tool_def, args=raw)
            args = raw if isinstance(raw, dict) else json.loads(raw or "{}")
            return await root.after_tool_validate(ctx, call=call, tool_def=tool_def, args=args)

        async def run(args: dict[str, Any]) -> Any:
            args = await root.before_tool_execute(ctx, call=call, tool_def=tool_def, args=args)
            try:
                content, failed[0] = await execute(args)
            except Exception as exc:
                raised.append(exc)
                raise
            return await root.after_tool_execute(ctx, call=call, tool_def=tool_def, args=args, result=content)

        try:
            args = await root.wrap_tool_validate(
                ctx, call=call, tool_def=tool_def, args=arguments, handler=validate
            )
            result = await root.wrap_tool_execute(ctx, call=call, tool_def=tool_def, args=args, handler=run)
        except SkipToolExecution as skip:
            return skip.result, False
        except ModelRetry as retry:
            return f"{call.tool_name}: {retry.message}", True
        except Exception as exc:
            if raised and exc is raised[0]:
                raise  # the call's own failure (its activity retries it), not a hook's
            return f"a capability's hook refused the call to {call.tool_name}: {_said(exc)}", True
        return result, failed[0]


def context(
    deps: SessionDeps,
    model: Model,
    messages: list[ModelMessage],
    caps: Capabilities,
    *,
    step: int = 0,
    call: ToolCallPart | None = None,
) -> RunContext[SessionDeps]:
    """The RunContext a hook gets: the session's deps, the model, the messages sent, the turn's
    prompt, the step, the capabilities by id; for a tool call its id and name."""
    return RunContext(
        capabilities=dict(caps.by_id),
        root_capability=caps.root,
        deps=deps,
        model=model,
        usage=RunUsage(),
        prompt=turn_prompt(messages),
        messages=messages,
        run_step=step,
        run_id=f"{deps.session}/{deps.turn_id}",
        conversation_id=deps.session,
        tool_call_id=call.tool_call_id if call else None,
        tool_name=call.tool_name if call else None,
    )


def turn_prompt(messages: Sequence[ModelMessage]) -> str | None:
    """The last user prompt in `messages` (the turn's, or a steer's), as text."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            texts = [p.content for p in message.parts if isinstance(p, UserPromptPart)]
            if texts:
                return "\n".join(t if isinstance(t, str) else str(t) for t in texts)
    return None


def _said(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class CapabilityCache:
    """Built capabilities by spec list, per host (building may import a package)."""

    types: CapabilityTypes
    built: dict[str, Capabilities] = field(default_factory=dict)

    def get(self, specs: Sequence[PydanticCapability]) -> Capabilities | None:
        if not specs:
            return None
        key = json.dumps([s.root for s in specs], sort_keys=True, default=str)
        if key not in self.built:
            self.built[key] = Capabilities(specs, self.types)
        return self.built[key]


async def hooked_request(
    caps: Capabilities,
    deps: SessionDeps,
    model: Model,
    messages: list[ModelMessage],
    shape: Callable[[list[ModelMessage], str], list[ModelMessage]],
    text: str,
    settings: ModelSettings,
    params: ModelRequestParameters,
    send: Send,
    *,
    streaming: bool,
) -> tuple[ModelResponse, Model]:
    """A session's model request with its capabilities: their per-run instructions (after the
    compiled ones) and per-step settings, their native tools, their wrapper model and hooks;
    `after_run` on a response that ends the turn. `shape` puts the instructions where the model
    reads them. Returns the response and the model that answered."""
    model = caps.root.get_wrapper_model(model) or model
    ctx = context(deps, model, messages, caps, step=deps.step or 0)
    extra = await caps.run_instructions(ctx)
    sent = shape(messages, "\n\n".join(t for t in (text, *extra) if t))
    params.native_tools = [t for t in caps.root.get_native_tools() if isinstance(t, AbstractNativeTool)]
    merged = caps.settings(ctx, settings)
    response, model = await caps.request(
        ctx, model, sent, merged, params, send, first=(deps.step or 0) <= 1, streaming=streaming
    )
    if not response.tool_calls:
        response = await caps.after_run(ctx, response)
    return response, model
