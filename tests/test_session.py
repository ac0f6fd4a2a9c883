"""SessionWorkflow logic on the real dev server, with scripted in-process models."""

from __future__ import annotations

from pydantic_ai.messages import ModelRequest, ModelResponse, ToolReturnPart

from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, tools_server
from tests.support.models import Script, sequence, text, tool, tools, user_texts
from tests.support.polls import idle


async def test_multi_step_turn_runs_tools_and_answers(wolf, run_worker):
    script = Script(
        sequence(
            tool("add", {"a": 2, "b": 3}),
            tools(("echo", {"text": "hi"}), ("add", {"a": 1, "b": 1})),
            text("five and hi"),
        )
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("compute", "a", make_manifest())
        result = await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "multi_step_turn")
    assert result.output == "five and hi"
    assert result.outcome == "completed"
    assert result.counters.steps == 3 and result.counters.usage.tool_calls == 3
    returns = [
        p for m in script.requests[-1] for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)
    ]
    assert [(r.tool_name, r.content) for r in returns] == [("add", "5"), ("echo", "hi"), ("add", "2")]
    assert set(script.tools) == {
        "echo",
        "add",
        "slow",
        "big",
        "fail",
        "record",
        "record_slowly",
        "env",
        "parent_environ",
    }


async def events_until(wolf, sid, kind, *, from_offset=0, live=False):
    """Collect the session's events (durable only, unless `live`) up to and including the first of `kind`."""
    seen = []
    async for _, event in wolf.events(sid, from_offset, live=live):
        seen.append(event)
        if event.kind == kind:
            return seen
    return seen


async def test_events_describe_the_turn(wolf, run_worker):
    script = Script(sequence(tool("add", {"a": 2, "b": 3}), text("done")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("compute", "a", make_manifest())
        events = await events_until(wolf, sid, "session_closed")
    kinds = [e.kind for e in events]
    assert kinds == [
        "turn_started",
        "compiled",
        "tool_call_started",
        "tool_call_finished",
        "model_text",
        "turn_finished",
        "session_closed",
    ]
    started, finished = events[2], events[3]
    assert started.tool == "add" and started.args == {"a": 2, "b": 3}
    assert finished.outcome == "success" and finished.duration_ms is not None and finished.text == "5"
    assert events[-2].outcome == "completed" and events[-2].usage.requests == 2


async def test_steer_reaches_the_very_next_model_request(wolf, run_worker, tmp_path):
    # The tool answers once the steer is in (a gate, not a clock: a loaded machine took longer than
    # a fixed 1.5 s tool to report it started, and the steer then came after the next request).
    gate = tmp_path / "gate"
    script = Script(sequence(tool("slow", {"seconds": 120}), text("ok")))
    manifest = make_manifest(mcp_servers={"tools": tools_server(WOLF_SLOW_GATE=str(gate))})
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("start", "a", manifest)
        await events_until(wolf, sid, "tool_call_started")
        await wolf.steer(sid, "also check the weather")
        gate.touch()
        result = await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "steer")
    assert result.output == "ok"
    assert "also check the weather" not in user_texts(script.requests[0])
    assert user_texts(script.requests[1]) == ["start", "also check the weather"]


async def test_interrupt_during_a_long_tool_call(wolf, run_worker):
    from tests.conftest import wait_for

    # The tool would outlast every deadline here: an idle session means the interrupt cancelled it
    # (how fast is for a benchmark to say; a test under load cannot).
    script = Script(lambda s: tool("slow", {"seconds": 600}) if s.calls == 1 else text(f"answer {s.calls}"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        await wolf.prompt(sid, "go slow")
        await events_until(wolf, sid, "tool_call_started")
        await wolf.interrupt(sid, "changed my mind")
        await wait_for(lambda: idle(wolf, sid), timeout=120)
        status = await wolf.status(sid)
        assert status.last_outcome == "interrupted"
        transcript = await wolf.transcript(sid)
        closing = transcript[-1]
        assert isinstance(closing, ModelRequest)
        assert [(p.tool_name, p.outcome) for p in closing.parts] == [("slow", "interrupted")]
        await wolf.prompt(sid, "now answer")
        await wait_for(lambda: _status_turns(wolf, sid, 2))
        assert (await wolf.status(sid)).last_output == "answer 2"
        # The model saw a valid transcript: the interrupted call was closed before the new prompt.
        assert user_texts(script.requests[-1]) == ["go slow", "now answer"]
        await wolf.close(sid)
        await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "interrupt_tool_call")


async def _status_turns(wolf, sid, n):
    status = await wolf.status(sid)
    return status.counters.turns >= n and status.state == "idle"


async def test_interrupt_during_a_slow_model_request(wolf, run_worker):
    from tests.conftest import wait_for

    script = Script(lambda s: text(f"answer {s.calls}"), delay=30)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        await wolf.prompt(sid, "think hard")
        await wait_for(lambda: script.calls == 1)
        await wolf.interrupt(sid)
        await wait_for(lambda: idle(wolf, sid), timeout=8)
        assert (await wolf.status(sid)).last_outcome == "interrupted"
        script.delay = 0
        await wolf.prompt(sid, "quick one")
        await wait_for(lambda: _status_turns(wolf, sid, 2))
        assert (await wolf.status(sid)).last_output == "answer 2"
        assert user_texts(script.requests[-1]) == ["think hard", "quick one"]
        await wolf.close(sid)
        await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "interrupt_model_request")


async def test_double_texting_policies(wolf, run_worker):
    from temporalio.client import WorkflowUpdateFailedError

    from tests.conftest import wait_for

    script = Script(lambda s: text(f"answer {s.calls}"), delay=1.0)
    async with run_worker(local_models={"m": script.model}):
        rejecting = await wolf.start_session("a", make_manifest({"double_texting": "reject"}))
        await wolf.prompt(rejecting, "first")
        try:
            await wolf.prompt(rejecting, "second")
        except WorkflowUpdateFailedError as exc:
            assert "double_texting" in str(exc.cause)
        else:
            raise AssertionError("a second prompt during a turn must be rejected")
        queueing = await wolf.start_session("a", make_manifest())
        first = await wolf.prompt(queueing, "one")
        second = await wolf.prompt(queueing, "two")
        assert (first, second) == ("turn-1", "turn-2")
        await wait_for(lambda: _status_turns(wolf, queueing, 2), timeout=20)
        for sid in (rejecting, queueing):
            await wolf.close(sid)
            await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", rejecting), "double_texting_reject")
        await record_history(wolf.client, workflow_id("default", queueing), "double_texting_queue")


async def test_tool_errors_reach_the_model(wolf, run_worker):
    script = Script(sequence(tools(("fail", {"message": "boom"}), ("nosuch", {})), text("recovered")))
    async with run_worker(local_models={"m": script.model}):
        result = await wolf.result(await wolf.submit("try", "a", make_manifest()))
    assert result.output == "recovered"
    returns = [p for p in script.requests[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert [r.outcome for r in returns] == ["failed", "failed"]
    assert "boom" in returns[0].content and "unknown tool 'nosuch'" in returns[1].content


async def test_max_steps_stops_the_turn_with_a_valid_transcript(wolf, run_worker):
    script = Script(lambda s: tool("add", {"a": s.calls, "b": 0}))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("loop", "a", make_manifest({"limits": {"max_steps": 3}}))
        result = await wolf.result(sid)
    assert result.outcome == "limit" and "max_steps" in result.output
    assert script.calls == 3


async def test_loop_guard_warns_then_stops(wolf, run_worker):
    script = Script(lambda s: tool("echo", {"text": "same"}))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("loop", "a", make_manifest())
        result = await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "loop_guard")
    assert result.outcome == "limit" and "loop guard" in result.output
    assert script.calls == 5
    assert any("3 times with the same arguments" in t for t in user_texts(script.requests[3]))
    assert not any("same arguments" in t for t in user_texts(script.requests[2]))


async def test_token_budget_warns_at_80_percent_and_stops(wolf, run_worker):
    def decide(s):
        return ModelResponse(parts=tool("add", {"a": s.calls, "b": 1}).parts, usage=_usage(40))

    script = Script(decide)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("spend", "a", make_manifest({"limits": {"token_budget": 100}}))
        events = await events_until(wolf, sid, "session_closed")
        await record_history(wolf.client, workflow_id("default", sid), "token_budget")
    kinds = [e.kind for e in events]
    assert kinds.count("limit_warning") == 1 and "limit_reached" in kinds
    assert kinds.index("limit_warning") < kinds.index("limit_reached")
    assert script.calls == 3  # 40, 80 (warning), 120 (stop)


def _usage(tokens):
    from pydantic_ai.usage import RequestUsage

    return RequestUsage(input_tokens=tokens, output_tokens=0)
