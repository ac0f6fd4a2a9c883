"""A model request on the host, answered whole: the `wolf.model_request` activity's one call.

The host holds the session's transcript (its cached copy, else the session's by `held`, checked by
length and chained digest: hosts/transcripts.py), offers the tools the request may use, lays the
turn's settings over the agent's (hosts/turn_settings.py), builds the model (placeholders resolved
only here) and binds it to the request's priority and waits (hosts/quotas_model.py). The activity keeps what
is Temporal's: heartbeats and the live text they carry, redaction, cost, and the mapping of failures
to ApplicationError (activities/model_request.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from agentwolf.config.manifest import Manifest
from agentwolf.hosts import quotas, turn_settings
from agentwolf.hosts.host import AgentHost
from agentwolf.hosts.transcripts import Prefix, Working, transcript_size
from agentwolf.workflows.archive import TranscriptTail, restored
from agentwolf.workflows.compaction import Rendered, cut_tool_outputs, instructions
from agentwolf.workflows.contracts import (
    RECALL_SPEC,
    SESSION,
    CompiledAgent,
    ModelRequestInput,
    chain_digest,
)
from agentwolf.workflows.session.output import OUTPUT_DESCRIPTION, OUTPUT_TOOL
from agentwolf.workflows.session.turn import share_texts

Held = Callable[[], Awaitable[TranscriptTail]]
"""The session's transcript as it holds it (a query), for a worker without a matching copy."""
Send = Callable[[Model, list[ModelMessage], ModelSettings, ModelRequestParameters], Awaitable[ModelResponse]]
"""How the activity sends a request (streamed into its heartbeats, activities/live.py)."""


class TranscriptMismatch(ValueError):
    """The session's transcript does not match the prefix the request was sent against."""


@dataclass
class Sent:
    """A model's answer on the host, before the activity redacts it."""

    response: ModelResponse
    model: Model
    """The host's model for the spec chain (which member answered is read off it and the response)."""
    cache_hit: bool
    transcript: Working

    def keep(self, host: AgentHost, workflow_id: str, stored: ModelResponse) -> None:
        """Cache the transcript with the answer as the workflow holds it (`stored`, redacted)."""
        host.remember(workflow_id, self.transcript.answered(stored))


async def request(
    host: AgentHost,
    inp: ModelRequestInput,
    compiled: CompiledAgent,
    manifest: Manifest,
    waits: quotas.Waits,
    held: Held,
    send: Send,
) -> Sent:
    """One model request for a session of `manifest`: `waits` carries its priority to the provider's
    limiter and says what it waits for."""
    if inp.ref.workflow_id not in host.sessions:
        host.track(inp.ref.workflow_id, compiled.sources)
        host.background(host.recheck(manifest, compiled, inp.ref.workflow_id))
    limit = compiled.tool_output_chars
    share_texts(inp.delta)  # the workflow's copy of the transcript holds the same texts
    base = await prefix(host, inp.ref.workflow_id, inp.base_len, inp.base_digest, limit, held)
    working = base.extend(inp.delta, inp.view, limit)
    model = await host.model(compiled.models)
    answer_mode, answer_object = turn_settings.answer_format(inp.settings, model.profile)
    offered = [  # nothing cut or put aside: nothing to read on
        t
        for t in compiled.tools
        if (inp.tool_names is None or t.name in inp.tool_names)
        and (t.server != SESSION or (working.cut if t.name != RECALL_SPEC.name else working.stubbed))
    ]
    parameters = ModelRequestParameters(
        function_tools=[
            ToolDefinition(name=t.name, description=t.description, parameters_json_schema=t.parameters)
            for t in offered
        ],
        output_tools=[
            ToolDefinition(
                name=OUTPUT_TOOL,
                description=OUTPUT_DESCRIPTION,
                parameters_json_schema=inp.output,
                kind="output",
            )
        ]
        if inp.output
        else [],
        allow_text_output=inp.output is None,
        # A job's output schema is its answer: a turn's answer format gives way to it.
        output_mode="tool" if inp.output else answer_mode,
        output_object=None if inp.output else answer_object,
    )
    messages = _with_instructions(
        working.context,
        instructions(turn_settings.instructions(compiled.instructions, inp.settings), inp.view),
    )
    settings = turn_settings.merged_settings(_settings(compiled), inp.settings)
    response = await send(quotas.bind(model, waits), messages, settings, parameters)
    return Sent(response, model, base.cache_hit, working)


async def prefix(
    host: AgentHost, workflow_id: str, base_len: int, base_digest: str, limit: int, held: Held
) -> Prefix:
    """The session's first `base_len` messages (and as cut for the model): this worker's copy, else
    the session's (`held`), checked against `base_digest`; TranscriptMismatch when it does not match."""
    cached = host.transcript(workflow_id, base_len, base_digest) if base_len else None
    if cached is not None:
        return Prefix(cached.messages, cached.sent, cached.size, True, cached.rendered, base_digest)
    base: list[ModelMessage] = []
    rendered = Rendered()
    if base_len:
        # The transcript is append-only, so the workflow's current copy starts with our prefix;
        # checked against the digest the workflow sent, like a cached copy. Archived messages stay
        # in the payload store: the working context needs only their fold's text.
        tail = await held()
        archive = tail.archive
        base = restored(archive, tail.messages)[:base_len]
        if len(base) != base_len or chain_digest(archive.digest, base[archive.length :]) != base_digest:
            raise TranscriptMismatch(
                f"the session's transcript prefix ({len(base)} messages) does not match the digest "
                "it was sent with"
            )
        share_texts(base)
        rendered = Rendered(archived=archive.length, archived_fold=archive.fold)
    sent = cut_tool_outputs(base, limit)
    return Prefix(base, sent, transcript_size(base), not base_len, rendered, base_digest)


def _with_instructions(messages: list[ModelMessage], instructions: str) -> list[ModelMessage]:
    """pydantic-ai reads instructions from the last request; set them there without touching the cache."""
    if not instructions:
        return messages
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(request := messages[i], ModelRequest):
            out = list(messages)
            out[i] = dataclasses.replace(request, instructions=instructions)
            return out
    return messages


def _settings(compiled: CompiledAgent) -> ModelSettings:
    settings = ModelSettings()
    if compiled.temperature is not None:
        settings["temperature"] = compiled.temperature
    if compiled.max_tokens is not None:
        settings["max_tokens"] = compiled.max_tokens
    return settings
