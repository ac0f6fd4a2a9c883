"""A2A tasks of durable turns: task ids (`TURN.BASE.SESSION`), the messages a turn's prompt and
approvals travel in, and a turn's session events translated to task events (the protocol:
a2a.py's docstring)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from a2a.helpers import get_data_parts, new_data_part, new_text_part
from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotFoundError,
)

from agentwolf.client.wolf_client import WolfClient
from agentwolf.protocols import turns
from agentwolf.workflows.types import Event, PendingApproval

MAX_TEXT = 256 * 1024
"""Characters a message may have (a bigger one is refused, not sent to the session)."""
ANSWER = "answer"
"""The artifact holding a turn's answer."""
_TASK_ID = re.compile(r"^(turn-\d+)\.(\d+)\.([^/]+)$")
OUTCOMES = {
    "completed": TaskState.TASK_STATE_COMPLETED,
    "interrupted": TaskState.TASK_STATE_CANCELED,
    "limit": TaskState.TASK_STATE_FAILED,
    "failed": TaskState.TASK_STATE_FAILED,
}
TERMINAL = {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_CANCELED, TaskState.TASK_STATE_FAILED}
_DECISIONS = {"approve": (True, False), "approve always": (True, True), "deny": (False, False)}

A2AEvent = Task | TaskStatusUpdateEvent | TaskArtifactUpdateEvent


def task_id(ref: turns.TurnRef) -> str:
    return f"{ref.turn_id}.{ref.base}.{ref.session_id}"


def parse_task_id(value: str) -> turns.TurnRef:
    match = _TASK_ID.match(value)
    if match is None:
        raise no_task(value)
    turn, base, session = match.groups()
    return turns.TurnRef(session, turn, int(base))


def no_task(value: str) -> TaskNotFoundError:
    return TaskNotFoundError(message=f"task {value[:80]!r} not found")


def agent_message(id: str, text: str, data: Any = None) -> Message:
    parts = [new_text_part(text)] + ([new_data_part(data)] if data is not None else [])
    return Message(message_id=id, role=Role.ROLE_AGENT, parts=parts)


def approvals_message(ref: turns.TurnRef, waiting: list[PendingApproval]) -> Message:
    calls = ", ".join(f"{p.tool} (call {p.call_id})" for p in waiting)
    return agent_message(
        f"{task_id(ref)}:approval:{waiting[-1].call_id}",
        f"Waiting for approval: {calls}. Answer on this task: approve, approve always or deny.",
        {"approvals": [p.model_dump(mode="json", include={"call_id", "tool", "args"}) for p in waiting]},
    )


@dataclass
class Translation:
    """A turn's session events as A2A task events (one per followed stream)."""

    ref: turns.TurnRef
    id: str
    answer: turns.Answer = field(default_factory=turns.Answer)

    def status(self, state: TaskState, message: Message | None = None) -> TaskStatusUpdateEvent:
        return TaskStatusUpdateEvent(
            task_id=self.id, context_id=self.ref.session_id, status=TaskStatus(state=state, message=message)
        )

    def chunk(self, text: str, *, append: bool, last: bool = False) -> TaskArtifactUpdateEvent:
        return TaskArtifactUpdateEvent(
            task_id=self.id,
            context_id=self.ref.session_id,
            artifact=Artifact(artifact_id=ANSWER, name=ANSWER, parts=[new_text_part(text)]),
            append=append,
            last_chunk=last,
        )

    def of(self, seq: int, event: Event) -> A2AEvent | None:
        """`event` (the stream's `seq`th) as a task event, if it says something to the client."""
        if event.kind in ("text_delta", "attempt_superseded"):
            had = self.answer.text
            new = self.answer.feed(event)
            if event.kind == "attempt_superseded":
                return self.chunk(self.answer.text, append=False)
            # The first chunk starts the artifact (append false: it replaces what a client had).
            return None if new is None else self.chunk(new, append=bool(had))
        if event.kind == "turn_started":
            return self.status(TaskState.TASK_STATE_WORKING)
        note = turns.tool_note(event)
        if note is None:
            return None
        data = {"tool": event.tool, "call_id": event.call_id, "event": event.kind}
        message = agent_message(f"{self.id}:{seq}:{event.kind}", note, data)
        return self.status(TaskState.TASK_STATE_WORKING, message)

    def end(self, end: turns.TurnEnd) -> list[A2AEvent]:
        if end.waiting:
            return [
                self.status(TaskState.TASK_STATE_INPUT_REQUIRED, approvals_message(self.ref, end.waiting))
            ]
        state = OUTCOMES.get(end.outcome or "failed", TaskState.TASK_STATE_FAILED)
        events: list[A2AEvent] = []
        if state == TaskState.TASK_STATE_COMPLETED and end.text and end.text != self.answer.text:
            events.append(self.chunk(end.text, append=False, last=True))  # the answer is the last step's
        message = None
        if state != TaskState.TASK_STATE_COMPLETED and end.text:
            message = agent_message(f"{self.id}:end", end.text)
        events.append(self.status(state, message))
        return events


def new_task(
    ref: turns.TurnRef,
    state: TaskState,
    *,
    answer: str | None = None,
    message: Message | None = None,
    prompt: str | None = None,
) -> Task:
    id = task_id(ref)
    task = Task(id=id, context_id=ref.session_id, status=TaskStatus(state=state, message=message))
    if answer:
        task.artifacts.append(Artifact(artifact_id=ANSWER, name=ANSWER, parts=[new_text_part(answer)]))
    if prompt is not None:
        task.history.append(
            Message(
                message_id=f"{id}:prompt",
                context_id=ref.session_id,
                task_id=id,
                role=Role.ROLE_USER,
                parts=[new_text_part(prompt)],
            )
        )
    return task


def prompt_text(message: Message) -> str:
    """A new turn's prompt: the text parts, data parts as JSON."""
    texts = []
    for part in message.parts:
        if part.HasField("text"):
            texts.append(part.text)
        elif part.HasField("data"):
            texts.append(json.dumps(get_data_parts([part])[0]))
        else:
            raise ContentTypeNotSupportedError(message="send text or data parts (files are not supported)")
    text = "\n".join(texts)
    if not text.strip() or len(text) > MAX_TEXT:
        raise InvalidParamsError(message=f"a message needs text, at most {MAX_TEXT} characters")
    return text


def decision(message: Message) -> tuple[bool, bool, str | None]:
    """(approve, always, call_id or None for all) from an answer on an input-required task."""
    for data in get_data_parts(list(message.parts)):
        if isinstance(data, dict) and isinstance(data.get("approve"), bool):
            call_id = data.get("call_id")
            return data["approve"], data.get("always") is True, call_id if isinstance(call_id, str) else None
    text = " ".join(p.text for p in message.parts if p.HasField("text")).strip().lower()
    if text in _DECISIONS:
        return (*_DECISIONS[text], None)
    raise InvalidParamsError(
        message='the task waits for approval: answer "approve", "approve always" or "deny", '
        'or a data part {"approve": true|false}'
    )


def ended(ref: turns.TurnRef, outcome: str | None, text: str | None, prompt: str | None = None) -> Task:
    state = OUTCOMES.get(outcome or "failed", TaskState.TASK_STATE_FAILED)
    if state == TaskState.TASK_STATE_COMPLETED:
        return new_task(ref, state, answer=text, prompt=prompt)
    message = agent_message(f"{task_id(ref)}:end", text) if text else None
    return new_task(ref, state, message=message, prompt=prompt)


async def follow(wolf: WolfClient, ref: turns.TurnRef, translation: Translation) -> AsyncIterator[A2AEvent]:
    end = turns.TurnEnd()
    count = 0
    async for event in turns.follow(wolf, ref, end):
        count += 1
        update = translation.of(count, event)
        if update is not None:
            yield update
    for update in translation.end(end):
        yield update
