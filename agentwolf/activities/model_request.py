"""`wolf.model_request`: one model request, answered by the host in one call (hosts/model_requests.py:
the transcript a delta against this worker's cached copy); here what is Temporal's, as in
pydantic-ai's own request activity: heartbeats carrying the streamed text and what the request waits
for, redaction, cost, and failures as ApplicationError."""

from __future__ import annotations

import functools
from collections.abc import Awaitable

from pydantic_ai.exceptions import ModelHTTPError, UserError
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import Model
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentwolf import transcript_store
from agentwolf.activities import live, observe
from agentwolf.activities.cost import attempts_cost, record, request_cost, used_spec
from agentwolf.activities.overflow import CONTEXT_LENGTH_EXCEEDED, context_overflow
from agentwolf.activities.provider_errors import SET_IT, config_failure, http_failure
from agentwolf.activities.session_io import heartbeating, query
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError
from agentwolf.hosts import model_requests, quotas
from agentwolf.hosts.host import AgentHost, HostRegistry
from agentwolf.hosts.model_requests import Held, TranscriptMismatch
from agentwolf.hosts.transcripts import Prefix
from agentwolf.workflows.archive import TranscriptTail
from agentwolf.workflows.contracts import (
    COMPILED_QUERY,
    CompiledAgent,
    HostRef,
    ModelRequestInput,
    ModelRequestOutput,
)
from agentwolf.workflows.session.turn import share_texts

PERMANENT_HTTP = {400, 401, 403, 404, 422}


async def request_model(hosts: HostRegistry, host: AgentHost, inp: ModelRequestInput) -> ModelRequestOutput:
    """One model request; the transcript arrives as a delta against this worker's copy."""
    compiled = await compiled_agent(host, inp.ref, inp.compiled_digest)
    streamed = live.LiveResponse(inp.turn_id, inp.step, host.secrets) if compiled.stream else None
    waits = quotas.Waits(priority=inp.priority)
    try:
        sent = await heartbeating(
            model_requests.request(
                host,
                inp,
                compiled,
                hosts.manifests[inp.ref.config_id],
                waits,
                _held(inp.ref),
                functools.partial(live.request, live=streamed),
            ),
            details=lambda: live.details(inp.turn_id, inp.step, streamed, waits.now),
        )
    except TranscriptMismatch as exc:
        raise ApplicationError(str(exc), type="TranscriptMismatch") from None
    except ModelHTTPError as exc:
        raise model_http_error(exc, host) from None
    except MissingVariable as exc:
        message = host.secrets.redact(f"model configuration: {exc}; {SET_IT}")
        raise ApplicationError(message, type="ConfigError", non_retryable=True) from None
    except (UserError, LookupError, PolicyError) as exc:
        message = host.secrets.redact(f"model configuration: {config_failure(exc)}")
        raise ApplicationError(message, type="ConfigError", non_retryable=True) from None
    out = answered(host, inp.ref, sent.model, compiled.models, sent.response, sent.cache_hit)
    sent.keep(host, inp.ref.workflow_id, out.response)
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


async def cached_transcript(
    host: AgentHost, ref: HostRef, base_len: int, base_digest: str, limit: int
) -> Prefix:
    """The session's first `base_len` messages (and as cut for the model), from the host: for the
    activities that read the transcript without a model request (archive, compact_summary)."""
    try:
        return await heartbeating(
            model_requests.prefix(host, ref.workflow_id, base_len, base_digest, limit, _held(ref))
        )
    except TranscriptMismatch as exc:
        raise ApplicationError(str(exc), type="TranscriptMismatch") from None


def _held(ref: HostRef) -> Held:
    """The session's transcript as it holds it, by query (a worker without a matching copy)."""

    def held() -> Awaitable[TranscriptTail]:
        return transcript_store.held(activity.client().get_workflow_handle(ref.workflow_id).query)

    return held
