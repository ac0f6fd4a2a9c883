"""Scripted in-process models (pydantic-ai FunctionModel) for workflow logic tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel


class Script:
    """A FunctionModel whose every request is recorded and answered by `decide(requests_so_far)`."""

    def __init__(self, decide: Callable[[Script], ModelResponse], delay: float = 0.0) -> None:
        self.decide = decide
        self.delay = delay
        self.requests: list[list[ModelMessage]] = []
        self.offered: list[set[str]] = []
        """The tool names each request offered."""
        self.model = FunctionModel(self._answer)

    async def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        self.tools = [t.name for t in info.function_tools]
        self.offered.append(set(self.tools))
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.decide(self)

    @property
    def calls(self) -> int:
        return len(self.requests)


def text(content: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content)])


def tool(name: str, args: dict[str, Any], call_id: str | None = None) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id or f"c-{name}-{id(args)}")])


def tools(*calls: tuple[str, dict[str, Any]]) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=f"c{i}-{n}") for i, (n, a) in enumerate(calls)])


def sequence(*responses: ModelResponse) -> Callable[[Script], ModelResponse]:
    """Answer with `responses` in order, then keep repeating the last one."""
    return lambda s: responses[min(s.calls - 1, len(responses) - 1)]


def user_texts(messages: list[ModelMessage]) -> list[str]:
    return [
        p.content
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart) and isinstance(p.content, str)
    ]
