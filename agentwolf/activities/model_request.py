"""`wolf.model_request`: one model request on the host, the transcript a delta against this worker's
cached copy, its text streamed as heartbeat details."""

from __future__ import annotations

import dataclasses

from pydantic_ai.exceptions import ModelHTTPError, UserError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition
from temporalio.exceptions import ApplicationError

from agentwolf.activities import live, observe
from agentwolf.activities.cost import attempts_cost, record, request_cost, used_spec
from agentwolf.activities.session_io import heartbeating, query
from agentwolf.activities.tools import cut_tool_outputs
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError
from agentwolf.hosts import flow
from agentwolf.hosts.host import AgentHost, HostRegistry
from agentwolf.hosts.transcripts import CachedTranscript
from agentwolf.workflows.contracts import (
    COMPILED_QUERY,
    EMPTY_DIGEST,
    SESSION,
    TRANSCRIPT_QUERY,
    CompiledAgent,
    ModelRequestInput,
    ModelRequestOutput,
    chain_digest,
)
from agentwolf.workflows.output import OUTPUT_DESCRIPTION, OUTPUT_TOOL

_PERMANENT_HTTP = {400, 401, 403, 404, 422}


async def request_model(hosts: HostRegistry, host: AgentHost, inp: ModelRequestInput) -> ModelRequestOutput:
    """One model request; the transcript arrives as a delta against this worker's copy."""
    compiled = host.compiled.get(inp.compiled_digest)
    if compiled is None:
        # A cache miss comes after a worker restart: answering may replay a long run (heartbeat on).
        compiled = await heartbeating(query(inp.ref, COMPILED_QUERY, CompiledAgent))
        if compiled is None or compiled.digest != inp.compiled_digest:
            raise ApplicationError(
                f"the session's compiled agent does not match the digest {inp.compiled_digest} it was "
                "sent with",
                type="CompiledMismatch",
            )
        host.keep(compiled)
    if inp.ref.workflow_id not in host.sessions:
        host.track(inp.ref.workflow_id, compiled.sources)
        manifest = hosts.manifests[inp.ref.config_id]
        host.background(host.recheck(manifest, compiled, inp.ref.workflow_id))
    offered = (
        compiled.tools if inp.tool_names is None else [t for t in compiled.tools if t.name in inp.tool_names]
    )
    limit = compiled.tool_output_chars
    cached = host.transcript(inp.ref.workflow_id, inp.base_len, inp.base_digest) if inp.base_len else None
    cache_hit = cached is not None or not inp.base_len
    if cached is not None:
        base, base_sent, base_size = cached.messages, cached.sent, cached.size
    else:
        base = []
        if inp.base_len:
            # The transcript is append-only, so the workflow's current copy starts with our prefix;
            # checked against the digest the workflow sent, like a cached copy.
            base = (await heartbeating(query(inp.ref, TRANSCRIPT_QUERY, list[ModelMessage])))[: inp.base_len]
            if len(base) != inp.base_len or chain_digest(EMPTY_DIGEST, base) != inp.base_digest:
                raise ApplicationError(
                    f"the session's transcript prefix ({len(base)} messages) does not match the digest "
                    "it was sent with",
                    type="TranscriptMismatch",
                )
        base_sent = cut_tool_outputs(base, limit)
        base_size = _size(base)
    messages = [*base, *inp.delta]
    sent = [*base_sent, *cut_tool_outputs(inp.delta, limit, start=len(base))]
    if not any(m is not s for m, s in zip(messages, sent, strict=True)):  # nothing cut: nothing to read on
        offered = [t for t in offered if t.server != SESSION]
    try:
        model = host.model(compiled.models)
        streamed = live.LiveResponse(inp.turn_id, inp.step, host.secrets) if compiled.stream else None
        waits = flow.Waits()
        flow.WAITS.set(waits)
        response = await heartbeating(
            live.request(
                model,
                _with_instructions(sent, compiled.instructions),
                _settings(compiled),
                ModelRequestParameters(
                    function_tools=[
                        ToolDefinition(
                            name=t.name, description=t.description, parameters_json_schema=t.parameters
                        )
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
                    output_mode="tool" if inp.output else "text",
                ),
                streamed,
            ),
            details=lambda: live.details(inp.turn_id, inp.step, streamed, waits.now),
        )
    except ModelHTTPError as exc:
        raise ApplicationError(
            host.secrets.redact(f"model request failed: {exc}"),
            type="ModelHTTPError",
            non_retryable=exc.status_code in _PERMANENT_HTTP,
        ) from None
    except (UserError, LookupError, MissingVariable, PolicyError) as exc:
        message = host.secrets.redact(f"model configuration: {exc}")
        raise ApplicationError(message, type="ConfigError", non_retryable=True) from None
    spec = used_spec(model, compiled.models, response)
    label = observe.answered_label(spec, response, host.secrets)
    observe.model_answered(label, inp.ref.tenant, response, cache_hit)
    # Cache the response as the workflow will see it (after a trip through the data converter),
    # redacted: a provider echoes the model name and its URL, which may be resolved placeholders.
    answer = host.secrets.redact(ModelMessagesTypeAdapter.dump_json([response]).decode())
    stored = ModelMessagesTypeAdapter.validate_json(answer)
    digest = chain_digest(chain_digest(inp.base_digest, inp.delta), stored)
    size = base_size + _size(inp.delta) + len(answer)
    host.remember(inp.ref.workflow_id, CachedTranscript([*messages, *stored], digest, [*sent, *stored], size))
    cost = request_cost(response, spec, host.manifest.host.models)
    if cost is not None:
        cost += attempts_cost(model, compiled.models, response, host.manifest.host.models)
    record(inp.ref.tenant, label, cost)
    return ModelRequestOutput(response=stored[0], cache_hit=cache_hit, model=label, cost_usd=cost)


def _size(messages: list[ModelMessage]) -> int:
    """About how many bytes `messages` hold: their JSON's length (what the cache bounds)."""
    return len(ModelMessagesTypeAdapter.dump_json(messages)) if messages else 0


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
