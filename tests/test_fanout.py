"""A step's tool calls run with bounded concurrency, and calls past a cap answer an error asking the
model to batch: one answer with more than 2,000 calls made Temporal refuse the workflow task
(PendingActivitiesLimitExceeded) for ever (core review, finding 6)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
from temporalio.client import WorkflowHistory

from agentwolf.config.manifest import Limits
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, tools_server
from tests.support.models import Script, text

_SETTLED = (
    "activity_task_completed_event_attributes",
    "activity_task_failed_event_attributes",
    "activity_task_timed_out_event_attributes",
    "activity_task_canceled_event_attributes",
)


def _adds(n: int) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart("add", {"a": i, "b": 1}, tool_call_id=f"c{i}") for i in range(n)]
    )


def _fan_out(n: int) -> Script:
    return Script(lambda s: _adds(n) if s.calls == 1 else text("done"))


def _manifest(**limits: Any):
    # fast_call_ms 0: every call is a regular activity, so history shows how many were pending at once.
    return make_manifest(
        {"limits": limits} if limits else None, mcp_servers={"tools": {**tools_server(), "fast_call_ms": 0}}
    )


def _returns(request: ModelRequest) -> list[ToolReturnPart]:
    return [p for p in request.parts if isinstance(p, ToolReturnPart)]


def _most_pending(history: WorkflowHistory) -> int:
    pending = most = 0
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            pending += 1
            most = max(most, pending)
        elif any(event.HasField(f) for f in _SETTLED):
            pending -= 1
    return most


async def test_an_answer_of_2001_calls_runs_the_first_ones_bounded_and_refuses_the_rest(wolf, run_worker):
    limits = Limits()
    script = _fan_out(2001)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("go", "a", _manifest())
        result = await asyncio.wait_for(wolf.result(sid), 300)  # it never came: the task failed for ever
        history = await wolf.client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
    assert result.outcome == "completed" and result.output == "done"
    assert not [e for e in history.events if e.HasField("workflow_task_failed_event_attributes")]
    returns = _returns(script.requests[1][-1])
    assert [r.tool_call_id for r in returns] == [
        f"c{i}" for i in range(2001)
    ]  # every call answered, in order
    ran, refused = returns[: limits.max_tool_calls_per_step], returns[limits.max_tool_calls_per_step :]
    assert [r.content for r in ran] == [str(i + 1) for i in range(len(ran))]
    assert {r.outcome for r in refused} == {"denied"}
    assert all("Batch the work" in str(r.content) for r in refused)
    assert _most_pending(history) <= limits.max_parallel_tools


async def test_calls_past_the_manifest_limits_are_refused_and_the_rest_run_few_at_once(wolf, run_worker):
    script = _fan_out(7)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("go", "a", _manifest(max_tool_calls_per_step=5, max_parallel_tools=2))
        result = await wolf.result(sid)
        wid = workflow_id("default", sid)
        history = await wolf.client.get_workflow_handle(wid).fetch_history()
        events = [e async for _, e in wolf.events(sid, live=False)]
        await record_history(wolf.client, wid, "fanout_past_limits")
    assert result.outcome == "completed"
    returns = _returns(script.requests[1][-1])
    assert [r.content for r in returns[:5]] == ["1", "2", "3", "4", "5"]
    assert [r.outcome for r in returns[5:]] == ["denied", "denied"]
    assert "asked for 7 tool calls and one step runs at most 5" in str(returns[5].content)
    assert _most_pending(history) == 2
    assert any(e.kind == "limit_warning" and "2 tool calls refused" in (e.text or "") for e in events)
