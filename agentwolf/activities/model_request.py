"""`wolf.model_request`: one model request on the host, the transcript a delta against this worker's
cached copy, its text streamed as heartbeat details."""

from __future__ import annotations

import dataclasses

from pydantic_ai.exceptions import ModelHTTPError, UserError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentwolf.activities import capabilities, live, observe, turn_settings
from agentwolf.activities.cost import attempts_cost, record, request_cost, used_spec
from agentwolf.activities.overflow import CONTEXT_LENGTH_EXCEEDED, context_overflow
from agentwolf.activities.provider_errors import SET_IT, config_failure, http_failure
from agentwolf.activities.session_io import heartbeating, query
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError
from agentwolf.hosts import quotas, transcript_store
from agentwolf.hosts.capabilities import HookError
from agentwolf.hosts.host import AgentHost, HostRegistry
from agentwolf.hosts.transcripts import CachedTranscript
from agentwolf.workflows.archive import let_go, restored
from agentwolf.workflows.compaction import (
    Rendered,
    cut_tool_outputs,
    instructions,
    stubs_any,
    working_context,
)
from agentwolf.workflows.contracts import (
    COMPILED_QUERY,
    RECALL_SPEC,
    SESSION,
    CompiledAgent,
    HostRef,
    ModelRequestInput,
    ModelRequestOutput,
    chain_digest,
)
from agentwolf.workflows.session.output import OUTPUT_DESCRIPTION, OUTPUT_TOOL
from agentwolf.workflows.session.turn import share_texts

PERMANENT_HTTP = {400, 401, 403, 404, 422}


async def request_model(hosts: HostRegistry, host: AgentHost, inp: ModelRequestInput) -> ModelRequestOutput:
    """One model request; the transcript arrives as a delta against this worker's copy."""
    compiled = await compiled_agent(host, inp.ref, inp.compiled_digest)
    if inp.ref.workflow_id not in host.sessions:
        host.track(inp.ref.workflow_id, compiled.sources)
        manifest = hosts.manifests[inp.ref.config_id]
        host.background(host.recheck(manifest, compiled, inp.ref.workflow_id))
    offered = (
        compiled.tools if inp.tool_names is None else [t for t in compiled.tools if t.name in inp.tool_names]
    )
    limit = compiled.tool_output_chars
    share_texts(inp.delta)  # the workflow's copy of the transcript holds the same texts
    cached = await cached_transcript(host, inp.ref, inp.base_len, inp.base_digest, limit)
    cache_hit = cached.cache_hit
    base, base_sent, base_size = cached.messages, cached.sent, cached.size
    if inp.view is not None:  # what the session archived leaves this worker's copy (the cached one too)
        base_size -= _size(let_go(base, base_sent, cached.rendered, inp.view))
    messages = [*base, *inp.delta]
    sent = [*base_sent, *cut_tool_outputs(inp.delta, limit, start=len(base))]
    cut = any(m is not s for m, s in zip(messages, sent, strict=True))
    stubbed = stubs_any(messages, inp.view)
    offered = [  # nothing cut or put aside: nothing to read on
        t for t in offered if t.server != SESSION or (cut if t.name != RECALL_SPEC.name else stubbed)
    ]
    context = working_context(messages, inp.view, sent, cached.rendered) if inp.view is not None else sent
    try:
        model = await heartbeating(host.model(compiled.models))
        answer_mode, answer_object = turn_settings.answer_format(inp.settings, model.profile)
        streamed = live.LiveResponse(inp.turn_id, inp.step, host.secrets) if compiled.stream else None
        waits = quotas.Waits(priority=inp.priority)
        quotas.WAITS.set(waits)
        text = turn_settings.instructions(compiled.instructions, inp.settings)
        settings = turn_settings.merged_settings(_settings(compiled), inp.settings)
        params = ModelRequestParameters(
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

        async def send(
            model: Model,
            messages: list[ModelMessage],
            settings: ModelSettings,
            params: ModelRequestParameters,
        ) -> ModelResponse:
            return await live.request(model, messages, settings, params, streamed)

        hooked = capabilities.Hooked(host, compiled, inp) if compiled.capabilities else None
        if hooked is None:
            response = await heartbeating(
                send(model, _with_instructions(context, instructions(text, inp.view)), settings, params),
                details=lambda: live.details(inp.turn_id, inp.step, streamed, waits.now),
            )
        else:
            chain = model
            response, model = await heartbeating(
                hooked.request(
                    model,
                    context,
                    lambda messages, text: _with_instructions(messages, instructions(text, inp.view)),
                    text,
                    settings,
                    params,
                    send,
                    streaming=streamed is not None,
                ),
                details=lambda: live.details(inp.turn_id, inp.step, streamed, waits.now),
            )
    except ModelHTTPError as exc:
        raise model_http_error(exc, host) from None
    except MissingVariable as exc:
        message = host.secrets.redact(f"model configuration: {exc}; {SET_IT}")
        raise ApplicationError(message, type="ConfigError", non_retryable=True) from None
    except (UserError, LookupError, PolicyError) as exc:
        message = host.secrets.redact(f"model configuration: {config_failure(exc)}")
        raise ApplicationError(message, type="ConfigError", non_retryable=True) from None
    except HookError as exc:
        raise ApplicationError(
            host.secrets.redact(str(exc)), type="CapabilityError", non_retryable=True
        ) from None
    # A capability that chose another model: labelled and priced by that model's specs.
    specs = compiled.models if hooked is None or model is chain else host.specs_of(model)
    out = answered(host, inp.ref, model, specs, response, cache_hit)
    if hooked is not None and model is not chain:
        out.routed = out.model
    digest = chain_digest(chain_digest(inp.base_digest, inp.delta), [out.response])
    size = base_size + _size(inp.delta) + _size([out.response])
    host.remember(
        inp.ref.workflow_id,
        CachedTranscript([*messages, out.response], digest, [*sent, out.response], size, cached.rendered),
    )
    return out


async def compiled_agent(host: AgentHost, ref: HostRef, digest: str) -> CompiledAgent:
    """The session's compiled agent: this worker's copy, else the workflow's (checked by digest)."""
    compiled = host.compiled.get(digest)
    if compiled is None:
        # A cache miss comes after a worker restart: answering may replay a long run (heartbeat on).
        compiled = await heartbeating(query(ref, COMPILED_QUERY, CompiledAgent))
        if compiled is None or compiled.digest != digest:
            raise ApplicationError(
                f"the session's compiled agent does not match the digest {digest} it was sent with",
                type="CompiledMismatch",
            )
        host.keep(compiled)
    return compiled


def answered(
    host: AgentHost, ref: HostRef, model: Model, specs: list[str], response: ModelResponse, cache_hit: bool
) -> ModelRequestOutput:
    """A response as the workflow will see it (after a trip through the data converter), redacted
    (a provider echoes the model name and its URL, which may be resolved placeholders), with the
    label of the model that answered and its cost, counted in the worker's metrics."""
    spec = used_spec(model, specs, response)
    label = observe.answered_label(spec, response, host.secrets)
    observe.model_answered(label, ref.tenant, response, cache_hit)
    answer = host.secrets.redact(ModelMessagesTypeAdapter.dump_json([response]).decode())
    stored = ModelMessagesTypeAdapter.validate_json(answer)[0]
    assert isinstance(stored, ModelResponse)
    share_texts([stored])
    cost = request_cost(response, spec, host.manifest.host.models)
    if cost is not None:
        cost += attempts_cost(model, specs, response, host.manifest.host.models)
    record(ref.tenant, label, cost)
    return ModelRequestOutput(response=stored, cache_hit=cache_hit, model=label, cost_usd=cost)


def model_http_error(exc: ModelHTTPError, host: AgentHost) -> ApplicationError:
    """A provider's HTTP error as the workflow sees it: a request too long for the model's window is
    `ContextLengthExceeded` (the window it names, if any, as details), which the session answers by
    compacting; the other permanent statuses are not retried."""
    message = host.secrets.redact(http_failure(exc))
    if exc.status_code in (400, 413) and (found := context_overflow(exc.body, exc.provider_error_code)):
        return ApplicationError(message, found.window, type=CONTEXT_LENGTH_EXCEEDED, non_retryable=True)
    return ApplicationError(message, type="ModelHTTPError", non_retryable=exc.status_code in PERMANENT_HTTP)


@dataclasses.dataclass
class CachedPrefix:
    messages: list[ModelMessage]
    sent: list[ModelMessage]
    size: int
    cache_hit: bool
    rendered: Rendered


async def cached_transcript(
    host: AgentHost, ref: HostRef, base_len: int, base_digest: str, limit: int
) -> CachedPrefix:
    """The session's first `base_len` messages (and as cut for the model): this worker's copy, else
    the workflow's, checked against `base_digest`."""
    cached = host.transcript(ref.workflow_id, base_len, base_digest) if base_len else None
    if cached is not None:
        return CachedPrefix(cached.messages, cached.sent, cached.size, True, cached.rendered)
    base: list[ModelMessage] = []
    rendered = Rendered()
    if base_len:
        # The transcript is append-only, so the workflow's current copy starts with our prefix;
        # checked against the digest the workflow sent, like a cached copy. Archived messages stay
        # in the payload store: the working context needs only their fold's text.
        handle = activity.client().get_workflow_handle(ref.workflow_id)
        tail = await heartbeating(transcript_store.held(handle.query))
        archive = tail.archive
        base = restored(archive, tail.messages)[:base_len]
        if len(base) != base_len or chain_digest(archive.digest, base[archive.length :]) != base_digest:
            raise ApplicationError(
                f"the session's transcript prefix ({len(base)} messages) does not match the digest "
                "it was sent with",
                type="TranscriptMismatch",
            )
        share_texts(base)
        rendered = Rendered(archived=archive.length, archived_fold=archive.fold)
    return CachedPrefix(base, cut_tool_outputs(base, limit), _size(base), not base_len, rendered)


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
    settings = ModelSettings(**compiled.model_settings)  # type: ignore[typeddict-item]
    if compiled.temperature is not None:
        settings["temperature"] = compiled.temperature
    if compiled.max_tokens is not None:
        settings["max_tokens"] = compiled.max_tokens
    return settings
