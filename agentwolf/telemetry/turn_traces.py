"""One trace per turn: Temporal's tracing, with a prompt's turn in the trace of whoever prompted.

Temporal's `TracingInterceptor` puts everything a workflow does in the trace that started it and
only links the spans of later updates, so every turn of a long session would land in its first
prompt's trace. Here the `prompt` update's handler runs in the context its caller sent; the session
workflow copies that context for the turn's task (`SessionWorkflow.prompt`), so the turn's
activities, model requests and MCP calls are children of the caller's span. Subclassing is the
customisation `TracingInterceptor` documents; `_set_on_context` and `_completed_span` are its own
helpers (tests/test_telemetry.py breaks first if a temporalio release changes them).
"""

from __future__ import annotations

from typing import Any

import opentelemetry.trace
import temporalio.worker
from temporalio.contrib.opentelemetry import TracingInterceptor, TracingWorkflowInboundInterceptor
from temporalio.contrib.opentelemetry._context import attached_context

PROMPT_UPDATE = "prompt"


class TurnTracing(TracingInterceptor):
    def workflow_interceptor_class(
        self, input: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[TracingWorkflowInboundInterceptor]:
        super().workflow_interceptor_class(input)  # registers the span extern the workflow side calls
        return _TurnTracingInbound


class _TurnTracingInbound(TracingWorkflowInboundInterceptor):
    async def handle_update_handler(self, input: temporalio.worker.HandleUpdateInput) -> Any:
        header = input.headers.get(self.header_key)
        if input.update != PROMPT_UPDATE or header is None:
            return await super().handle_update_handler(input)
        carrier = self.payload_converter.from_payloads([header])[0]
        with attached_context(self._set_on_context(self.text_map_propagator.extract(carrier))):
            self._completed_span(f"HandleUpdate:{input.update}", kind=opentelemetry.trace.SpanKind.SERVER)
            # Past Temporal's own handler span (a link in the workflow's trace), straight to the workflow.
            return await temporalio.worker.WorkflowInboundInterceptor.handle_update_handler(self, input)
