"""Conditions tests poll with `tests.conftest.wait_for`: a session's state, a process's life."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart


async def idle(wolf: Any, sid: str, turns: int = 0) -> bool:
    """The session is idle with at least `turns` turns done."""
    status = await wolf.status(sid)
    return status.state == "idle" and status.counters.turns >= turns


async def in_state(wolf: Any, sid: str, state: str) -> bool:
    return (await wolf.status(sid)).state == state


def alive(pid: int) -> bool:
    """The process runs (a zombie does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def tool_returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]


def tool_call_ids(messages: list[ModelMessage]) -> list[str]:
    """The ids of the tool calls the model's responses asked for, in order."""
    return [
        p.tool_call_id
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    ]
