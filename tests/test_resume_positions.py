"""A resumed stream gives a client only what it lacks when a durable event landed in the middle of a
step (a hot reload's `extensions_changed`, a dropped steer's note): what it has of a step's text is
the step's, not the durable offset's. The real TurnView (OpenAI streams) and events_after (AG-UI
cursors), on event sequences shaped as agentwolf/client/live.py produces them: live text whole from
the step's start again, filed under the newest durable offset."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

from agentwolf.protocols.cursor import Cursor, events_after
from agentwolf.protocols.openai_api.targeting import ResponseId
from agentwolf.protocols.openai_api.turn_view import TurnView
from agentwolf.workflows.types import Event

AT = datetime.now(UTC)


def e(kind: str, step: int, **fields: Any) -> Event:
    return Event(kind=kind, at=AT, turn_id="turn-1", step=step, **fields)


# What a live follower read first: text, a durable event of the running step, more text, the end.
FIRST = [
    (0, e("turn_started", 0, text="go")),
    (0, e("text_delta", 1, attempt=1, index=0, text="Hello ")),
    (1, e("extensions_changed", 1, text="mcp:tools changed")),
    (1, e("text_delta", 1, attempt=1, index=6, text="world")),
    (2, e("model_text", 1, text="Hello world")),
    (3, e("turn_finished", 1, text="Hello world", outcome="completed")),
]
RUNNING = [FIRST[0], FIRST[2], (1, e("text_delta", 1, attempt=1, index=0, text="Hello world")), *FIRST[4:]]
"""Resumed while the step still streamed: its text comes whole again, after the newest durable event."""
ENDED = [FIRST[0], FIRST[2], (2, e("text_delta", 1, index=0, text="Hello world")), *FIRST[4:]]
"""Resumed after the step ended: its text comes whole right before its model_text."""


def _openai(events: list[tuple[int, Event]], after: int = -1, upto: int | None = None) -> list[Any]:
    view = TurnView(ResponseId("s", 1, 0), "a", after=after)
    outs = view.start()
    for offset, event in events[:upto]:
        outs += view.feed(offset, event)
    return outs


def _text(outs: list[Any]) -> str:
    return "".join(body["delta"] for _, kind, body in outs if kind == "response.output_text.delta")


def _added(outs: list[Any]) -> list[str]:
    return [body["item"]["id"] for _, kind, body in outs if kind == "response.output_item.added"]


def test_an_openai_stream_resumed_across_a_mid_step_event_repeats_nothing():
    for stop in (2, 4):  # after "Hello ", after "world" (which followed the durable event)
        shown = _openai(FIRST, upto=stop)
        for replay in (RUNNING, ENDED):
            rest = _openai(replay, after=shown[-1][0])
            assert _text(shown) + _text(rest) == "Hello world", (stop, replay)
            assert _added(shown + rest) == ["msg_s_1_1"], (stop, replay)
            assert all(seq > shown[-1][0] for seq, _, _ in rest)


def test_the_next_step_text_after_a_resume_is_whole():
    """What the client has counts for its own step only: the next step's text is not trimmed."""
    events = [
        *FIRST[:2],
        (1, e("extensions_changed", 1)),
        (2, e("model_text", 1, text="Hello ")),
        (3, e("tool_call_started", 1, call_id="c1", tool="add", args={})),
        (4, e("tool_call_finished", 1, call_id="c1", tool="add", text="3", outcome="success")),
        (4, e("text_delta", 2, attempt=1, index=0, text="Three.")),
        (5, e("model_text", 2, text="Three.")),
        (6, e("turn_finished", 2, text="Three.", outcome="completed")),
    ]
    shown = _openai(events, upto=2)
    replay = [events[0], events[2], (2, e("text_delta", 1, index=0, text="Hello ")), *events[3:]]
    rest = _openai(replay, after=shown[-1][0])
    assert _text(shown + rest) == "Hello Three."
    assert _added(shown + rest) == ["msg_s_1_1", "mcp_c1", "msg_s_1_2"]


class _Events:
    """WolfClient.events over a fixed sequence (what the session's feed would yield from an offset)."""

    def __init__(self, events: list[tuple[int, Event]]) -> None:
        self.sequence = events

    async def events(self, session_id: str, from_offset: int) -> AsyncIterator[tuple[int, Event]]:
        for offset, event in self.sequence:
            if offset >= from_offset or event.kind == "text_delta":  # live text under an older offset
                yield offset, event


async def _agui(events: list[tuple[int, Event]], cursor: Cursor) -> list[tuple[Cursor, Event]]:
    return [item async for item in events_after(_Events(events), "s", cursor)]  # type: ignore[arg-type]


async def test_an_agui_cursor_keeps_the_step_text_across_a_mid_step_event():
    shown = await _agui(FIRST[:4], Cursor())
    assert [str(c) for c, _ in shown] == ["0.0.0.0", "0.1.6.0.1", "1.1.6.0.1", "1.1.11.0.1"]
    for stop in (2, 3, 4):  # after "Hello ", after the durable event, after "world"
        have = "".join(ev.text or "" for _, ev in shown[:stop] if ev.kind == "text_delta")
        for replay in (RUNNING, ENDED):
            rest = await _agui(replay, shown[stop - 1][0])
            more = "".join(ev.text or "" for _, ev in rest if ev.kind == "text_delta")
            assert have + more == "Hello world", (stop, replay)
            assert not any(ev.kind == "attempt_superseded" for _, ev in rest)


async def test_a_cursor_from_before_steps_were_named_still_parses():
    assert Cursor.parse("4.1.6.0") == Cursor(4, 1, 6, 0)
    assert Cursor.parse("4.1.6.0.2") == Cursor(4, 1, 6, 0, 2)
    assert str(Cursor(4, 1, 6, 0)) == "4.1.6.0" and str(Cursor(4, 1, 6, 0, 2)) == "4.1.6.0.2"
