"""`wolf.archive_transcript` and `wolf.read_archived`: a session's older messages into the payload
store, and a tool result read back from there (workflows/archive.py)."""

from __future__ import annotations

from temporalio import activity

from agentwolf import transcript_store
from agentwolf.activities.model_request import cached_transcript, compiled_agent
from agentwolf.activities.session_io import heartbeating
from agentwolf.hosts.host import AgentHost
from agentwolf.workflows.archive import ARCHIVED, ArchivedPart, ArchivedRead, ArchiveInput
from agentwolf.workflows.contracts import ToolCallOutput
from agentwolf.workflows.session.tools import output_page


async def archive(host: AgentHost, inp: ArchiveInput) -> ArchivedPart | None:
    """Store messages [start, end) of the transcript this worker holds (else the session's); None
    when this worker has no payload store (the session then keeps them)."""
    compiled = await compiled_agent(host, inp.ref, inp.compiled_digest)
    cached = await cached_transcript(host, inp.ref, inp.base_len, inp.base_digest, compiled.tool_output_chars)
    messages = cached.messages[inp.start : inp.end]
    if len(messages) != inp.end - inp.start or any(m is ARCHIVED for m in messages):
        raise ValueError(f"messages {inp.start}-{inp.end} are not all held here: nothing archived")
    ref = await heartbeating(transcript_store.store(activity.client().data_converter, messages))
    return None if ref is None else ArchivedPart(start=inp.start, end=inp.end, ref=ref)


async def read_archived(inp: ArchivedRead) -> ToolCallOutput:
    """`recall` of a result in the archived parts: the last one matching, as the workflow pages it."""
    converter = activity.client().data_converter
    page = ToolCallOutput(
        content=f"no tool result {inp.arguments.get('call_id')!r} in this session", is_error=True
    )
    at = inp.arguments.get("message")
    for part in reversed(inp.parts):
        messages = await heartbeating(transcript_store.load(converter, part))
        held = messages if at is None else messages[at - part.start : at - part.start + 1]
        page = output_page(held, inp.arguments, inp.page_chars)
        if not page.is_error:
            return page
    return page
