"""`read_tool_output`: a page of a tool result the model was sent cut or put aside, from the
transcript or its archived part (a `wolf.read_archived` activity); `output_page` is shared with that
activity. Imported passed through, like tools.py: it calls only `workflow.*` and deterministic helpers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from temporalio import workflow
from temporalio.exceptions import ActivityError, is_cancelled_exception

from agentwolf.workflows.archive import ArchivedRead
from agentwolf.workflows.contracts import CompiledAgent, ToolCallOutput
from agentwolf.workflows.session.turn import (
    HEARTBEAT_TIMEOUT,
    MODEL_TIMEOUT,
    PAGE_HEADER,
    TOOL_RETRY,
    cause_message,
    short,
)

if TYPE_CHECKING:
    from agentwolf.workflows.session.core import SessionCore


def refused_page(arguments: dict[str, Any]) -> ToolCallOutput | None:
    """Why `arguments` name no page (offsets and positions are non-negative integers), or None."""
    offset, at, index = arguments.get("offset", 0), arguments.get("message"), arguments.get("part")
    if all(isinstance(n, int) and n >= 0 for n in (offset, at or 0, index or 0)):
        return None
    return ToolCallOutput(
        content="read_tool_output needs a non-negative integer `offset` (and `message`, `part`)",
        is_error=True,
    )


def output_page(
    messages: Sequence[ModelMessage], arguments: dict[str, Any], page_chars: int
) -> ToolCallOutput:
    """A page of the tool result `arguments` name (`call_id`, `offset`, `message`, `part`; checked by
    `refused_page`) among `messages`: the transcript, the message named, or an archived part."""
    call_id, offset = arguments.get("call_id"), arguments.get("offset", 0)
    at, index = arguments.get("message"), arguments.get("part")
    found = [
        p
        for m in messages
        if isinstance(m, ModelRequest)
        for j, p in enumerate(m.parts)
        if isinstance(p, ToolReturnPart) and p.tool_call_id == call_id and index in (None, j)
    ]
    if not found:
        where = (
            "this session" if at is None else f"message {at}" + ("" if index is None else f" part {index}")
        )
        return ToolCallOutput(content=f"no tool result {call_id!r} in {where}", is_error=True)
    content = str(found[-1].content)
    end = min(offset + page_chars - PAGE_HEADER, len(content))  # the page is not cut again
    page = content[offset:end]
    more = f"; read on with offset={end}" if end < len(content) else "; that is the end"
    return ToolCallOutput(content=f"[characters {offset}-{end} of {len(content)}{more}]\n{page}")


async def read_tool_output(
    core: SessionCore, compiled: CompiledAgent, arguments: dict[str, Any]
) -> ToolCallOutput:
    """A page of a tool result the model was sent cut or put aside (the transcript holds it
    whole): the one the note names by transcript `message` (and `part`, where a step repeated
    the call id); without them (notes written before they existed), the last result with that
    call id. A result in the archived part of the transcript is read from the payload store."""
    at = arguments.get("message")
    if (invalid := refused_page(arguments)) is not None:
        return invalid
    transcript, archive = core.log.transcript, core.log.archive
    page = output_page(
        transcript if at is None else transcript[at : at + 1], arguments, compiled.tool_output_chars
    )
    if not page.is_error or not archive.length or (at is not None and at >= archive.length):
        return page
    try:
        return await _read_archived(core, compiled, arguments)
    except ActivityError as err:  # the model is told; the turn goes on
        if is_cancelled_exception(err):
            raise
        return ToolCallOutput(
            content=f"the archived result could not be read: {cause_message(err)}", is_error=True
        )


async def _read_archived(
    core: SessionCore, compiled: CompiledAgent, arguments: dict[str, Any]
) -> ToolCallOutput:
    at, archive = arguments.get("message"), core.log.archive
    return await workflow.execute_activity(
        "wolf.read_archived",
        ArchivedRead(
            ref=core.ref(),
            parts=[p for p in archive.parts if at is None or p.start <= at < p.end],
            arguments=arguments,
            page_chars=compiled.tool_output_chars,
        ),
        result_type=ToolCallOutput,
        start_to_close_timeout=MODEL_TIMEOUT,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=TOOL_RETRY,
        summary=short(f"read_archived {arguments.get('call_id')}"),
    )
