"""A known-fast tool runs as a local activity by its own speed, not by its round trip through a busy fleet."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity, client, worker
from temporalio.client import Client

from agentwolf.worker.bootstrap import create_worker
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history
from tests.test_session_correctness import _script_calls, _tool_call_paths

QUEUEING = 0.5
"""Seconds each tool call's answer waits after the call ran: more than `fast_call_ms` (200 ms)."""


class _SlowReplies(worker.ActivityInboundInterceptor):
    async def execute_activity(self, input: worker.ExecuteActivityInput) -> Any:
        result = await super().execute_activity(input)
        if activity.info().activity_type == "wolf.call_tool":
            await asyncio.sleep(QUEUEING)
        return result


class BusyFleet(client.Interceptor, worker.Interceptor):
    """Every tool call's answer is late, as on a worker whose queues are long."""

    def intercept_activity(
        self, next: worker.ActivityInboundInterceptor
    ) -> worker.ActivityInboundInterceptor:
        return _SlowReplies(next)


async def test_a_fast_tool_answering_late_still_runs_as_a_local_activity(client: Client, wolf, task_queue):
    busy = Client(**{**client.config(), "interceptors": [BusyFleet()]})
    script = _script_calls(*(("echo", {"text": f"t{i}"}) for i in range(3)))
    manifest = make_manifest()  # echo is read-only (safe to repeat); fast_call_ms is the default
    worker_, hosts = create_worker(busy, task_queue=task_queue, local_models={"m": script.model})
    try:
        async with worker_:
            sid = await wolf.submit("go", "a", manifest)
            assert (await wolf.result(sid)).output == "done"
            # The first call is timed as a regular activity; the others run locally although each
            # answer came QUEUEING late.
            assert await _tool_call_paths(wolf, sid) == (1, 2)
            await record_history(wolf.client, workflow_id("default", sid), "tool_own_time")
    finally:
        await hosts.close()
