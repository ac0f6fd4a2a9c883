"""Followers in one process share one reader per session (agentwolf/client/feed.py): one waiting poll
whose answers carry no events (history does not grow with followers or with the answer), one
`describe` loop that runs only while a follower waits for more (a stalled client costs nothing and
holds no backlog). The real dev server, worker and WolfClient."""

from __future__ import annotations

import asyncio
from typing import Any

from agentwolf.client import feed
from agentwolf.workflows.types import Event, SessionStatus, workflow_id
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, sequence, text

ANSWER = " ".join(f"word{i}" for i in range(60))
LONG = " ".join(f"word{i}" for i in range(160))
"""Streamed for 8 s: several times as long as a stalled follower's reads go on."""
FOLLOWERS = 10


def _shown(events: list[Event]) -> str:
    """The turn's text as a follower shows it (superseded attempts dropped)."""
    deltas: list[Event] = []
    for e in events:
        if e.kind == "text_delta":
            deltas.append(e)
        elif e.kind == "attempt_superseded":
            deltas = [d for d in deltas if d.attempt != e.attempt]
    return "".join(d.text or "" for d in deltas)


def _durable(events: list[Event]) -> list[str]:
    """The kinds of the durable events (live text may come before a durable event it followed)."""
    return [e.kind for e in events if e.kind not in ("text_delta", "thinking_delta")]


async def _turn(wolf: Any, sid: str, start: int, live: bool = True) -> list[Event]:
    events = []
    async for _, event in wolf.events(sid, start, live=live):
        events.append(event)
        if event.kind == "turn_finished":
            return events
    return events


async def _idle(handle: Any, turns: int) -> bool:
    status = await handle.query("status", result_type=SessionStatus)
    return status.state == "idle" and status.counters.turns == turns


def _polls(history: Any) -> int:
    """Stream polls the run accepted (long-poll updates: what history records per follower read)."""
    return sum(
        e.HasField("workflow_execution_update_accepted_event_attributes")
        and e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name == feed.POLL
        for e in history.events
    )


async def test_many_followers_of_a_session_share_one_reader_and_history_does_not_grow_with_them(
    wolf, run_worker, client
):
    script = Script(sequence(text(ANSWER)), chunk_delay=0.02)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        handle = client.get_workflow_handle(workflow_id("default", sid))
        start = await wolf.event_offset(sid)
        followers = [asyncio.create_task(_turn(wolf, sid, start)) for _ in range(FOLLOWERS)]
        await wait_for(lambda: feed.followers(client, handle.id) == FOLLOWERS and _polls_waiting(handle))
        await wolf.prompt(sid, "go")
        seen = await asyncio.wait_for(asyncio.gather(*followers), 120)
        history = await handle.fetch_history()
    answer = next(e.text for e in seen[0] if e.kind == "model_text")
    assert answer == ANSWER
    assert all(_shown(events) == ANSWER for events in seen)
    assert all(_durable(events) == _durable(seen[0]) for events in seen)
    # One poll per wake for all ten (each follower polled for itself before: ten or more).
    assert _polls(history) <= 4
    # No poll answer carries the answer: it is in history once (the model request's result) and the
    # events that repeat it (model_text, turn_finished) stay out of it.
    assert str(history.to_json()).count("word59") <= 1


async def _polls_waiting(handle: Any) -> bool:
    return _polls(await handle.fetch_history()) >= 1


async def test_a_stalled_follower_makes_no_reads_and_holds_no_backlog(wolf, run_worker, client, monkeypatch):
    """While its consumer reads nothing, a follower soon asks for nothing: no describe runs for it,
    and when it reads again it gets the newest text and the turn's events, exactly once."""
    describes = 0
    service = client.workflow_service
    describe = service.describe_workflow_execution

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal describes
        describes += 1
        return await describe(*args, **kwargs)

    monkeypatch.setattr(service, "describe_workflow_execution", counted)
    script = Script(sequence(text(LONG)), chunk_delay=0.05)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest())
        handle = client.get_workflow_handle(workflow_id("default", sid))
        start = await wolf.event_offset(sid)
        events = wolf.events(sid, start)
        await wolf.prompt(sid, "go")
        first: list[Event] = []
        async for _, event in events:  # read up to the first streamed text, then stall
            first.append(event)
            if event.kind == "text_delta":
                break
        stalled = describes
        await wait_for(lambda: _idle(handle, 1), timeout=120)  # the whole turn ran meanwhile
        during = describes - stalled
        rest: list[Event] = []
        async for _, event in events:
            rest.append(event)
            if event.kind == "turn_finished":
                break
        await events.aclose()
        logged = [e.kind for e in await _turn(wolf, sid, start, live=False)]
    # Reads stop STALLED seconds after the follower last asked (before: 20 a second all along).
    assert during <= feed.STALLED / feed.POLL_EVERY + 2
    assert _shown(first + rest) == LONG
    assert _durable(first + rest) == logged  # every durable event once, in order
    assert feed.followers(client, handle.id) is None  # the last follower gone, its reader stopped
