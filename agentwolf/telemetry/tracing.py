"""OpenTelemetry tracing, on when the standard environment names an exporter.

`OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_TRACES_EXPORTER=otlp`)
turns it on: spans go over OTLP/HTTP, batched, with the SDK reading the rest of `OTEL_*` itself
(service name, headers, batch delays). Unset, nothing here imports the SDK and `span()` is a no-op.

Temporal's `TracingInterceptor` links client calls, workflows and activities through headers;
pydantic-ai's instrumentation adds the model request (GenAI conventions); `span()` adds MCP calls
and skill reads. Prompts, completions and tool payloads are recorded only with `WOLF_TRACE_CONTENT=1`.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from temporalio.contrib.opentelemetry import TracingInterceptor

CONTENT_ENV = "WOLF_TRACE_CONTENT"
TRACER_NAME = "agentwolf"
_state: dict[str, Any] = {}
"""`provider` once set up (a process sets up once: the global tracer provider cannot be replaced)."""


class TracingUnavailable(Exception):
    """`OTEL_*` asks for traces but the SDK is not installed: the message names the pip install.
    Not a RuntimeError, which connecting retries: retrying cannot install a package."""


def enabled() -> bool:
    """Whether the environment asks for traces (read each time: cheap, and tests change it)."""
    env = os.environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true" or env.get("OTEL_TRACES_EXPORTER") == "none":
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or env.get("OTEL_TRACES_EXPORTER")
    )


def content_enabled() -> bool:
    """Prompts, completions and tool arguments and results go into spans only when asked for."""
    return os.environ.get(CONTENT_ENV) == "1"


def setup(service_name: str = "agentwolf") -> bool:
    """Install the global tracer provider (OTLP/HTTP, batched) once; False when tracing is off.
    `OTEL_SERVICE_NAME` wins over `service_name`. Spans still queued are flushed at exit."""
    if "provider" in _state:
        return True
    if not enabled():
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(
            f"OTEL_* asks for traces but {exc.name} is missing: pip install 'agentwolf[otel]'"
        ) from None
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _state["provider"] = provider
    atexit.register(provider.shutdown)
    return True


def flush(timeout_ms: int = 5000) -> None:
    """Export the spans still queued (a CLI verb that ends, a test that reads them)."""
    if (provider := _state.get("provider")) is not None:
        provider.force_flush(timeout_ms)


def interceptors(present: Sequence[object] = ()) -> list[TracingInterceptor]:
    """Temporal's tracing interceptor when tracing is on and `present` (a client's interceptors,
    which its workers apply too) lacks one; else none."""
    if not setup():
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    from agentwolf.telemetry.turn_traces import TurnTracing

    return [] if any(isinstance(i, TracingInterceptor) for i in present) else [TurnTracing()]


def model_instrumentation() -> InstrumentationSettings | bool:
    """pydantic-ai's GenAI instrumentation for `model_request` (model, tokens, finish reason), with
    message content only under `WOLF_TRACE_CONTENT=1`; False when tracing is off."""
    if "provider" not in _state:
        return False
    if "model" not in _state:
        from pydantic_ai.models.instrumented import InstrumentationSettings

        content = content_enabled()
        _state["model"] = InstrumentationSettings(
            include_content=content, include_binary_content=content, include_model_request_parameters=content
        )
    settings: InstrumentationSettings = _state["model"]
    return settings


class _NoSpan:
    def set_attribute(self, key: str, value: Any) -> None:
        pass


_NO_SPAN = _NoSpan()


@contextmanager
def span(name: str, attributes: Mapping[str, Any], content: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A span under the current one (an activity's, through Temporal's headers); `content` holds
    attributes recorded only under `WOLF_TRACE_CONTENT=1`. Yields something with `set_attribute`."""
    if "provider" not in _state:
        yield _NO_SPAN
        return
    from opentelemetry import trace

    attrs = dict(attributes)
    if content and content_enabled():
        attrs.update(content)
    with trace.get_tracer(TRACER_NAME).start_as_current_span(name, attributes=attrs) as current:
        yield current


def marker(name: str, attributes: Mapping[str, Any]) -> None:
    """A span that ends as it starts: it is exported even if this process dies before the work it
    marks ends (a SIGKILLed worker's activity attempt still shows in the trace)."""
    if "provider" not in _state:
        return
    from opentelemetry import trace

    trace.get_tracer(TRACER_NAME).start_span(name, attributes=dict(attributes)).end()
