"""Conditions tests poll with `tests.conftest.wait_for`: a session's state, a process's life."""

from __future__ import annotations

import asyncio
from collections.abc import Sized
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, ToolReturnPart

from tests.support.processes import alive as alive


async def idle(wolf: Any, sid: str, turns: int = 0) -> bool:
    """The session is idle with at least `turns` turns done."""
    status = await wolf.status(sid)
    return status.state == "idle" and status.counters.turns >= turns


async def in_state(wolf: Any, sid: str, state: str) -> bool:
    return (await wolf.status(sid)).state == state


async def settled(items: Sized, seconds: float = 1.5, timeout: float = 60.0) -> None:
    """Wait until `items` (filled in the background) has not grown for `seconds`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        before = len(items)
        await asyncio.sleep(seconds)
        if len(items) == before:
            return
    raise AssertionError(f"still growing after {timeout} s: {len(items)} items")


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
