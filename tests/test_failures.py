"""Bad inputs get clear errors and leave no stuck workflow."""

from __future__ import annotations

import sys

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from agentwolf.workflows.session.workflow import SessionWorkflow
from agentwolf.workflows.session_input import SessionInput
from agentwolf.workflows.types import workflow_id
from tests.conftest import SUPPORT, make_manifest, record_history
from tests.support.models import Script, sequence, text


async def _failure(wolf, sid) -> str:
    with pytest.raises(WorkflowFailureError) as failure:
        await wolf.result(sid)
    description = await wolf.client.get_workflow_handle(workflow_id("default", sid)).describe()
    assert description.status == WorkflowExecutionStatus.FAILED  # finished, not stuck
    return str(failure.value.cause)


async def test_unknown_agent_is_refused_by_the_client(wolf):
    with pytest.raises(ValueError, match="unknown agent 'nope'"):
        await wolf.start_session("nope", make_manifest())


async def test_unknown_agent_reaching_a_worker_fails_clearly(wolf, run_worker, task_queue):
    async with run_worker():
        await wolf.client.start_workflow(
            SessionWorkflow.run,
            SessionInput(
                session_id="ghost", agent="nope", manifest=make_manifest(), prompt="hi", background=True
            ),
            id=workflow_id("default", "ghost"),
            task_queue=task_queue,
        )
        assert "unknown agent 'nope'" in await _failure(wolf, "ghost")


async def test_mcp_command_not_found(wolf, run_worker):
    manifest = make_manifest(mcp_servers={"tools": {"command": "no-such-mcp-server-binary"}})
    async with run_worker(local_models={"m": Script(sequence(text("x"))).model}):
        message = await _failure(wolf, await wolf.submit("hi", "a", manifest))
    assert "no-such-mcp-server-binary" in message and "not found" in message


async def test_mcp_server_that_never_answers_initialize(wolf, run_worker):
    silent = {"command": sys.executable, "args": [str(SUPPORT / "silent_server.py")], "connect_timeout": 1.5}
    async with run_worker(local_models={"m": Script(sequence(text("x"))).model}):
        message = await _failure(
            wolf, await wolf.submit("hi", "a", make_manifest(mcp_servers={"tools": silent}))
        )
    assert "no answer to initialize within 1.5s" in message


async def test_interactive_session_survives_a_failed_turn(wolf, run_worker):
    """A failing turn in a chat leaves the session idle and usable, not stuck."""
    manifest = make_manifest(mcp_servers={"tools": {"command": "no-such-mcp-server-binary"}})
    async with run_worker(local_models={"m": Script(sequence(text("x"))).model}):
        sid = await wolf.start_session("a", manifest)
        events = []
        await wolf.prompt(sid, "hi")
        async for _, event in wolf.events(sid):
            events.append(event)
            if event.kind == "turn_finished":
                break
        assert [e.kind for e in events] == ["turn_started", "error", "turn_finished"]
        assert events[-1].outcome == "failed"
        status = await wolf.status(sid)
        assert status.state == "idle" and status.transcript_len == 1  # the prompt is kept
        await wolf.close(sid)
        assert (await wolf.result(sid)).outcome == "failed"
        await record_history(wolf.client, workflow_id("default", sid), "failed_turn")


async def test_malformed_tool_arguments_become_a_tool_error(wolf, run_worker):
    from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart

    bad = ModelResponse(parts=[ToolCallPart("add", "{not json", tool_call_id="c1")])
    script = Script(sequence(bad, text("fine")))
    async with run_worker(local_models={"m": script.model}):
        result = await wolf.result(await wolf.submit("hi", "a", make_manifest()))
    assert result.output == "fine"
    (ret,) = [p for p in script.requests[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert ret.outcome == "failed" and "invalid JSON arguments" in ret.content
