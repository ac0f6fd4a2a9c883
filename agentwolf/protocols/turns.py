"""One turn of a durable session as the request/answer front ends see it (MCP tools, A2A tasks).

A turn is named by `TurnRef` (session, turn id, an event offset at or before its start), so any process
can follow it again from the session's events. `follow` yields the turn's events, live text included,
until it finishes or waits for a person; `Answer` joins its streamed text exactly (a superseded
attempt's text is dropped, agentwolf/client/live.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from temporalio.client import WorkflowUpdateFailedError
from temporalio.contrib.workflow_streams import PollInput, PollResult
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from agentwolf.access import workflow_id
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.protocols.served import Target
from agentwolf.workflows.session.turn import CUT_MARK, EVENT_TEXT_LIMIT
from agentwolf.workflows.types import EVENTS_TOPIC, Event, PendingApproval, SessionStatus

log = logging.getLogger(__name__)

STREAM_POLL = "__temporal_workflow_stream_poll"
"""The Workflow Stream's query that reads retained events at once (temporalio's WorkflowStream)."""
SCAN_TIMEOUT = 10.0
"""How long looking for a session's latest turn may read its events."""


class Refused(ValueError):
    """The session would not take the prompt or answer (closed, busy, waiting for nothing)."""


@dataclass(frozen=True)
class TurnRef:
    session_id: str
    turn_id: str
    base: int = 0
    """An event offset at or before the turn's `turn_started`."""


@dataclass
class TurnEnd:
    """How a followed turn stopped: finished (`outcome`, `text`) or waiting for approvals."""

    outcome: str | None = None
    text: str | None = None
    waiting: list[PendingApproval] = field(default_factory=list)


async def start(wolf: WolfClient, target: Target, text: str, session_id: str | None = None) -> TurnRef:
    """A new session whose first turn is `text` (it stays open for more)."""
    try:
        session_id = await wolf.start_session(
            target.agent, prompt=text, session_id=session_id, **target.source
        )
    except WorkflowAlreadyStartedError:
        raise Refused(f"session {session_id!r} exists already") from None
    return TurnRef(session_id, "turn-1", 0)


async def prompt(wolf: WolfClient, session_id: str, text: str) -> TurnRef:
    """One more turn on an existing session (queued behind a running one)."""
    base = await wolf.event_offset(session_id)
    try:
        turn_id = await wolf.prompt(session_id, text)
    except WorkflowUpdateFailedError as exc:
        raise Refused(str(getattr(exc.cause, "message", None) or exc.cause or exc)) from None
    except RPCError as exc:
        log.warning("session %r did not take a prompt: %s", session_id, exc)
        raise Refused(f"session {session_id!r} did not take the prompt; retry shortly") from None
    return TurnRef(session_id, turn_id, base)


def same_prompt(asked: str, text: str) -> bool:
    """Whether a turn asked `asked` (its `turn_started` text, cut past EVENT_TEXT_LIMIT) was asked `text`."""
    if len(text) > EVENT_TEXT_LIMIT:
        text = text[:EVENT_TEXT_LIMIT] + CUT_MARK.format(len(text))
    return asked == text


@dataclass(frozen=True)
class Latest:
    """A session's latest turn: what was asked and, once it finished, its end."""

    ref: TurnRef
    prompt: str
    end: Event | None


async def latest(wolf: WolfClient, session_id: str) -> Latest | None:
    """The session's latest started turn (None: none yet, or its events took too long to read)."""
    return await _scan(wolf, session_id, 0, None)


async def started(wolf: WolfClient, ref: TurnRef) -> Latest | None:
    """`ref`'s turn as its events so far tell (None: not started yet, e.g. queued behind another)."""
    return await _scan(wolf, ref.session_id, ref.base, ref.turn_id)


async def first_kept(wolf: WolfClient, session_id: str, offset: int) -> int | None:
    """The offset of the session's first event still kept at or after `offset` (`offset` when none
    came after it; None when all that came is gone). Continue-as-new keeps only the newest
    `events_kept`; the stream's poll query reads what is kept without waiting (a subscription would
    wait for a new event when nothing is kept)."""
    handle = wolf.client.get_workflow_handle(workflow_id(wolf.tenant, session_id))
    batch = await handle.query(
        STREAM_POLL, PollInput(topics=[EVENTS_TOPIC], from_offset=offset), result_type=PollResult
    )
    if batch.items:
        return batch.items[0].offset
    return None if batch.next_offset > offset else offset


def finished(status: SessionStatus, turn_id: str) -> bool:
    """Whether the session has run `turn_id` to its end (turns run one at a time, in order of their
    numbers; `counters.turns` counts finished ones)."""
    return int(turn_id.rsplit("-", 1)[-1]) <= status.counters.turns


async def expired(wolf: WolfClient, status: SessionStatus, ref: TurnRef) -> bool:
    """A finished turn whose events the session no longer keeps: nothing can tell what it did."""
    if not finished(status, ref.turn_id):
        return False
    first = await first_kept(wolf, ref.session_id, ref.base)
    return first is None or (first > ref.base and await started(wolf, ref) is None)


async def _scan(wolf: WolfClient, session_id: str, start: int, turn_id: str | None) -> Latest | None:
    """The last turn started at or after `start` (only `turn_id`, when given), read up to now."""
    end = await wolf.event_offset(session_id)
    found: Latest | None = None
    if end <= start:
        return None
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(SCAN_TIMEOUT):
            async for offset, event in wolf.events(session_id, start, live=False):
                if event.kind == "turn_started" and event.turn_id and turn_id in (None, event.turn_id):
                    found = Latest(TurnRef(session_id, event.turn_id, offset), event.text or "", None)
                elif event.kind == "turn_finished" and found and event.turn_id == found.ref.turn_id:
                    found = Latest(found.ref, found.prompt, event)
                if offset >= end - 1:
                    break
    return found


async def waiting(wolf: WolfClient, session_id: str, event: Event) -> list[PendingApproval]:
    """The calls waiting for a person once `event` asked for the last of them (the calls of a step ask
    one after another); empty before that, or when they were answered already."""
    status = await wolf.status(session_id)
    if status.state != "waiting_approval" or status.turn_id != event.turn_id or not status.pending_approvals:
        return []
    return status.pending_approvals if status.pending_approvals[-1].call_id == event.call_id else []


async def follow(wolf: WolfClient, ref: TurnRef, end: TurnEnd) -> AsyncIterator[Event]:
    """The turn's events from its start, live ones included, until it finishes (or the session
    closes) or waits for approvals; `end` then says which."""
    async for _, event in wolf.events(ref.session_id, ref.base):
        if event.kind == "session_closed":
            end.outcome, end.text = "failed", "the session closed before the turn finished"
            return
        if event.turn_id != ref.turn_id:
            continue
        yield event
        if event.kind == "turn_finished":
            end.outcome, end.text = event.outcome, event.text
            return
        if event.kind == "approval_requested":
            end.waiting = await waiting(wolf, ref.session_id, event)
            if end.waiting:
                return


async def answer(
    wolf: WolfClient, session_id: str, call_id: str, approved: bool, *, always: bool = False
) -> None:
    try:
        if approved:
            await wolf.approve(session_id, call_id, always=always)
        else:
            await wolf.deny(session_id, call_id, reason="denied by the caller")
    except ValueError as exc:
        if isinstance(exc, SessionNotFound):
            raise
        raise Refused(str(exc)) from None


def tool_note(event: Event) -> str | None:
    """What a tool does, in a line for a progress or status message (None: `event` is no tool's)."""
    if event.kind == "tool_call_started":
        return f"calling {event.tool}({json.dumps(event.args or {})[:200]})"
    if event.kind == "tool_progress":
        done = f" {event.progress:g}/{event.total:g}" if event.progress is not None and event.total else ""
        return f"{event.tool}: {event.text or 'working'}{done}"
    if event.kind == "tool_call_finished":
        return f"{event.tool} returned"
    return None


@dataclass
class Answer:
    """A turn's text as streamed: each step's text, a superseded attempt's dropped."""

    steps: dict[int, str] = field(default_factory=dict)

    def feed(self, event: Event) -> str | None:
        """The new text `event` adds (None: none)."""
        step = event.step or 0
        if event.kind == "attempt_superseded":
            self.steps.pop(step, None)
        elif event.kind == "text_delta" and event.text:
            have = self.steps.get(step, "")
            start = event.index or 0
            if start + len(event.text) > len(have):
                chunk = event.text[max(0, len(have) - start) :]
                self.steps[step] = have + chunk
                return chunk
        return None

    @property
    def text(self) -> str:
        return "".join(self.steps[s] for s in sorted(self.steps))
