"""Followers cannot hold a session hostage: a poll left behind by a Ctrl-C'd or killed `wolf follow`
keeps waiting inside the session, and the server allows only 10 updates in flight per workflow
(prompts included). Real `wolf follow` processes against the real dev server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.contrib.workflow_streams import WorkflowStream
from temporalio.worker import Replayer, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agentwolf.client.wolf_client import WolfClient
from agentwolf.worker.bootstrap import SANDBOX, WORKFLOWS
from agentwolf.workflows.session import stream
from agentwolf.workflows.session import workflow as session
from agentwolf.workflows.session.stream import MAX_WAITING_POLLS
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, text

WOLF = str(Path(sys.executable).parent / "wolf")
ABANDONED = 12


def _follow(address: str, sid: str) -> subprocess.Popen[str]:
    environ = {**os.environ, "NO_COLOR": "1", "TEMPORAL_ADDRESS": address}
    return subprocess.Popen(
        [WOLF, "follow", sid, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=environ,
    )


async def _read_until(follower: subprocess.Popen[str], kind: str, count: int = 1) -> list[dict[str, Any]]:
    """The events a follower prints until its `count`-th event of `kind` (fewer if it exits first).
    Other lines (the SDK's core logs retry warnings on stdout) are skipped."""
    assert follower.stdout is not None
    events: list[dict[str, Any]] = []
    while sum(e["kind"] == kind for e in events) < count:
        line = await asyncio.to_thread(follower.stdout.readline)
        if not line:
            break
        if line.startswith("{"):
            event = json.loads(line)
            event.pop("offset", None)  # `wolf follow --json` says where each event is
            events.append(event)
    return events


async def _idle(wolf: Any, sid: str, turns: int) -> bool:
    status = await wolf.status(sid)
    return status.state == "idle" and status.counters.turns == turns


async def _all_events(wolf: Any, sid: str) -> list[dict[str, Any]]:
    """Follow a session from its first event to its end."""
    return [event.model_dump(mode="json", exclude_none=True) async for _, event in wolf.events(sid)]


def _elsewhere(wolf: WolfClient) -> WolfClient:
    """`wolf` as another process would have it: followers in one process share one reader per
    session (agentwolf/client/feed.py), so each poll of these tests needs a client of its own."""
    mine = wolf.client
    client = Client(mine.service_client, namespace=mine.namespace, data_converter=mine.data_converter)
    return WolfClient(client, tenant=wolf.tenant, task_queue=wolf.task_queue)


async def _updates(handle: Any, stage: str, count: int) -> bool:
    """Whether the run's history holds `count` updates at `stage` (accepted or completed)."""
    field = f"workflow_execution_update_{stage}_event_attributes"
    history = await handle.fetch_history()
    return sum(e.HasField(field) for e in history.events) == count


async def _accepted(handle: Any) -> int:
    """How many updates (prompts, polls) the session has accepted so far."""
    history = await handle.fetch_history()
    return sum(e.HasField("workflow_execution_update_accepted_event_attributes") for e in history.events)


async def test_abandoned_followers_leave_room_for_prompts_and_live_followers(wolf, run_worker, client):
    script = Script(lambda s: text(f"answer {s.calls}"))
    address = client.service_client.config.target_host
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        await wolf.prompt(sid, "first")
        await wait_for(lambda: _idle(wolf, sid, 1))
        handle = client.get_workflow_handle(workflow_id("default", sid))
        prompts = await _accepted(handle)
        abandoned = [_follow(address, sid) for _ in range(ABANDONED)]
        try:
            replays = await asyncio.wait_for(
                asyncio.gather(*(_read_until(f, "turn_finished") for f in abandoned)), 240
            )

            async def polls_waiting() -> bool:  # as many followers as the session lets wait, in a live poll
                return await _accepted(handle) >= prompts + MAX_WAITING_POLLS

            await wait_for(polls_waiting, timeout=120)
            for i, follower in enumerate(abandoned):
                follower.send_signal(signal.SIGINT if i % 2 else signal.SIGKILL)
            codes = [await asyncio.to_thread(f.wait, 60) for f in abandoned]
        finally:
            for follower in abandoned:
                if follower.poll() is None:
                    follower.kill()
                    follower.wait()
        live = _follow(address, sid)
        try:
            before = await asyncio.wait_for(_read_until(live, "turn_finished"), 120)
            turn_id = await asyncio.wait_for(wolf.prompt(sid, "second"), 120)
            during = await asyncio.wait_for(_read_until(live, "turn_finished"), 120)
            await wolf.close(sid)
            after = await asyncio.wait_for(_read_until(live, "session_closed"), 120)
            assert await asyncio.to_thread(live.wait, 60) == 0
        finally:
            if live.poll() is None:
                live.kill()
                live.wait()
        result = await wolf.result(sid)
        everything = await _all_events(wolf, sid)
    # Every abandoned follower got in and replayed the first turn before it was stopped.
    assert [e[-1]["kind"] if e else None for e in replays] == ["turn_finished"] * ABANDONED
    assert sorted(codes) == sorted([130, -signal.SIGKILL] * (ABANDONED // 2))
    # The prompt was accepted, its turn completed, and the live follower saw it happen.
    assert result.outcome == "completed" and result.output == "answer 2"
    assert during[0]["kind"] == "turn_started" and during[-1]["kind"] == "turn_finished"
    assert {e["turn_id"] for e in during} == {turn_id}
    assert [e["text"] for e in during if e["kind"] == "model_text"] == ["answer 2"]
    # Exactly once and in order: the live follower's stream is the session's whole log.
    assert before + during + after == everything


async def test_more_live_followers_than_the_cap_each_see_every_event_once(wolf, run_worker, client):
    """Followers beyond the cap are refused while they would only wait (the client retries them);
    each still sees every event exactly once, in order, across continue-as-new at every idle point."""
    script = Script(lambda s: text(f"answer {s.calls}"))
    manifest = make_manifest(sessions={"continue_as_new_bytes": 1})
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        handle = client.get_workflow_handle(workflow_id("default", sid))
        followers = [
            asyncio.create_task(_all_events(_elsewhere(wolf), sid)) for _ in range(MAX_WAITING_POLLS + 3)
        ]
        await wait_for(lambda: _updates(handle, "accepted", MAX_WAITING_POLLS))
        for turn in range(1, 4):
            await asyncio.wait_for(wolf.prompt(sid, f"question {turn}"), 60)
            await wait_for(lambda n=turn: _idle(wolf, sid, n))
        runs = (await wolf.status(sid)).counters.continued_as_new
        await wolf.close(sid)
        seen = await asyncio.wait_for(asyncio.gather(*followers), 60)
        everything = await _all_events(wolf, sid)
    assert runs == 3
    assert [e["kind"] for e in everything].count("turn_finished") == 3
    assert all(events == everything for events in seen)


async def test_a_new_follower_takes_the_place_of_an_old_abandoned_poll(wolf, run_worker, client, monkeypatch):
    """A poll that waited EVICT_AFTER gives its place to a newer one (answered empty), and a run
    with such early answers replays with today's code."""
    monkeypatch.setattr(stream, "EVICT_AFTER", timedelta(seconds=1))
    script = Script(lambda s: text(f"answer {s.calls}"))
    async with run_worker(local_models={"m": script.model}, workflow_runner=PATCHABLE):
        sid = await wolf.start_session("a", make_manifest())
        handle = client.get_workflow_handle(workflow_id("default", sid))
        abandoned = [
            asyncio.create_task(_all_events(_elsewhere(wolf), sid)) for _ in range(MAX_WAITING_POLLS)
        ]
        await wait_for(lambda: _updates(handle, "accepted", MAX_WAITING_POLLS))
        for task in abandoned:
            task.cancel()
        live = asyncio.create_task(_all_events(_elsewhere(wolf), sid))
        # No event yet: only an eviction answers a poll (the live one is refused for the first second).
        await wait_for(lambda: _updates(handle, "completed", 1))
        await wolf.prompt(sid, "hello")
        await wait_for(lambda: _idle(wolf, sid, 1))
        await wolf.close(sid)
        seen = await asyncio.wait_for(live, 60)
        everything = await _all_events(wolf, sid)
        history = await handle.fetch_history()
    assert seen == everything and [e["kind"] for e in seen].count("turn_finished") == 1
    await _replay(client, history, PATCHABLE)


async def test_a_run_recorded_before_the_cap_replays(wolf, run_worker, client, monkeypatch):
    """Sessions that ran the library's own stream, with more polls waiting than the cap, replay on
    today's code: the cap is patched in, since such runs never answered a poll early."""
    monkeypatch.setattr(session, "SessionStream", WorkflowStream)
    async with run_worker(local_models={"m": Script(lambda s: text("ok")).model}, workflow_runner=PATCHABLE):
        sid = await wolf.start_session("a", make_manifest())
        handle = client.get_workflow_handle(workflow_id("default", sid))
        abandoned = [
            asyncio.create_task(_all_events(_elsewhere(wolf), sid)) for _ in range(MAX_WAITING_POLLS + 3)
        ]
        await wait_for(lambda: _updates(handle, "accepted", MAX_WAITING_POLLS + 3))
        for task in abandoned:
            task.cancel()
        await wolf.prompt(sid, "hello")
        await wait_for(lambda: _idle(wolf, sid, 1))
        await wolf.close(sid)
        await wolf.result(sid)
        history = await handle.fetch_history()
    monkeypatch.undo()
    await _replay(client, history)


# The workflow modules are sandboxed (imported afresh per run): tests that patch them pass them through.
PATCHABLE = SandboxedWorkflowRunner(
    restrictions=SANDBOX.restrictions.with_passthrough_modules(
        "agentwolf.workflows.session.workflow", "agentwolf.workflows.session.stream"
    )
)


async def _replay(client: Any, history: Any, runner: WorkflowRunner = SANDBOX) -> None:
    replayer = Replayer(workflows=WORKFLOWS, data_converter=client.data_converter, workflow_runner=runner)
    await replayer.replay_workflow(history)
