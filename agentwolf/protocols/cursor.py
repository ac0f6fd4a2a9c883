"""Resumable event streams without server state: an event's id says where a client is.

A cursor is `offset.attempt.text.thinking`: the last durable event delivered (its stream offset),
and how much of the running step's text and thinking (of which attempt) followed it. Resuming from
a cursor re-reads the session's events after that offset and skips what the client has; the live
text of a running step comes back whole from its start (agentwolf/client/live.py), which is what
makes the skip exact. So any `wolf serve` process can resume any client's stream."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from agentwolf.client.live import STEP_ENDS
from agentwolf.client.wolf_client import WolfClient
from agentwolf.workflows.types import LIVE_KINDS, Event

_FORMAT = re.compile(r"^(-?\d+)\.(\d+)\.(\d+)\.(\d+)(?:\.(\d+))?$")
ENDS_TEXT = STEP_ENDS | {"turn_started"}
"""Durable events after which the running step's text is over (any other, such as a hot reload's
`extensions_changed`, can land in the middle of a step: the text goes on after it)."""


@dataclass(frozen=True)
class Cursor:
    offset: int = -1
    attempt: int = 0
    text: int = 0
    thinking: int = 0
    step: int | None = None
    """The step whose attempt's text and thinking the client has that much of (None: no step's,
    or a cursor from before steps were named: then its counts hold only up to the next durable
    event)."""

    def __str__(self) -> str:
        tail = "" if self.step is None else f".{self.step}"
        return f"{self.offset}.{self.attempt}.{self.text}.{self.thinking}{tail}"

    @classmethod
    def parse(cls, value: str) -> Cursor:
        match = _FORMAT.match(value.strip())
        if match is None:
            raise ValueError(f"not an event id of this stream: {value[:40]!r}")
        offset, attempt, text, thinking = map(int, match.groups()[:4])
        step = match.group(5)
        return cls(offset, attempt, text, thinking, None if step is None else int(step))


async def events_after(
    wolf: WolfClient, session_id: str, cursor: Cursor
) -> AsyncIterator[tuple[Cursor, Event]]:
    """The session's events after `cursor`, each with the cursor that resumes after it.

    What the client has of a step's text is keyed by the step and attempt, not by the durable
    offset it followed: a durable event in the middle of a step neither resets it nor makes the
    resumed stream (which re-reads the running step's text from 0) repeat it."""
    skip = cursor
    async for offset, event in wolf.events(session_id, cursor.offset + 1):
        if event.kind not in LIVE_KINDS:
            if event.kind in ENDS_TEXT or cursor.step is None:
                cursor = Cursor(offset)
            else:
                cursor = replace(cursor, offset=offset)
            if event.kind in ENDS_TEXT or skip.step is None:
                skip = Cursor()
            yield cursor, event
            continue
        if event.kind == "tool_progress":
            yield cursor, event
            continue
        if skip.step is not None and event.step != skip.step:
            skip = Cursor()  # the client's step is over: what it has ends there
        if event.kind == "attempt_superseded":
            if skip.attempt == event.attempt:
                skip = Cursor()
            cursor = Cursor(offset, event.attempt or 0, step=event.step)
            yield cursor, event
            continue
        attempt = event.attempt or 0
        if skip.attempt and skip.attempt != attempt and attempt:
            # The client saw an attempt that was superseded while it was away.
            yield (
                cursor,
                Event(
                    kind="attempt_superseded",
                    at=event.at,
                    turn_id=event.turn_id,
                    step=event.step,
                    attempt=skip.attempt,
                ),
            )
            skip = Cursor()
        field = "text" if event.kind == "text_delta" else "thinking"
        have = getattr(skip, field)
        start, chunk = event.index or 0, event.text or ""
        if start + len(chunk) <= have:
            continue  # the client has all of it
        if start < have:
            chunk, start = chunk[have - start :], have
        event = event.model_copy(update={"text": chunk, "index": start})
        if (cursor.step, cursor.attempt) != (event.step, attempt):
            cursor = Cursor(cursor.offset)  # another step's or attempt's counts start at 0
        cursor = replace(
            cursor, offset=offset, attempt=attempt, step=event.step, **{field: start + len(chunk)}
        )
        yield cursor, event
