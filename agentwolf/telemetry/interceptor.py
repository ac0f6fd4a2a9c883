"""The worker interceptor that ties an activity attempt to its session: log records made while it
runs carry the session's ids, and, when tracing, each attempt leaves a span as it starts."""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from agentwolf.telemetry import logs, tracing


class ActivityContext(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Inbound(next)


class _Inbound(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        arg = input.args[0] if input.args else None
        ids = logs.ids_of(info.workflow_id or "", getattr(arg, "turn_id", None), getattr(arg, "step", None))
        # The attempt's own span ends at once, so a worker killed during the attempt has exported it.
        attributes = {"temporal.activity.type": info.activity_type, "temporal.activity.attempt": info.attempt}
        if call_id := getattr(arg, "call_id", None):
            attributes["wolf.call_id"] = call_id
        tracing.marker(f"attempt:{info.activity_type}", {**attributes, **ids})
        token = logs.bind(ids)
        try:
            return await self.next.execute_activity(input)
        finally:
            logs.unbind(token)
