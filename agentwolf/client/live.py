"""A follower's view of a session: its durable events merged with live output.

Durable events come from the session's Workflow Stream. Live output (streamed model text, tool
progress) never enters history: running activities carry it in their heartbeat details
(agentwolf/activities/live.py), which the session's feed reads with `describe` while a turn runs
(agentwolf/client/feed.py: one reader per session per process) and this module turns into
`text_delta`, `thinking_delta`, `attempt_superseded` and `tool_progress` events.

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

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowHandle

from agentwolf.client.feed import Snapshot, attached
from agentwolf.workflows.contracts import LiveText, LiveTool
from agentwolf.workflows.types import Event, EventKind

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
    waiting: str | None = None


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
        if live.waiting != shown.waiting:  # the request waits for its provider's limits (hosts/quotas.py)
            shown.waiting = live.waiting
            if live.waiting:
                until = f", resumes at {live.resumes_at:%H:%M:%S} UTC" if live.resumes_at else ""
                out.append(
                    Event(
                        kind="rate_limited",
                        at=at,
                        turn_id=key[0],
                        step=key[1],
                        attempt=current,
                        text=live.waiting + until,
                    )
                )
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
                tool=self.tools[live.call_id][0] if live.call_id in self.tools else live.tool,
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

    Read through the session's feed in this process (agentwolf/client/feed.py), shared with its
    other followers; nothing is read ahead for this follower while its consumer does not ask.
    `running`: the turn and step the session ran when the follower started (their live text shows
    even if the durable events before it lie before `from_offset`)."""
    async with attached(client, handle.id, from_offset) as feed:
        caught_up = await feed.caught_up() if live else 0
        merge, offset, last, seen = Merge(), from_offset, from_offset - 1, 0
        if running is not None:  # its own step's text may show; the next waits for this step's events
            merge.answered[running[0]] = running[1] - 1
        while True:
            changed = feed.changed()
            items = await feed.read(offset)
            for item_offset, event in items:
                for out in merge.durable(event) if live else [event]:
                    yield (item_offset if out is event else last), out
                last, offset = item_offset, item_offset + 1
            if items:
                continue
            if feed.failure is not None:
                raise feed.failure
            if feed.ended:
                return
            snapshot = feed.live
            if live and snapshot is not None and snapshot.version > seen and last + 1 >= caught_up:
                seen = snapshot.version
                for out in _live_events(merge, snapshot):
                    yield last, out
                continue
            await feed.wait(changed, live)


def _live_events(merge: Merge, snapshot: Snapshot) -> list[Event]:
    out: list[Event] = []
    for activity in snapshot.activities:
        if isinstance(activity.details, LiveText):
            out.extend(merge.text(activity.details, activity.attempt, snapshot.at))
        else:
            elapsed = int((snapshot.at - activity.started) / timedelta(milliseconds=1))
            out.extend(merge.tool(activity.details, elapsed, snapshot.at))
    return out
