"""Live output: streamed model text reaches followers while the step runs, from heartbeat details
(never history); retried attempts are superseded; a follower's text equals the answer exactly once."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from pydantic_ai.messages import ModelResponse, TextPart, ThinkingPart

from agentwolf.workflows.types import Event, workflow_id
from tests.conftest import (
    make_manifest,
    openai_manifest,
    record_history,
    tools_server,
    wait_for,
    worker_process,
)
from tests.support.models import Script, sequence, text, tool
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.support.processes import end

ANSWER = "The quick brown fox jumps over the lazy dog and keeps on running far away."


def rendered(events: list[Event]) -> dict[tuple[str | None, int | None], str]:
    """What a follower shows per step: deltas appended, a superseded attempt's text dropped."""
    steps: dict[tuple[str | None, int | None], list[tuple[int | None, str]]] = {}
    for e in events:
        key = (e.turn_id, e.step)
        if e.kind == "text_delta":
            steps.setdefault(key, []).append((e.attempt, e.text or ""))
        elif e.kind == "attempt_superseded":
            steps[key] = [(a, t) for a, t in steps.get(key, []) if a != e.attempt]
    return {k: "".join(t for _, t in v) for k, v in steps.items()}


async def _collect(wolf: Any, sid: str, until: str = "turn_finished", **kwargs: Any) -> list[Event]:
    events = []
    async for _, event in wolf.events(sid, **kwargs):
        events.append(event)
        if event.kind == until:
            break
    return events


async def test_text_streams_before_the_step_ends_and_joins_to_the_answer(wolf, run_worker, client):
    script = Script(
        sequence(ModelResponse(parts=[ThinkingPart("let me think"), TextPart(ANSWER)])), chunk_delay=0.15
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="go")
        events = await _collect(wolf, sid)
        await record_history(wolf.client, workflow_id("default", sid), "streamed_turn")
        # Deltas never reach history: the stream's durable events are the same without `live`.
        durable = [e.kind for e in await _collect(wolf, sid, live=False)]
    kinds = [e.kind for e in events]
    final = events[kinds.index("model_text")]
    deltas = [e for e in events[: kinds.index("model_text")] if e.kind == "text_delta"]
    # Many deltas, read from heartbeats while the request ran (a whole response would be one).
    assert len(deltas) >= 3, kinds
    assert all(d.attempt == 1 for d in deltas)
    assert [d.index for d in deltas] == [
        sum(len(x.text or "") for x in deltas[:i]) for i in range(len(deltas))
    ]
    assert "".join(d.text or "" for d in deltas) == final.text == ANSWER
    assert rendered(events) == {(final.turn_id, final.step): ANSWER}
    assert any(e.kind == "thinking_delta" and e.text == "let me think" for e in events)
    assert durable == [k for k in kinds if k not in ("text_delta", "thinking_delta")]
    history = await client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
    assert "jumps over" not in str(history.to_json()).replace(ANSWER, "")  # only the response itself


async def test_a_model_that_cannot_stream_still_gives_one_delta_per_step(wolf, run_worker):
    script = Script(sequence(tool("add", {"a": 1, "b": 2}), text("three")))  # no stream function
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="add")
        events = await _collect(wolf, sid)
    deltas = [e for e in events if e.kind == "text_delta"]
    assert [(d.text, d.index) for d in deltas] == [("three", 0)]
    assert events.index(deltas[0]) == [e.kind for e in events].index("model_text") - 1


async def test_a_broken_stream_is_superseded_by_the_retry(wolf, run_worker):
    # The first attempt breaks after 6 chunks, once the follower has some of its text (however long a
    # busy machine takes to bring it); the retry streams the whole answer.
    shown = asyncio.Event()
    script = Script(
        sequence(text(ANSWER)),
        chunk_delay=0.15,
        fail_after=lambda s: 6 if s.calls == 1 else None,
        before_break=shown.wait,
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="go")
        events: list[Event] = []
        async for _, event in wolf.events(sid):
            events.append(event)
            if event.kind == "text_delta" and event.attempt == 1:
                shown.set()
            if event.kind == "turn_finished":
                break
        await record_history(wolf.client, workflow_id("default", sid), "streamed_turn_superseded")
    superseded = [e for e in events if e.kind == "attempt_superseded"]
    assert [e.attempt for e in superseded] == [1]
    assert any(
        e.kind == "text_delta" and e.attempt == 1 for e in events
    )  # partial text was shown, then dropped
    final = next(e for e in events if e.kind == "model_text")
    assert final.text == ANSWER and script.calls == 2
    assert rendered(events) == {(final.turn_id, final.step): ANSWER}


async def test_interrupt_mid_stream_ends_the_deltas_and_the_turn(wolf, run_worker):
    script = Script(sequence(text(ANSWER * 4)), chunk_delay=0.2)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="go")
        events: list[Event] = []
        async for _, event in wolf.events(sid):
            events.append(event)
            if (
                event.kind == "text_delta"
                and len(events)
                and sum(e.kind == "text_delta" for e in events) == 3
            ):
                await wolf.interrupt(sid, "enough")
            if event.kind == "turn_finished":
                break
    kinds = [e.kind for e in events]
    assert "model_text" not in kinds and kinds[-1] == "turn_finished" and events[-1].outcome == "interrupted"
    after = kinds[kinds.index("interrupted") :]
    assert "text_delta" not in after
    assert kinds.index("attempt_superseded") < kinds.index("interrupted")  # the partial text is dropped
    assert all(not t for t in rendered(events).values())


async def test_a_follower_that_reconnects_mid_stream_gets_the_text_from_the_start(wolf, run_worker):
    script = Script(sequence(text(ANSWER)), chunk_delay=0.2)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="go")
        first: list[tuple[int, Event]] = []
        async for offset, event in wolf.events(sid):
            first.append((offset, event))
            if sum(e.kind == "text_delta" for _, e in first) == 2:
                break
        resume_at = max(o for o, e in first if e.kind not in ("text_delta", "thinking_delta")) + 1
        await asyncio.sleep(0.5)  # more text streams while nobody follows
        second = await _collect(wolf, sid, from_offset=resume_at)
    deltas = [e for e in second if e.kind == "text_delta"]
    assert deltas[0].index == 0  # the running step's text again, whole, from its start
    final = next(e for e in second if e.kind == "model_text")
    assert "".join(d.text or "" for d in deltas) == final.text == ANSWER
    assert not any(e.kind == "turn_started" for e in second)  # durable events resume at the offset


async def test_a_worker_killed_mid_stream_gives_the_retry_s_text_exactly_once(env, wolf, task_queue):
    """The real provider path (a streaming OpenAI-compatible server); the worker is SIGKILLed while
    the answer streams; a new worker retries the request, which answers differently."""
    first_answer = " ".join(f"first{i}" for i in range(60))
    second_answer = " ".join(f"second{i}" for i in range(12))

    def reply(request: dict[str, Any]) -> Reply:
        if not server.requests[:-1]:
            return Reply(text=first_answer, interval=0.1)
        return Reply(text=second_answer, interval=0.05)

    with ScriptedOpenAI(reply) as server:
        manifest = openai_manifest(server.base_url, mcp_servers={"tools": tools_server()})
        worker = worker_process(env, task_queue)
        replacement = None
        events: list[Event] = []
        try:
            sid = await wolf.start_session("a", manifest, prompt="go")
            async for _, event in wolf.events(sid):
                events.append(event)
                if (
                    event.kind == "text_delta"
                    and replacement is None
                    and sum(e.kind == "text_delta" for e in events) >= 3
                ):
                    worker.send_signal(signal.SIGKILL)
                    worker.wait()
                    replacement = worker_process(env, task_queue)
                if event.kind == "turn_finished":
                    break
        finally:
            for proc in (worker, replacement):
                if proc is not None:
                    end(proc)
    assert len(server.requests) == 2, [(e.kind, e.text) for e in events]
    superseded = [e for e in events if e.kind == "attempt_superseded"]
    assert [e.attempt for e in superseded] == [1]
    final = next(e for e in events if e.kind == "model_text")
    assert final.text == second_answer and events[-1].text == second_answer
    assert rendered(events) == {(final.turn_id, final.step): second_answer}
    # The retry (attempt 2, or 3 when the new worker's first try could not reach the session yet)
    # streams its own text from the start.
    retried = [e for e in events if e.kind == "text_delta" and (e.attempt or 0) >= 2]
    assert retried and retried[0].index == 0


async def test_a_live_follower_survives_continue_as_new_steer_bursts_and_a_worker_restart(wolf, run_worker):
    def decide(s: Script) -> ModelResponse:
        last = s.requests[-1][-1]
        if any(p.part_kind == "user-prompt" and str(p.content).startswith("question") for p in last.parts):
            return tool("slow", {"seconds": 1})
        return text(f"answer number {s.calls} comes word by word")

    script = Script(decide, chunk_delay=0.1)
    manifest = make_manifest(sessions={"continue_as_new_bytes": 1})  # continue as new at every idle point
    events: list[Event] = []

    def finished(question: str) -> bool:
        started = {e.turn_id for e in events if e.kind == "turn_started" and e.text == question}
        return any(e.kind == "turn_finished" and e.turn_id in started for e in events)

    async def follow(sid: str) -> None:
        async for _, event in wolf.events(sid):
            events.append(event)
            if finished("question 2"):
                return

    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        follower = asyncio.create_task(follow(sid))
        await wolf.prompt(sid, "question 0")
        await wait_for(lambda: sum(e.kind == "turn_finished" for e in events) == 1)
        seen = len(events)
        await wolf.prompt(sid, "question 1")
        await wait_for(lambda: any(e.kind == "tool_call_started" for e in events[seen:]))
        await asyncio.gather(*(wolf.steer(sid, f"steer {i}") for i in range(20)))
        # Steers that arrive after the turn's last request start a turn of their own (a loaded
        # machine delivers some late): wait until every steer is in one or the other.
        await wait_for(lambda: finished("question 1") and _steers_in(events) == 20 and not _running(events))
        seen = len(events)
        await wolf.prompt(sid, "question 2")
        await wait_for(lambda: any(e.kind == "tool_call_started" for e in events[seen:]))
    async with run_worker(local_models={"m": script.model}):  # the worker restarts mid-turn
        await asyncio.wait_for(follower, 120)
        status = await wolf.status(sid)
    assert status.counters.continued_as_new >= 2
    assert _steers_in(events) == 20  # none lost, none twice
    texts = [e for e in events if e.kind == "model_text"]
    assert len(texts) == sum(e.kind == "turn_finished" for e in events)  # one answer a turn
    shown = rendered(events)
    assert [shown[(e.turn_id, e.step)] for e in texts] == [e.text for e in texts]


def _steers_in(events: list[Event]) -> int:
    """Steers applied in a running turn, and those that started a turn of their own."""
    applied = sum(e.kind == "steer_applied" for e in events)
    started = [e.text or "" for e in events if e.kind == "turn_started"]
    return applied + sum(line.startswith("steer") for text in started for line in text.splitlines())


def _running(events: list[Event]) -> bool:
    return sum(e.kind == "turn_started" for e in events) > sum(e.kind == "turn_finished" for e in events)


async def test_an_answer_longer_than_an_event_text_still_joins_exactly(wolf, run_worker):
    """Event texts are cut at 2,000 characters; a model's text is not (up to 64 KiB): its deltas
    must join to it."""
    answer = " ".join(f"w{i:03d}" + "x" * 95 for i in range(50))
    script = Script(sequence(text(answer)), chunk_delay=0.02)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="go")
        events = await _collect(wolf, sid)
    final = next(e for e in events if e.kind == "model_text")
    assert len(answer) > 4000 and final.text == answer
    assert rendered(events) == {(final.turn_id, final.step): answer}
