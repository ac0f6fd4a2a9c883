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

from agentwolf.client.wolf_client import WolfClient
from agentwolf.workflows.types import LIVE_KINDS, Event

_FORMAT = re.compile(r"^(-?\d+)\.(\d+)\.(\d+)\.(\d+)$")


@dataclass(frozen=True)
class Cursor:
    offset: int = -1
    attempt: int = 0
    text: int = 0
    thinking: int = 0

    def __str__(self) -> str:
        return f"{self.offset}.{self.attempt}.{self.text}.{self.thinking}"

    @classmethod
    def parse(cls, value: str) -> Cursor:
        match = _FORMAT.match(value.strip())
        if match is None:
            raise ValueError(f"not an event id of this stream: {value[:40]!r}")
        offset, attempt, text, thinking = map(int, match.groups())
        return cls(offset, attempt, text, thinking)


async def events_after(
    wolf: WolfClient, session_id: str, cursor: Cursor
) -> AsyncIterator[tuple[Cursor, Event]]:
    """The session's events after `cursor`, each with the cursor that resumes after it."""
    skip = cursor
    async for offset, event in wolf.events(session_id, cursor.offset + 1):
        if event.kind not in LIVE_KINDS:
            skip = Cursor()
            cursor = Cursor(offset)
            yield cursor, event
            continue
        if event.kind == "attempt_superseded":
            if skip.attempt == event.attempt:
                skip = Cursor()
            cursor = Cursor(offset, event.attempt or 0)
            yield cursor, event
            continue
        if event.kind == "tool_progress":
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
        cursor = replace(cursor, offset=offset, attempt=attempt, **{field: start + len(chunk)})
        yield cursor, event
