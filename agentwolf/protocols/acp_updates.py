"""A session's events and transcript as ACP `session/update`s (sent by agentwolf/protocols/acp.py).

Streamed text and thinking become `agent_message_chunk` / `agent_thought_chunk` (one message id per
step and attempt, `<turn>.<step>.<attempt>`); a tool call becomes `tool_call` when it starts and
`tool_call_update`s for its approval, its progress and its result. ACP cannot take text back, so a
superseded attempt (a retried model request) gets a thought saying so, marked in `_meta`, and its
retry streams as a new message. `Updates` remembers how much of each step it sent: a delta it has
already sent (a reconnected follower starts the running step over) is never sent twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from acp import (
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message,
    update_agent_thought,
    update_agent_thought_text,
    update_tool_call,
    update_user_message_text,
)
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    ToolCallProgress,
    ToolCallStart,
    ToolCallStatus,
    UserMessageChunk,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from agentwolf.workflows.types import Event

Update = AgentMessageChunk | AgentThoughtChunk | UserMessageChunk | ToolCallStart | ToolCallProgress

TOOL_STATUS: dict[str | None, ToolCallStatus] = {
    None: "completed",
    "success": "completed",
    "failed": "failed",
    "denied": "failed",
    "interrupted": "failed",
}
"""A finished call's `ToolOutcome` as an ACP tool call status."""

TITLE_ARGS = 120
"""Characters of a call's arguments in its title."""


def _meta(**fields: Any) -> dict[str, Any]:
    return {"agentwolf": fields}


def title(tool: str, args: dict[str, Any] | None) -> str:
    shown = json.dumps(args or {}, ensure_ascii=False)
    return f"{tool}({shown if len(shown) <= TITLE_ARGS else shown[:TITLE_ARGS] + '…'})"


def tool_started(call_id: str, tool: str, args: dict[str, Any] | None) -> ToolCallStart:
    return start_tool_call(call_id, title(tool, args), kind="other", status="in_progress", raw_input=args)


def tool_finished(call_id: str, outcome: str | None, text: str) -> ToolCallProgress:
    return update_tool_call(
        call_id, status=TOOL_STATUS.get(outcome, "failed"), content=[tool_content(text_block(text))]
    )


@dataclass
class _Sent:
    attempt: int
    text: int = 0
    thinking: int = 0


@dataclass
class Updates:
    """Events to updates for one connection's view of one session."""

    sent: dict[tuple[str, int], _Sent] = field(default_factory=dict)
    own: list[str] = field(default_factory=list)
    """Prompts this connection sent: the editor shows them already, so their `turn_started` is not
    echoed (a turn prompted elsewhere shows its prompt as a user message)."""

    def of(self, e: Event) -> list[Update]:
        if e.kind in ("text_delta", "thinking_delta"):
            return self._delta(e)
        if e.kind == "attempt_superseded":
            return self._superseded(e)
        if e.kind in ("turn_started", "steer_applied") and e.text:
            if e.kind == "turn_started" and e.text in self.own:
                self.own.remove(e.text)
                return []
            return [update_user_message_text(e.text)]
        call_id = (e.call_id or "").partition("#")[0]
        if e.kind == "tool_call_started" and call_id:
            return [tool_started(call_id, e.tool or "?", e.args)]
        if e.kind == "approval_requested" and call_id:
            return [update_tool_call(call_id, status="pending")]
        if e.kind == "tool_call_finished" and call_id:
            return [tool_finished(call_id, e.outcome, e.text or "")]
        if e.kind == "tool_progress" and call_id:
            return [self._progress(call_id, e)]
        return []

    def _delta(self, e: Event) -> list[Update]:
        key = (e.turn_id or "", e.step or 0)
        sent = self.sent.get(key)
        if sent is None or (e.attempt is not None and e.attempt > sent.attempt):
            sent = self.sent[key] = _Sent(e.attempt or 0)
        thinking = e.kind == "thinking_delta"
        have = sent.thinking if thinking else sent.text
        start, chunk = e.index or 0, e.text or ""
        if start + len(chunk) <= have:
            return []
        chunk = chunk[max(have - start, 0) :]
        if thinking:
            sent.thinking = start + len(e.text or "")
        else:
            sent.text = start + len(e.text or "")
        update = update_agent_thought if thinking else update_agent_message
        chunk_update = update(text_block(chunk))
        chunk_update.message_id = f"{key[0]}.{key[1]}.{sent.attempt}"
        return [chunk_update]

    def _superseded(self, e: Event) -> list[Update]:
        key = (e.turn_id or "", e.step or 0)
        sent = self.sent.get(key)
        if sent is None or sent.attempt != (e.attempt or 0) or not (sent.text or sent.thinking):
            return []
        self.sent[key] = _Sent(sent.attempt + 1)
        note = update_agent_thought_text("(the model request was retried: the text above is superseded)")
        note.field_meta = _meta(superseded=f"{key[0]}.{key[1]}.{sent.attempt}")
        return [note]

    def _progress(self, call_id: str, e: Event) -> ToolCallProgress:
        done = f"{e.progress:g}" if e.progress is not None else ""
        total = f"/{e.total:g}" if e.total is not None else ""
        line = " ".join(part for part in (done + total, e.text or "") if part)
        update = update_tool_call(
            call_id, status="in_progress", content=[tool_content(text_block(line))] if line else None
        )
        update.field_meta = _meta(progress=e.progress, total=e.total, message=e.text)
        return update


def replay(messages: list[ModelMessage]) -> Iterator[Update]:
    """A transcript as the updates that would have shown it (`session/load`)."""
    for message in messages:
        for part in message.parts:
            if isinstance(message, ModelRequest) and isinstance(part, UserPromptPart):
                content = part.content if isinstance(part.content, str) else "[non-text prompt]"
                yield update_user_message_text(content)
            elif isinstance(part, ToolReturnPart):
                outcome = getattr(part, "outcome", None)
                yield tool_finished(part.tool_call_id, outcome, str(part.content))
            elif isinstance(message, ModelResponse) and isinstance(part, TextPart) and part.content:
                yield update_agent_message(text_block(part.content))
            elif isinstance(message, ModelResponse) and isinstance(part, ThinkingPart) and part.content:
                yield update_agent_thought(text_block(part.content))
            elif isinstance(message, ModelResponse) and isinstance(part, ToolCallPart):
                yield tool_started(part.tool_call_id, part.tool_name, part.args_as_dict())
