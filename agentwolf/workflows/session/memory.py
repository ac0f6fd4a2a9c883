"""Long-term memory in the workflow: a memory tool call runs as the `wolf.memory` activity, after the
session's rules and approvals (the tool router, tools.py), like any tool call. Its result is recorded
like any tool result, so a replay never reads the store again; its key (workflow id, turn, step, call
id) makes a retried write a no-op. The owner is the session's (`owner` memo, set by whoever started
it), never the model's. What each call saw of each namespace goes on the running turn's mark, so a
fork at that turn sees memory as of then (`memory_tools.fork_view`).

Imported passed through, like tools.py: it calls only `workflow.*` and deterministic helpers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception

from agentwolf.config.manifest import AgentConfig, MemorySettings
from agentwolf.workflows.contracts import CompiledAgent, ToolSpec
from agentwolf.workflows.memory_tools import MemoryCall, MemoryExtract, MemoryOutput, MemoryView, Provenance
from agentwolf.workflows.session.core import SessionCore
from agentwolf.workflows.session.turn import HEARTBEAT_TIMEOUT, cause_message, short
from agentwolf.workflows.types import OWNER_MEMO

MEMORY_TOOLS = "memory-tools"  # patch: memory tools run as `wolf.memory` activities
MEMORY_EXTRACT = "memory-extract"  # patch: a closing session with `memory.extract` runs one extraction pass
MEMORY_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
"""A lost worker's write is retried under its key (the receipt answers); a store that stays down
answers the model an error after these attempts, and the turn goes on."""


def memory_settings(agent: AgentConfig | None) -> MemorySettings | None:
    return None if agent is None else agent.memory


async def run_memory(
    core: SessionCore, compiled: CompiledAgent, spec: ToolSpec, call: ToolCallPart, arguments: dict[str, Any]
) -> MemoryOutput:
    """One memory tool call, permitted already."""
    settings = memory_settings(core.inp.manifest.agents.get(core.inp.agent))
    owner = workflow.memo_value(OWNER_MEMO, None, type_hint=str)
    if settings is None or not owner:
        why = "this agent has no memory" if settings is None else "this session was started for no one"
        return MemoryOutput(content=f"memory is unavailable: {why}", is_error=True)
    ref, running = core.ref(), core.running
    memory = core.inp.manifest.host.memory
    try:
        out = await workflow.execute_activity(
            "wolf.memory",
            MemoryCall(
                ref=ref,
                tool=spec.tool,
                arguments=arguments,
                agent=core.inp.agent,
                owner=owner,
                settings=settings,
                store=memory.store if memory else None,
                view=core.inp.memory_view or MemoryView(),
                key=f"{ref.workflow_id}/{running.turn_id}/{running.step}/{call.tool_call_id}",
                provenance=Provenance(
                    session=ref.workflow_id,
                    turn=running.turn_id or "",
                    turn_seq=core.counters.turn_seq,
                    call=call.tool_call_id,
                    model=compiled.models[0] if compiled.models else "",
                ),
            ),
            result_type=MemoryOutput,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=MEMORY_RETRY,
            summary=short(f"{spec.tool} {next(iter(arguments.values()), '')}"),
        )
    except ActivityError as err:
        if is_cancelled_exception(err):
            raise
        return MemoryOutput(content="memory is unavailable: the store did not answer", is_error=True)
    if out.seen and running.turn_id is not None:
        core.log.saw_memory(running.turn_id, out.seen)
    return out


async def extract_at_close(core: SessionCore) -> None:
    """`memory.extract` (auto or review): one `wolf.memory_extract` pass over the session's messages
    as it closes, keyed by workflow id and pass (the transcript's length), so a retry writes once.
    A pass that fails for good is said (log, event), never the session's failure: it has closed."""
    settings = memory_settings(core.inp.manifest.agents.get(core.inp.agent))
    owner = workflow.memo_value(OWNER_MEMO, None, type_hint=str)
    compiled = core.compiled
    if settings is None or settings.extract == "off" or not owner or compiled is None:
        return
    messages = message_texts(core.log.transcript)
    if not messages or not workflow.patched(MEMORY_EXTRACT):
        return
    ref, memory = core.ref(), core.inp.manifest.host.memory
    try:
        await workflow.execute_activity(
            "wolf.memory_extract",
            MemoryExtract(
                ref=ref,
                agent=core.inp.agent,
                owner=owner,
                settings=settings,
                store=memory.store if memory else None,
                models=compiled.models,
                messages=messages,
                templates=[compiled.instructions, *(t.description or "" for t in compiled.tools)],
                key=f"{ref.workflow_id}/extract/{len(core.log.transcript)}",
                provenance=Provenance(
                    session=ref.workflow_id,
                    turn_seq=core.counters.turn_seq,
                    model=compiled.models[0] if compiled.models else "",
                ),
            ),
            result_type=list[str],
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=MEMORY_RETRY,
            summary="memory_extract",
        )
    except ActivityError as err:
        if is_cancelled_exception(err):
            raise
        workflow.logger.warning("memory extraction failed: %s", cause_message(err))
        core.publish("error", text=f"memory extraction failed: {cause_message(err)}")


def message_texts(transcript: list[Any]) -> list[str]:
    """The user's prompts and the agent's answers, as `user: ...` and `assistant: ...` texts."""
    out = []
    for message in transcript:
        if isinstance(message, ModelRequest):
            said = [
                p.content
                for p in message.parts
                if isinstance(p, UserPromptPart) and isinstance(p.content, str)
            ]
            out += [f"user: {text}" for text in said]
        elif isinstance(message, ModelResponse):
            answer = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            if answer.strip():
                out.append(f"assistant: {answer}")
    return out
