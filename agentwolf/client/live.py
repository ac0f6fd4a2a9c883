"""A follower's view of a session: its durable events merged with live output.

Durable events come from the session's Workflow Stream. Live output (streamed model text, tool
progress) never enters history: running activities carry it in their heartbeat details
(agentwolf/activities/live.py), which this module reads with `describe` while a turn runs and turns
into `text_delta`, `thinking_delta`, `attempt_superseded` and `tool_progress` events.

What a consumer may rely on (each step keyed by (turn_id, step)):
- a step's `text_delta`s, minus those of superseded attempts, join to exactly its `model_text`;
  the last delta (or the only one, with `attempt` None, when no live text was seen, as for a
  model that does not stream) comes right before it;
- `index` is where a delta starts in its attempt's text, so a consumer that reconnects (which
  starts the running step's text from 0 again) can skip what it already has;
- `attempt_superseded` means: drop that attempt's text and thinking (a retried request, a worker
  lost mid-stream, an interrupt);
- live events carry the offset of the last durable event before them.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.service import RPCError

from agentwolf.workflows.contracts import LiveText, LiveTool
from agentwolf.workflows.types import EVENTS_TOPIC, STATE_ATTR, Event, EventKind

POLL_EVERY = 0.05
"""Seconds between reads of the running activities while a turn runs."""
IDLE_CHECK = 5.0
"""While idle, a read every this many seconds at most (a durable event wakes the reader at once)."""

STEP_ENDS = frozenset(
    {
        "model_text",
        "tool_call_started",
        "approval_requested",
        "child_started",
        "interrupted",
        "error",
        "limit_reached",
        "turn_finished",
        "session_closed",
    }
)
"""Durable events that come only after their step's model request ended: its live text is over."""

Key = tuple[str, int]


@dataclass
class _Shown:
    attempt: int
    text: str = ""
    thinking: int = 0


@dataclass
class Merge:
    """Turns durable events and heartbeat snapshots into one consistent event sequence."""

    shown: dict[Key, _Shown] = field(default_factory=dict)
    closed: set[Key] = field(default_factory=set)
    progress: dict[str, LiveTool] = field(default_factory=dict)
    tools: dict[str, tuple[str, Key]] = field(default_factory=dict)
    """Running tool calls (from `tool_call_started`): name and step, by call id."""
    held: dict[Key, tuple[LiveText, int]] = field(default_factory=dict)
    """Live text of a step that arrived before the durable stream reached it (durable events trail
    live ones by up to a poll): shown once it has."""
    answered: dict[str, int] = field(default_factory=dict)
    """The last step of each turn whose model response the durable stream has shown (its text or
    its tool calls; `turn_started` counts as step 0), or the step before the one that ran when the
    follower started (whose events came before the follower's offset)."""

    def durable(self, event: Event) -> list[Event]:
        """`event`, preceded by what ends the live text of the steps it closes."""
        out: list[Event] = []
        if event.kind in STEP_ENDS and event.turn_id is not None:
            for key in [k for k in self.shown if k[0] == event.turn_id and k[1] <= (event.step or 0)]:
                shown = self.shown.pop(key)
                final = _uncut(event.text or "")
                if (
                    event.kind == "model_text"
                    and key[1] == event.step
                    and (
                        final.startswith(shown.text) or (final != event.text and shown.text.startswith(final))
                    )
                ):
                    rest = final[len(shown.text) :]
                    if rest:
                        out.append(_delta("text_delta", key, shown.attempt, len(shown.text), rest, event.at))
                    self.closed.add(key)
                    continue
                if shown.text or shown.thinking:
                    out.append(_superseded(key, shown.attempt, event.at))
            key = (event.turn_id, event.step or 0)
            if event.kind == "model_text" and key not in self.closed and event.text:
                out.append(_delta("text_delta", key, None, 0, event.text, event.at))
            self.closed.add(key)
        if event.kind == "tool_call_started" and event.call_id and event.tool and event.turn_id:
            self.tools[event.call_id] = (event.tool, (event.turn_id, event.step or 0))
        if event.turn_id is not None and (event.kind in STEP_ENDS or event.kind == "turn_started"):
            step = 0 if event.kind == "turn_started" else event.step or 0
            self.answered[event.turn_id] = max(self.answered.get(event.turn_id, 0), step)
        if event.kind == "tool_call_finished" and event.call_id:
            self.progress.pop(event.call_id, None)
            self.tools.pop(event.call_id, None)
        if event.kind in ("turn_finished", "session_closed"):
            self.held.clear()
        released: list[Event] = []
        for key in [k for k in self.held if not self._blocked(k)]:
            released.extend(self.text(*self.held.pop(key), event.at))
        return [*out, event, *released]

    def _blocked(self, key: Key) -> bool:
        """The durable stream has not shown the response of the step before this one yet, or tool
        calls of an earlier step still run as far as it says: this step's text would come out of order."""
        if self.answered.get(key[0], -1) < key[1] - 1:
            return True
        return any(turn == key[0] and step < key[1] for _, (turn, step) in self.tools.values())

    def text(self, live: LiveText, pending_attempt: int, at: datetime) -> list[Event]:
        """Events for a model request's heartbeat details (`pending_attempt`: the attempt the server
        runs now, ahead of the details while a retry has not heartbeated yet)."""
        key = (live.turn_id, live.step)
        if key in self.closed:
            return []
        if self._blocked(key):
            self.held[key] = (live, pending_attempt)
            return []
        out: list[Event] = []
        shown = self.shown.get(key)
        current = max(live.attempt, pending_attempt)
        if shown is not None and shown.attempt < current:
            if shown.text or shown.thinking:
                out.append(_superseded(key, shown.attempt, at))
            shown = None
        if shown is None:
            shown = self.shown[key] = _Shown(current)
        if live.attempt < current:  # the previous attempt's details, still on the pending activity
            return out
        text_end = live.text_start + len(live.text)
        if text_end > len(shown.text):
            start = max(len(shown.text), live.text_start)
            chunk = live.text[start - live.text_start :]
            out.append(_delta("text_delta", key, current, start, chunk, at))
            shown.text = shown.text.ljust(start, "\0")[:start] + chunk  # a gap (past the window) stays a gap
        thinking_end = live.thinking_start + len(live.thinking)
        if thinking_end > shown.thinking:
            start = max(shown.thinking, live.thinking_start)
            out.append(
                _delta(
                    "thinking_delta", key, current, start, live.thinking[start - live.thinking_start :], at
                )
            )
            shown.thinking = thinking_end
        return out

    def tool(self, live: LiveTool, elapsed_ms: int, at: datetime) -> list[Event]:
        if self.progress.get(live.call_id) == live:
            return []
        self.progress[live.call_id] = live
        return [
            Event(
                kind="tool_progress",
                at=at,
                call_id=live.call_id,
                tool=self.tools[live.call_id][0] if live.call_id in self.tools else None,
                attempt=live.attempt,
                progress=live.progress,
                total=live.total,
                text=live.message,
                duration_ms=elapsed_ms,
            )
        ]


_CUT = re.compile(r"\.\.\. \[\d+ chars\]$")


def _uncut(text: str) -> str:
    """An event text without the workflow's cut mark (a model text past 64 KiB is cut; the deltas
    that showed it whole stand)."""
    match = _CUT.search(text)
    return text[: match.start()] if match else text


def _delta(kind: EventKind, key: Key, attempt: int | None, index: int, text: str, at: datetime) -> Event:
    return Event(kind=kind, at=at, turn_id=key[0], step=key[1], attempt=attempt, index=index, text=text)


def _superseded(key: Key, attempt: int, at: datetime) -> Event:
    return Event(kind="attempt_superseded", at=at, turn_id=key[0], step=key[1], attempt=attempt)


async def follow(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    from_offset: int,
    *,
    live: bool = True,
    running: tuple[str, int] | None = None,
) -> AsyncIterator[tuple[int, Event]]:
    """The session's events from `from_offset` on (see the module docstring); ends when it ends.

    `running`: the turn and step the session ran when the follower started (their live text shows
    even if the durable events before it lie before `from_offset`)."""
    stream = WorkflowStreamClient.create(client, handle.id)
    if not live:
        async for item in stream.subscribe(EVENTS_TOPIC, from_offset, result_type=Event):
            yield item.offset, item.data
        return
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    wake = asyncio.Event()
    caught_up = await stream.get_offset()
    """Live output waits until the durable events before it have been replayed."""

    async def read_durable() -> None:
        failure: BaseException | None = None
        try:
            async for item in stream.subscribe(EVENTS_TOPIC, from_offset, result_type=Event):
                await queue.put(("durable", item))
                wake.set()
        except Exception as exc:  # noqa: BLE001 - raised to the consumer below
            failure = exc
        await queue.put(("end", failure))

    tasks = [asyncio.create_task(read_durable()), asyncio.create_task(_read_live(handle, queue, wake))]
    merge, offset = Merge(), from_offset - 1
    if running is not None:  # its own step's text may show; the next waits for this step's events
        merge.answered[running[0]] = running[1] - 1
    try:
        while True:
            kind, item = await queue.get()
            if kind == "end":
                if item is not None:
                    raise item
                return
            if kind == "durable":
                for event in merge.durable(item.data):
                    yield (item.offset if event is item.data else offset), event
                offset = item.offset
            elif offset + 1 >= caught_up:
                for event in await _live_events(client, merge, item):
                    yield offset, event
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _read_live(
    handle: WorkflowHandle[Any, Any], queue: asyncio.Queue[tuple[str, Any]], wake: asyncio.Event
) -> None:
    """Describe the session while a turn runs and queue what its running activities report."""
    while True:
        wake.clear()
        try:
            described = await handle.describe()
        except RPCError:  # a passing server hiccup: followers do not die of it
            await asyncio.sleep(IDLE_CHECK / 10)
            continue
        if described.status not in (
            WorkflowExecutionStatus.RUNNING,
            WorkflowExecutionStatus.CONTINUED_AS_NEW,
        ):
            return
        pending = list(described.raw_description.pending_activities)
        if pending:
            await queue.put(("live", pending))
        if pending or described.typed_search_attributes.get(STATE_ATTR) == "running":
            await asyncio.sleep(POLL_EVERY)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), IDLE_CHECK)


async def _live_events(client: Client, merge: Merge, pending: list[Any]) -> list[Event]:
    now = datetime.now(UTC)
    out: list[Event] = []
    for activity in pending:
        name = activity.activity_type.name
        if name not in ("wolf.model_request", "wolf.call_tool") or not activity.heartbeat_details.payloads:
            continue
        details_type = LiveText if name == "wolf.model_request" else LiveTool
        try:
            (details,) = await client.data_converter.decode(
                activity.heartbeat_details.payloads, [details_type]
            )
        except Exception:  # noqa: BLE001, S112 - details of another version's shape: nothing live to show
            continue
        if isinstance(details, LiveText):
            out.extend(merge.text(details, activity.attempt, now))
        else:
            started = (
                activity.last_started_time.ToDatetime(UTC) if activity.HasField("last_started_time") else now
            )
            elapsed = int((now - started) / timedelta(milliseconds=1))
            out.extend(merge.tool(details, elapsed, now))
    return out
