"""Session correctness under hostile models, cancels and interrupts: each test plays the case that
wedged, failed or lost a result before, on the real stack."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic_ai.messages import ModelResponse, ToolCallPart
from temporalio import workflow
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agentwolf.activities.session import SessionActivities
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.hosts.host import HostRegistry
from agentwolf.worker.bootstrap import SANDBOX, WORKFLOWS
from agentwolf.workflows.session.turn import Staleness
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, tools_server, wait_for
from tests.support.models import Script, text, user_texts
from tests.support.polls import in_state, tool_returns


def _same_id(*calls: tuple[str, dict]) -> ModelResponse:
    """A model (or provider) that gives every call of a step the same id."""
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id="dup") for name, args in calls])


# -- 1: model-chosen call ids are not keys ----------------------------------------------------------


async def test_two_calls_with_one_id_under_confirm_are_answered_one_by_one(wolf, run_worker):
    script = Script(
        lambda s: (
            _same_id(("echo", {"text": "first"}), ("echo", {"text": "second"}))
            if s.calls == 1
            else text("done")
        )
    )
    manifest = make_manifest(permissions={"rules": [{"tool": "echo", "action": "confirm"}]})
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("go", "a", manifest)
        pending = await wait_for(lambda: _pending(wolf, sid, 2))
        assert sorted(p.call_id for p in pending) == ["dup#0", "dup#1"]
        await wolf.approve(sid, "dup#0")
        await wolf.deny(sid, "dup#1", reason="not this one")
        result = await wolf.result(sid)
        transcript = await wolf.transcript(sid)
        await record_history(wolf.client, workflow_id("default", sid), "duplicate_call_ids")
    assert result.outcome == "completed" and result.output == "done"
    assert [(r.content, r.outcome) for r in tool_returns(transcript)] == [
        ("first", "success"),
        ("denied by the user: not this one", "denied"),
    ]


async def _pending(wolf, sid, n):
    found = (await wolf.status(sid)).pending_approvals
    return found if len(found) >= n else None


async def test_two_delegate_calls_with_one_id_start_two_children(wolf, run_worker):
    def boss(s):
        if s.calls == 1:
            return _same_id(
                ("delegate", {"agent": "reviewer", "task": "one"}),
                ("delegate", {"agent": "reviewer", "task": "two"}),
            )
        return text(" | ".join(r.content for r in tool_returns(s.requests[-1][-1:])))

    manifest = Manifest.model_validate(
        {
            "agents": {
                "boss": {"model": "local:boss", "capabilities": [{"subagent": ["reviewer"]}]},
                "reviewer": {"model": "local:reviewer"},
            }
        }
    )
    reviewer = Script(lambda s: text(f"reviewed {user_texts(s.requests[-1])[-1]}"))
    async with run_worker(local_models={"boss": Script(boss).model, "reviewer": reviewer.model}):
        result = await wolf.result(await wolf.submit("go", "boss", manifest))
    assert result.outcome == "completed" and result.output == "reviewed one | reviewed two"


# -- 3: a Temporal cancel closes the session -------------------------------------------------------


async def test_a_workflow_cancel_during_a_turn_closes_the_session_as_cancelled(wolf, run_worker):
    script = Script(lambda s: text("slow answer"), delay=30)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        await wolf.prompt(sid, "take your time")
        await wait_for(lambda: in_state(wolf, sid, "running"))
        handle = wolf.client.get_workflow_handle(workflow_id("default", sid))
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        assert isinstance(failure.value.cause, CancelledError)
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
        status = await wolf.status(sid)
        events = [e async for _, e in wolf.events(sid)]
        await record_history(wolf.client, workflow_id("default", sid), "workflow_cancel")
    assert status.state == "done" and status.last_outcome == "interrupted"
    assert [(e.kind, e.outcome) for e in events[-3:]] == [
        ("interrupted", None),
        ("turn_finished", "interrupted"),
        ("session_closed", "cancelled"),
    ]


async def test_a_workflow_cancel_while_idle_closes_the_session_as_cancelled(wolf, run_worker):
    async with run_worker(local_models={"m": Script(lambda s: text("ok")).model}):
        sid = await wolf.start_session("a", make_manifest())
        handle = wolf.client.get_workflow_handle(workflow_id("default", sid))
        await handle.cancel()
        with pytest.raises(WorkflowFailureError):
            await handle.result()
        assert (await wolf.status(sid)).state == "done"


# -- 13: closing a parent stops its running children cleanly ---------------------------------------


async def test_closing_a_parent_stops_its_running_child(wolf, run_worker):
    boss = Script(
        lambda s: ModelResponse(parts=[ToolCallPart("delegate", {"agent": "reviewer", "task": "t"})])
    )
    manifest = Manifest.model_validate(
        {
            "agents": {
                "boss": {"model": "local:boss", "capabilities": [{"subagent": ["reviewer"]}]},
                "reviewer": {"model": "local:reviewer"},
            }
        }
    )
    slow = Script(lambda s: text("late"), delay=60)
    async with run_worker(local_models={"boss": boss.model, "reviewer": slow.model}):
        sid = await wolf.start_session("boss", manifest)
        await wolf.prompt(sid, "go")
        (child,) = await wait_for(lambda: _running_children(wolf, sid))
        await wolf.close(sid)
        await wolf.result(sid)
        handle = wolf.client.get_workflow_handle(workflow_id("default", child.session_id))
        assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
        assert (await wolf.status(child.session_id)).state == "done"
        await wait_for(lambda: _not_listed_running(wolf, child.session_id))


async def _running_children(wolf, parent):
    found = [s for s in await wolf.list_sessions(state="running") if s.parent == parent]
    return found or None


async def _not_listed_running(wolf, sid):
    return sid not in {s.session_id for s in await wolf.list_sessions(state="running")}


# -- 7: a result that completes in the same workflow task as an interrupt is kept -------------------


async def test_a_tool_result_that_arrives_with_the_interrupt_is_kept(client, task_queue, wolf, tmp_path):
    """The tool finishes while no workflow worker runs and the interrupt waits beside its result:
    the next workflow task holds both. The call ends when the test opens its gate, once the workflow
    worker has stopped and the interrupt is sent: a fixed sleep let a slow machine finish it while
    the workflow worker still ran (the turn took the result and went on to a next step)."""
    gate = tmp_path / "gate"
    script = Script(
        lambda s: (
            ModelResponse(parts=[ToolCallPart("slow", {"seconds": 600}, tool_call_id="c1")])
            if len(s.requests) == 1
            else text("a step the interrupt should have prevented")
        )
    )
    hosts = HostRegistry({"m": script.model})
    activities = SessionActivities(hosts)
    acts = [activities.compile, activities.model_request, activities.call_tool]
    manifest = make_manifest(mcp_servers={"tools": tools_server(WOLF_SLOW_GATE=str(gate))})

    def workflows() -> Worker:
        return Worker(client, task_queue=task_queue, workflows=WORKFLOWS, workflow_runner=SANDBOX)

    async with Worker(
        client, task_queue=task_queue, activities=acts, max_heartbeat_throttle_interval=_ms(200)
    ):
        async with workflows():
            sid = await wolf.start_session("a", manifest)
            await wolf.prompt(sid, "go")
            await wait_for(lambda: _tool_started(wolf, sid))
        # No workflow worker: the interrupt waits, then the call completes on the activity worker.
        await wolf.interrupt(sid, "stop")
        gate.touch()
        handle = wolf.client.get_workflow_handle(workflow_id("default", sid))
        await wait_for(lambda: _activity_completed(handle))
        async with workflows():
            await wait_for(lambda: in_state(wolf, sid, "idle"))
            transcript = await wolf.transcript(sid)
            status = await wolf.status(sid)
            await wolf.close(sid)
            await wolf.result(sid)
    await hosts.close()
    assert status.last_outcome == "interrupted"
    assert len(script.requests) == 1
    assert [(r.content, r.outcome) for r in tool_returns(transcript)] == [("slept 600.0s", "success")]


def _ms(n: int) -> timedelta:
    return timedelta(milliseconds=n)


async def _tool_started(wolf, sid):
    return any(e.kind == "tool_call_started" for e in await _events_so_far(wolf, sid))


async def _events_so_far(wolf, sid):
    offset = await wolf.event_offset(sid)
    events = []
    if offset:
        async for i, event in wolf.events(sid):
            events.append(event)
            if i + 1 >= offset:
                break
    return events


async def _activity_completed(handle):
    history = await handle.fetch_history()
    return sum(e.HasField("activity_task_completed_event_attributes") for e in history.events) >= 3


# -- 4: a change that arrives during a compile is not lost -------------------------------------------


def test_a_change_during_a_compile_keeps_the_agent_stale_whatever_the_strings():
    stale = Staleness()
    reason = "mcp:tools changed: tools"
    stale.mark(reason)
    generation = stale.generation  # a compile starts...
    stale.mark(reason)  # ...and the same change (the very same string object) arrives again
    stale.compiled(generation)
    assert stale.reason == reason  # the next model request recompiles
    generation = stale.generation
    stale.compiled(generation)
    assert stale.reason is None


# -- 8: the local-activity fast path is only for tools safe to run twice ----------------------------


def _script_calls(*calls: tuple[str, dict]) -> Script:
    """Call the tools one step each, then answer."""
    return Script(
        lambda s: (
            ModelResponse(parts=[ToolCallPart(*calls[s.calls - 1], tool_call_id=f"c{s.calls}")])
            if s.calls <= len(calls)
            else text("done")
        )
    )


async def _tool_call_paths(wolf, sid) -> tuple[int, int]:
    """(regular `wolf.call_tool` activities, local activities) in the session's history."""
    history = await wolf.client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
    regular = sum(
        e.activity_task_scheduled_event_attributes.activity_type.name == "wolf.call_tool"
        for e in history.events
    )
    local = sum(
        e.marker_recorded_event_attributes.marker_name == "core_local_activity" for e in history.events
    )
    return regular, local


@pytest.mark.parametrize(
    ("repeat_safe", "tool", "expected"),
    [
        (None, "record", (3, 0)),  # not annotated: never local, however fast
        (None, "echo", (1, 2)),  # annotated read-only: local once known to be fast
        (["record"], "record", (1, 2)),  # the manifest vouches for it
        ([], "echo", (3, 0)),  # the manifest trusts no annotation
    ],
)
async def test_only_tools_safe_to_repeat_run_as_local_activities(
    wolf, run_worker, tmp_path, repeat_safe, tool, expected
):
    args = [{"tag": f"t{i}"} if tool == "record" else {"text": f"t{i}"} for i in range(3)]
    script = _script_calls(*((tool, a) for a in args))
    server = {**tools_server(WOLF_SIDE_EFFECTS=str(tmp_path / "effects")), "fast_call_ms": 60_000}
    if repeat_safe is not None:
        server["repeat_safe"] = repeat_safe
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("go", "a", make_manifest(mcp_servers={"tools": server}))
        assert (await wolf.result(sid)).output == "done"
        assert await _tool_call_paths(wolf, sid) == expected


# -- 9: a huge tool output reaches the model cut, stays whole, and reads on page by page ------------


async def test_a_long_tool_result_is_cut_for_the_model_and_read_page_by_page(wolf, run_worker):
    def model(s):
        if s.calls == 1:
            return ModelResponse(parts=[ToolCallPart("big", {"size": 2500}, tool_call_id="huge")])
        if s.calls == 2:
            return ModelResponse(
                parts=[
                    ToolCallPart("read_tool_output", {"call_id": "huge", "offset": 1000}, tool_call_id="r1")
                ]
            )
        return text("read")

    script = Script(model)
    manifest = make_manifest({"limits": {"tool_output_chars": 1000}})
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("go", "a", manifest)
        assert (await wolf.result(sid)).output == "read"
        transcript = await wolf.transcript(sid)
        await record_history(wolf.client, workflow_id("default", sid), "tool_output_cut")
    assert "read_tool_output" not in script.offered[0] and "read_tool_output" in script.offered[1]
    sent = tool_returns(script.requests[1])[-1].content
    assert sent.startswith("x" * 1000 + "\n\n[cut: 1000 of 2500 characters shown")
    assert "read_tool_output(call_id='huge', offset=1000, message=2)" in sent and "x" * 1001 not in sent
    page = tool_returns(script.requests[2])[-1].content
    assert page == "[characters 1000-1900 of 2500; read on with offset=1900]\n" + "x" * 900
    assert tool_returns(transcript)[0].content == "x" * 2500  # whole in the transcript


# -- 10: double texting and bounded inputs while a turn waits for approval ---------------------------


def _confirming(double_texting: str, **sessions) -> Manifest:
    return make_manifest(
        {"double_texting": double_texting},
        permissions={"rules": [{"tool": "echo", "action": "confirm"}]},
        sessions=sessions,
    )


def _asks_then_answers() -> Script:
    return Script(
        lambda s: (
            ModelResponse(parts=[ToolCallPart("echo", {"text": "x"}, tool_call_id=f"c{s.calls}")])
            if s.calls == 1
            else text(f"answer {s.calls}")
        )
    )


async def test_reject_refuses_a_prompt_while_a_turn_waits_for_approval(wolf, run_worker):
    async with run_worker(local_models={"m": _asks_then_answers().model}):
        sid = await wolf.start_session("a", _confirming("reject"))
        await wolf.prompt(sid, "go")
        await wait_for(lambda: in_state(wolf, sid, "waiting_approval"))
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await wolf.prompt(sid, "again")
        assert "double_texting policy is 'reject'" in str(refused.value.cause)
        await wolf.close(sid)
        await wolf.result(sid)


async def test_interrupt_ends_a_turn_waiting_for_approval_and_runs_the_new_prompt(wolf, run_worker):
    script = _asks_then_answers()
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", _confirming("interrupt"))
        await wolf.prompt(sid, "go")
        await wait_for(lambda: in_state(wolf, sid, "waiting_approval"))
        await wolf.prompt(sid, "never mind")
        await wait_for(lambda: _turns_done(wolf, sid, 2))
        status = await wolf.status(sid)
        transcript = await wolf.transcript(sid)
        await wolf.close(sid)
        await wolf.result(sid)
    assert (
        status.last_outcome == "completed"
        and status.last_output == "answer 2"
        and not status.pending_approvals
    )
    assert [(r.content, r.outcome) for r in tool_returns(transcript)] == [
        ("interrupted by the user", "interrupted")
    ]


async def _turns_done(wolf, sid, n):
    status = await wolf.status(sid)
    return status.counters.turns >= n and status.state == "idle"


async def test_queued_prompts_and_waiting_steers_are_bounded(wolf, run_worker):
    async with run_worker(local_models={"m": _asks_then_answers().model}):
        sid = await wolf.start_session("a", _confirming("queue", max_queued=2, max_steers=1))
        await wolf.prompt(sid, "go")
        await wait_for(lambda: in_state(wolf, sid, "waiting_approval"))
        await wolf.prompt(sid, "second")
        await wolf.prompt(sid, "third")
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await wolf.prompt(sid, "fourth")
        assert "2 prompts already wait (host.sessions.max_queued)" in str(refused.value.cause)
        await wolf.steer(sid, "a hint")
        with pytest.raises(ValueError, match="too many steers waiting"):
            await wolf.steer(sid, "another hint")
        await wolf.close(sid)
        await wolf.result(sid)


# -- 12: what a worker fetches on a cache miss is checked against the digest it was sent ------------


@workflow.defn(name="CacheMissProbe", sandboxed=False)
class CacheMissProbe:
    """Asks `wolf.model_request` with digests its queries do not honour (a tampered or buggy session)."""

    @workflow.init
    def __init__(self, inp: dict) -> None:
        self.inp = inp

    @workflow.run
    async def run(self, inp: dict) -> str:
        try:
            await workflow.execute_activity(
                "wolf.model_request",
                inp["request"],
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=1),
            )
        except ActivityError as err:
            return str(err.cause)
        return "answered"

    @workflow.query(name="compiled")
    def compiled(self) -> dict:
        return self.inp["compiled"]

    @workflow.query(name="transcript")
    def transcript(self) -> list:
        return self.inp["transcript"]

    @workflow.query(name="manifest")
    def manifest(self) -> dict:
        return self.inp["manifest"]


@pytest.mark.parametrize("tampered", ["compiled", "transcript"])
async def test_a_prefix_or_compiled_agent_fetched_on_a_miss_must_match_its_digest(
    client, task_queue, tampered
):
    from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, UserPromptPart

    from agentwolf.workflows.contracts import EMPTY_DIGEST, CompiledAgent, chain_digest

    manifest = make_manifest()
    compiled = CompiledAgent(agent="a", models=["local:m"], instructions="", tools=[])
    prefix = [ModelRequest(parts=[UserPromptPart("the real first prompt")])]
    served = (
        [ModelRequest(parts=[UserPromptPart("a different first prompt")])]
        if tampered == "transcript"
        else prefix
    )
    served_compiled = (
        compiled.model_copy(update={"instructions": "changed"}) if tampered == "compiled" else compiled
    )
    wid = workflow_id("default", f"probe-{tampered}")
    request = {
        "ref": {"config_id": manifest.identity, "tenant": "default", "workflow_id": wid},
        "compiled_digest": compiled.digest,
        "base_len": 1,
        "base_digest": chain_digest(EMPTY_DIGEST, prefix),
        "delta": [],
    }
    inp = {
        "request": request,
        "compiled": served_compiled.model_dump(mode="json"),
        "transcript": ModelMessagesTypeAdapter.dump_python(served, mode="json"),
        "manifest": manifest.model_dump(mode="json"),
    }
    hosts = HostRegistry({"m": Script(lambda s: text("should not be asked")).model})
    activities = SessionActivities(hosts)
    async with Worker(
        client, task_queue=task_queue, workflows=[CacheMissProbe], activities=[activities.model_request],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):  # fmt: skip
        outcome = await client.execute_workflow(CacheMissProbe.run, inp, id=wid, task_queue=task_queue)
    await hosts.close()
    expected = {
        "compiled": "compiled agent does not match",
        "transcript": "transcript prefix (1 messages) does not match",
    }
    assert expected[tampered] in outcome


# -- 10: a long approval wait continues as new, and the wait survives it -----------------------------


async def test_a_turn_waiting_for_approval_continues_as_new_and_resumes(wolf, run_worker):
    def model(s):
        if s.calls == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("add", {"a": 1, "b": 2}, tool_call_id="free"),
                    ToolCallPart("echo", {"text": "approved text"}, tool_call_id="ask"),
                ]
            )
        return text(f"done after {len(user_texts(s.requests[-1]))} user texts")

    script = Script(model)
    manifest = _confirming("queue", max_steers=200, continue_as_new_bytes=1)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        handle = wolf.client.get_workflow_handle(workflow_id("default", sid))
        first_run = (await handle.describe()).run_id
        await wolf.prompt(sid, "go")
        await wait_for(lambda: in_state(wolf, sid, "waiting_approval"))
        for i in range(40):  # the inputs that grow a waiting run's history
            await wolf.steer(sid, f"hint {i}")
        status = await wait_for(lambda: _continued(wolf, sid))
        assert status.state == "waiting_approval" and [p.call_id for p in status.pending_approvals] == ["ask"]
        await record_history(
            wolf.client, workflow_id("default", sid), "approval_wait_continue_as_new", first_run
        )
        await wolf.approve(sid, "ask")
        await wait_for(lambda: _turns_done(wolf, sid, 1))
        transcript = await wolf.transcript(sid)
        events = [e async for _, e in _until_idle(wolf, sid)]
        await wolf.close(sid)
        await wolf.result(sid)
    assert [(r.content, r.outcome) for r in tool_returns(transcript)] == [
        ("3", "success"),
        ("approved text", "success"),
    ]
    assert script.calls == 2 and user_texts(script.requests[-1])[-40:] == [f"hint {i}" for i in range(40)]
    assert sum(e.kind == "approval_requested" for e in events) == 1
    assert sum(e.kind == "turn_started" for e in events) == 1


async def _continued(wolf, sid):
    status = await wolf.status(sid)
    return status if status.counters.continued_as_new >= 1 else None


async def _until_idle(wolf, sid):
    async for offset, event in wolf.events(sid):
        yield offset, event
        if event.kind == "turn_finished":
            return


async def test_a_terminated_session_never_claims_to_be_running(wolf, run_worker):
    async with run_worker(local_models={"m": Script(lambda s: text("late"), delay=30).model}):
        sid = await wolf.start_session("a", make_manifest())
        await wolf.prompt(sid, "go")
        await wait_for(lambda: in_state(wolf, sid, "running"))
        await wolf.client.get_workflow_handle(workflow_id("default", sid)).terminate("gone")
        assert (await wolf.status(sid)).state == "done"
        # A client new to the session (the CLI's) reads it from the ownership check's description.
        fresh = WolfClient(wolf.client, task_queue=wolf.task_queue)
        assert (await fresh.status(sid)).state == "done"
        await wait_for(lambda: _listed_as(wolf, sid, "done"))  # visibility lags a little
        assert sid not in {s.session_id for s in await wolf.list_sessions(state="running")}


async def _listed_as(wolf, sid, state):
    return {s.session_id: s.state for s in await wolf.list_sessions()}.get(sid) == state
