"""`wolf.compact_summary`: the tier-2 summary of older turns, one model request (the agent's model or
`limits.compact_model`) over the transcript this worker holds. Its answer is the activity's recorded
result, so replays and forks see the same summary; a worker lost mid-request is retried by Temporal
and the summary is recorded once."""

from __future__ import annotations

from pydantic_ai.exceptions import ModelHTTPError, UserError
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from temporalio.exceptions import ApplicationError

from agentwolf.activities import live
from agentwolf.activities.model_request import answered, cached_transcript, compiled_agent, model_http_error
from agentwolf.activities.session_io import heartbeating
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError
from agentwolf.hosts.host import AgentHost
from agentwolf.workflows.archive import let_go
from agentwolf.workflows.compaction import SUMMARY_INSTRUCTIONS, summary_source
from agentwolf.workflows.contracts import CompactInput, ModelRequestOutput


async def summarise(host: AgentHost, inp: CompactInput) -> ModelRequestOutput:
    compiled = await compiled_agent(host, inp.ref, inp.compiled_digest)
    cached = await cached_transcript(host, inp.ref, inp.base_len, inp.base_digest, compiled.tool_output_chars)
    let_go(cached.messages, cached.sent, cached.rendered, inp.view)
    source = summary_source(
        cached.messages, inp.view, inp.start, inp.end, inp.budget, cached.rendered.archived_fold
    )
    specs = compiled.compact_models or compiled.models
    request = ModelRequest(parts=[UserPromptPart(source)], instructions=SUMMARY_INSTRUCTIONS)
    try:
        model = await heartbeating(host.model(specs))
        response = await heartbeating(
            live.request(model, [request], ModelSettings(), ModelRequestParameters(), None)
        )
    except ModelHTTPError as exc:
        raise model_http_error(exc, host) from None
    except (UserError, LookupError, MissingVariable, PolicyError) as exc:
        message = host.secrets.redact(f"model configuration: {exc}")
        raise ApplicationError(message, type="ConfigError", non_retryable=True) from None
    return answered(host, inp.ref, model, specs, response, cached.cache_hit)
