"""A session's run loop at its edges: a turn that continues as new while an answer arrives, a turn
task that raises, closing (with followers, client servers, queued prompts), cancelling, background
tasks, and signals that reach a run as it resumes a waiting turn. Each plays what went wrong before
(core review of 2026-12-01), on the real stack."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, UserPromptPart
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import WithStartWorkflowOperation, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from agentwolf.activities.session import SessionActivities
from agentwolf.config.manifest import Manifest, McpServerConfig, SessionSettings
from agentwolf.hosts.host import HostRegistry
from agentwolf.worker.bootstrap import SANDBOX, WORKFLOWS
from agentwolf.workflows.contracts import COMPILED_QUERY, CompiledAgent, HostRef
from agentwolf.workflows.session.turn import WAITING_SNAPSHOT_EVENTS
from agentwolf.workflows.session_input import SessionInput, TurnSnapshot
from agentwolf.workflows.types import (
    SESSION_WORKFLOW,
    ExtensionsChanged,
    PendingApproval,
    Prompt,
    Usage,
    workflow_id,
)
from tests.conftest import make_manifest, record_history, tools_server, wait_for
from tests.support.models import Script, text, tool, user_texts
from tests.support.polls import idle, in_state, tool_returns

CONFIRM_ECHO = {"rules": [{"tool": "echo", "action": "confirm"}]}


def _asks_once(s: Script) -> ModelResponse:
    if s.calls == 1:
        return ModelResponse(parts=[ToolCallPart("echo", {"text": "approved text"}, tool_call_id="ask")])
    return text(f"done after {s.calls} calls")


async def _events(wolf, sid) -> list[Any]:
    """Every event so far (without waiting for more)."""
    offset = await wolf.event_offset(sid)
    found: list[Any] = []
    if offset:
        async for i, event in wolf.events(sid, live=False):
            found.append(event)
            if i + 1 >= offset:
                break
    return found


async def _steer_to_the_brink(wolf, sid, handle) -> None:
    """Steer a run whose turn waits for approval until the next signal's activation (3 events: the
    signal, its workflow task scheduled and started) is the first to reach WAITING_SNAPSHOT_EVENTS."""
    hint = 0
    while (length := await _settled_length(handle)) + 3 < WAITING_SNAPSHOT_EVENTS:
        await wolf.steer(sid, f"hint {hint}")
        hint += 1
        await wait_for(lambda: _settled_past(handle, length))


async def _settled_length(handle) -> int:
    """The history's length once its last workflow task has completed."""
    return await wait_for(lambda: _settled_past(handle, 0))


async def _settled_past(handle, length: int) -> int | None:
    events = (await handle.fetch_history()).events
    tasks = [e.event_type for e in events if e.event_type in WORKFLOW_TASK_EVENTS]
    settled = tasks[-1] == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    return len(events) if settled and len(events) > length else None


WORKFLOW_TASK_EVENTS = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
}


# -- 1: an answer that arrives in the activation that would continue the waiting turn as new --------


@pytest.mark.parametrize("answer", ["approve", "deny"])
async def test_an_answer_arriving_as_a_waiting_turn_would_continue_as_new_is_taken(wolf, run_worker, answer):
    """The answer's own events push the waiting run past the snapshot threshold: the turn takes the
    answer (the call runs once, or is refused once) instead of the snapshot losing it."""
    script = Script(_asks_once)
    manifest = make_manifest(permissions=CONFIRM_ECHO, sessions={"continue_as_new_bytes": 1})
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        handle = wolf.client.get_workflow_handle(workflow_id("default", sid))
        first_run = (await handle.describe()).run_id
        await wolf.prompt(sid, "go")
        await wait_for(lambda: in_state(wolf, sid, "waiting_approval"))
        await _steer_to_the_brink(wolf, sid, handle)  # the answer's activation is the one that crosses it
        assert (await wolf.status(sid)).counters.continued_as_new == 0
        if answer == "approve":
            await wolf.approve(sid, "ask")
        else:
            await wolf.deny(sid, "ask", reason="no")
        status = await wait_for(lambda: _turns_done(wolf, sid, 1), timeout=60)
        transcript = await wolf.transcript(sid)
        if answer == "approve":
            await record_history(wolf.client, handle.id, "approval_answered_in_snapshot", first_run)
        await wolf.close(sid)
        await wolf.result(sid)
    expected = ("approved text", "success") if answer == "approve" else ("denied by the user: no", "denied")
    assert [(r.content, r.outcome) for r in tool_returns(transcript)] == [expected]
    assert status.state == "idle" and not status.pending_approvals
    assert status.last_output == "done after 2 calls" and script.calls == 2


async def _turns_done(wolf, sid, n):
    status = await wolf.status(sid)
    return status if status.state == "idle" and status.counters.turns >= n else None


# -- 2: an unexpected exception in the turn task ----------------------------------------------------

UNRESOLVABLE = {"type": "object", "properties": {"x": {"$ref": "https://example.invalid/x.json"}}}
"""A job schema whose `$ref` jsonschema cannot resolve: checking a result raises (not a ValueError)."""


async def test_an_unexpected_error_in_a_turn_fails_the_turn_and_the_session_goes_on(wolf, run_worker):
    script = Script(lambda s: tool("final_result", {"x": 1}) if s.calls == 1 else text("fine"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), output_schema=UNRESOLVABLE)
        await wolf.prompt(sid, "go")
        status = await wait_for(lambda: _turns_done(wolf, sid, 1), timeout=60)
        events = await _events(wolf, sid)
        transcript = await wolf.transcript(sid)
        await record_history(wolf.client, workflow_id("default", sid), "turn_task_raised")
        await wolf.close(sid)
        result = await wolf.result(sid)
    assert status.last_outcome == "failed" and status.last_output.startswith("internal error: ")
    assert [e.kind for e in events][-2:] == ["error", "turn_finished"]
    assert events[-1].outcome == "failed"
    # The output-tool call the model made is closed: the transcript stays valid for the next turn.
    assert [(r.tool_name, r.outcome) for r in tool_returns(transcript)] == [("final_result", "interrupted")]
    assert result.outcome == "failed"


async def test_a_background_task_whose_turn_raises_ends_failed(wolf, run_worker):
    async with run_worker(local_models={"m": Script(lambda s: tool("final_result", {"x": 1})).model}):
        sid = await wolf.start_session(
            "a", make_manifest(), prompt="go", background=True, output_schema=UNRESOLVABLE
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await asyncio.wait_for(wolf.result(sid), 60)
    assert "internal error" in str(failed.value.cause)


# -- 5 and 17: closing and cancelling a session with a client's servers -----------------------------


def _activities(hosts: HostRegistry, release: Any = None) -> list[Any]:
    real = SessionActivities(hosts)
    return [real.compile, real.model_request, real.call_tool, release or real.release_session]


async def test_a_close_completes_while_a_follower_polls_during_the_release(client, task_queue, wolf):
    """The release activity cannot run (no activity worker) while a follower polls past the last
    event; once it can, the session completes."""
    hosts = HostRegistry({"m": Script(lambda s: text("hello")).model})
    servers = {"tools": McpServerConfig(**tools_server())}
    follower = None
    try:
        async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS, workflow_runner=SANDBOX):
            async with Worker(client, task_queue=task_queue, activities=_activities(hosts)):
                sid = await wolf.start_session("a", make_manifest(), session_servers=servers)
                await wolf.prompt(sid, "hi")
                await wait_for(lambda: idle(wolf, sid, 1), timeout=60)
            handle = client.get_workflow_handle(workflow_id("default", sid))
            await wolf.close(sid)
            await wait_for(lambda: _release_scheduled(handle), timeout=60)
            follower = asyncio.create_task(_drain(wolf, sid, await wolf.event_offset(sid)))
            async with Worker(client, task_queue=task_queue, activities=_activities(hosts)):
                result = await asyncio.wait_for(wolf.result(sid), 60)
                await asyncio.wait_for(follower, 60)  # and the follower ends with the session
    finally:
        if follower is not None:
            follower.cancel()
        await hosts.close()
    assert result.outcome == "completed"


async def _drain(wolf, sid, offset):
    return [e async for _, e in wolf.events(sid, offset, live=False)]


async def _release_scheduled(handle) -> bool:
    return any(
        e.activity_task_scheduled_event_attributes.activity_type.name == "wolf.release_session"
        for e in (await handle.fetch_history()).events
    )


async def test_a_cancelled_session_releases_its_clients_servers(client, task_queue, wolf):
    hosts = HostRegistry({"m": Script(lambda s: text("hello")).model})
    servers = {"tools": McpServerConfig(**tools_server())}
    try:
        async with (
            Worker(client, task_queue=task_queue, workflows=WORKFLOWS, workflow_runner=SANDBOX),
            Worker(client, task_queue=task_queue, activities=_activities(hosts)),
        ):
            sid = await wolf.start_session("a", make_manifest(), session_servers=servers)
            await wolf.prompt(sid, "hi")
            await wait_for(lambda: idle(wolf, sid, 1), timeout=60)
            handle = client.get_workflow_handle(workflow_id("default", sid))
            await handle.cancel()
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(handle.result(), 60)
            released = await _release_completed(handle)
            await record_history(client, handle.id, "workflow_cancel_session_servers")
    finally:
        await hosts.close()
    assert released


async def _release_completed(handle) -> bool:
    events = (await handle.fetch_history()).events
    scheduled = {
        e.event_id
        for e in events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "wolf.release_session"
    }
    return any(
        e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
        for e in events
        if e.HasField("activity_task_completed_event_attributes")
    )


@activity.defn(name="wolf.release_session")
async def _refusing_release(ref: HostRef) -> None:
    raise ApplicationError("no such host here", non_retryable=True)


async def test_a_release_that_fails_at_close_is_said_and_the_session_still_completes(
    client, task_queue, wolf
):
    hosts = HostRegistry({"m": Script(lambda s: text("hello")).model})
    servers = {"tools": McpServerConfig(**tools_server())}
    try:
        async with (
            Worker(client, task_queue=task_queue, workflows=WORKFLOWS, workflow_runner=SANDBOX),
            Worker(client, task_queue=task_queue, activities=_activities(hosts, _refusing_release)),
        ):
            sid = await wolf.start_session("a", make_manifest(), session_servers=servers)
            await wolf.prompt(sid, "hi")
            await wait_for(lambda: idle(wolf, sid, 1), timeout=60)
            await wolf.close(sid)
            result = await asyncio.wait_for(wolf.result(sid), 60)
            events = [e async for _, e in wolf.events(sid, live=False)]
    finally:
        await hosts.close()
    assert result.outcome == "completed"
    assert any(e.kind == "error" and "no such host here" in (e.text or "") for e in events)


# -- 7: a background task takes no more prompts; what a close drops is said -------------------------


async def test_a_background_task_refuses_more_prompts(wolf, run_worker):
    script = Script(lambda s: text(f"answer {s.calls}"), delay=1)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("first", "a", make_manifest())
        await wait_for(lambda: script.calls >= 1, timeout=60)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await wolf.prompt(sid, "second")
        result = await wolf.result(sid)
        transcript = await wolf.transcript(sid)
        await record_history(wolf.client, workflow_id("default", sid), "background_refuses_prompt")
    assert "this background task takes no more prompts" in str(refused.value.cause)
    assert result.outcome == "completed" and user_texts(transcript) == ["first"]


async def test_prompts_still_queued_at_close_are_said_dropped(wolf, run_worker):
    script = Script(lambda s: text("slow"), delay=60)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        await wolf.prompt(sid, "first")
        await wait_for(lambda: script.calls >= 1, timeout=60)
        queued = await wolf.prompt(sid, "second")
        await wolf.close(sid)
        await wolf.result(sid)
        events = [e async for _, e in wolf.events(sid, live=False)]
        assert (await wolf.status(sid)).queued == 0
    dropped = [e for e in events if e.outcome == "dropped"]
    assert [(e.kind, e.turn_id) for e in dropped] == [("error", queued)]
    assert "second" in (dropped[0].text or "") and events[-1].kind == "session_closed"


# -- 10: a waiting turn continues as new with a stale agent ------------------------------------------


async def test_a_waiting_turn_continues_as_new_once_its_agent_is_stale(wolf, run_worker):
    script = Script(_asks_once)
    manifest = make_manifest(permissions=CONFIRM_ECHO, sessions={"continue_as_new_bytes": 1})
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        handle = wolf.client.get_workflow_handle(workflow_id("default", sid))
        first_run = (await handle.describe()).run_id
        await wolf.prompt(sid, "go")
        await wait_for(lambda: in_state(wolf, sid, "waiting_approval"))
        compiled = await handle.query(COMPILED_QUERY, result_type=CompiledAgent)
        await handle.signal(
            "extensions_changed", ExtensionsChanged(sources=compiled.sources, detail="tools changed")
        )
        await wait_for(lambda: _stale_said(wolf, sid))
        await _steer_to_the_brink(wolf, sid, handle)
        await wolf.steer(sid, "a last hint")  # grows the waiting run past the threshold
        status = await wait_for(lambda: _continued(wolf, sid), timeout=60)
        assert status.state == "waiting_approval" and [p.call_id for p in status.pending_approvals] == ["ask"]
        await record_history(wolf.client, handle.id, "approval_wait_stale_agent", first_run)
        await wolf.approve(sid, "ask")
        status = await wait_for(lambda: _turns_done(wolf, sid, 1), timeout=60)
        events = await _events(wolf, sid)
        await wolf.close(sid)
        await wolf.result(sid)
    assert status.last_output == "done after 2 calls"
    compiles = [e.text for e in events if e.kind == "compiled"]
    assert len(compiles) == 2  # the first run's, and the resumed run's before the call went on


async def _stale_said(wolf, sid):
    return any(e.kind == "extensions_changed" for e in await _events(wolf, sid))


async def _continued(wolf, sid):
    status = await wolf.status(sid)
    return status if status.counters.continued_as_new >= 1 else None


# -- 12: an interrupt or close that reaches a run as it resumes a waiting turn ----------------------


def _resumed_input(sid: str, manifest: Manifest) -> SessionInput:
    """What a run that continued as new while its turn waited for approval hands the next."""
    call = ToolCallPart("echo", {"text": "x"}, tool_call_id="ask")
    prompt = Prompt(turn_id="turn-1", text="go")
    return SessionInput(
        session_id=sid,
        agent="a",
        manifest=manifest,
        transcript=[ModelRequest(parts=[UserPromptPart("go")]), ModelResponse(parts=[call])],
        resume=TurnSnapshot(
            prompt=prompt,
            step=1,
            usage=Usage(requests=1),
            open_calls=[call],
            finished={},
            pending_approvals=[PendingApproval(call_id="ask", tool="echo", args={"text": "x"})],
        ),
    )


@pytest.mark.parametrize("signal", ["interrupt", "close"])
async def test_a_signal_in_the_first_activation_of_a_resumed_waiting_turn_is_kept(
    wolf, run_worker, client, task_queue, signal
):
    """Signal-with-start puts the signal in the run's first activation, before the turn resumes."""
    sid = f"resumed-{signal}-{task_queue}"
    wid = workflow_id("default", sid)
    manifest = make_manifest(permissions=CONFIRM_ECHO)
    async with run_worker(local_models={"m": Script(lambda s: text("never asked")).model}):
        handle = await client.start_workflow(
            SESSION_WORKFLOW,
            _resumed_input(sid, manifest),
            id=wid,
            task_queue=task_queue,
            start_signal=signal,
        )
        if signal == "close":
            result = await asyncio.wait_for(wolf.result(sid), 60)
            assert result.outcome == "interrupted"
        status = await wait_for(lambda: _turns_done_or_closed(wolf, sid), timeout=60)
        transcript = await wolf.transcript(sid)
        if signal == "interrupt":
            await record_history(client, wid, "resumed_turn_interrupted")
            await wolf.close(sid)
            await handle.result()
    assert status.last_outcome == "interrupted" and not status.pending_approvals
    assert [(r.tool_call_id, r.outcome) for r in tool_returns(transcript)] == [("ask", "interrupted")]


async def test_a_prompt_in_the_first_activation_of_a_resumed_waiting_turn_meets_double_texting(
    wolf, run_worker, client, task_queue
):
    """Update-with-start puts the prompt in the run's first activation: the resuming turn is busy."""
    sid = f"resumed-reject-{task_queue}"
    manifest = make_manifest({"double_texting": "reject"}, permissions=CONFIRM_ECHO)
    start = WithStartWorkflowOperation(
        SESSION_WORKFLOW,
        _resumed_input(sid, manifest),
        id=workflow_id("default", sid),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
    )
    async with run_worker(local_models={"m": Script(lambda s: text("never asked")).model}):
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await client.execute_update_with_start_workflow("prompt", "again", start_workflow_operation=start)
        await wait_for(lambda: in_state(wolf, sid, "waiting_approval"), timeout=60)  # it resumed
        await wolf.close(sid)
        await wolf.result(sid)
    assert "double_texting policy is 'reject'" in str(refused.value.cause)


async def _turns_done_or_closed(wolf, sid):
    status = await wolf.status(sid)
    return status if status.state in ("idle", "done") and status.counters.turns >= 1 else None


# -- events_kept has a lower bound ------------------------------------------------------------------


def test_events_kept_cannot_be_negative():
    with pytest.raises(ValidationError):
        SessionSettings(events_kept=-1)
    assert SessionSettings(events_kept=0).events_kept == 0


# -- frontends F12: a session left idle closes itself ----------------------------------------------


async def test_a_session_idle_for_idle_close_after_closes_itself_and_never_during_a_turn(wolf, run_worker):
    """The limit is shorter than the turn: the timer runs only while the session is idle."""
    script = Script(lambda s: text("slow answer"), delay=3)
    async with run_worker(local_models={"m": script.model}):
        manifest = make_manifest(sessions={"idle_close_after": 1})
        sid = await wolf.start_session("a", manifest, prompt="go")  # no idle time before the turn
        result = await asyncio.wait_for(wolf.result(sid), 60)
        events = [e async for _, e in wolf.events(sid, live=False)]
        await record_history(wolf.client, workflow_id("default", sid), "idle_close")
    assert result.outcome == "completed" and result.output == "slow answer"
    assert [e.kind for e in events][-3:] == ["turn_finished", "limit_reached", "session_closed"]
    assert "host.sessions.idle_close_after" in (events[-2].text or "")


def test_idle_close_after_is_left_out_of_a_configs_identity_when_unset():
    assert "idle_close_after" not in SessionSettings().model_dump(mode="json")
    assert make_manifest().identity == make_manifest(sessions={"idle_close_after": None}).identity
