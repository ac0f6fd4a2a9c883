"""Scripted in-process models (pydantic-ai FunctionModel) for workflow logic tests."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaThinkingPart, DeltaToolCall, FunctionModel


class Script:
    """A FunctionModel whose every request is recorded and answered by `decide(requests_so_far)`.

    With `chunk_delay`, it streams: thinking, then text word by word, `chunk_delay` seconds apart,
    then the tool calls; `fail_after(script)` may name a chunk count after which the stream breaks,
    once `before_break()` returns (a test awaits there what it means to see before the break, such as
    a follower showing the text so far, instead of counting on `chunk_delay` being time enough)."""

    def __init__(
        self,
        decide: Callable[[Script], ModelResponse],
        delay: float = 0.0,
        chunk_delay: float | None = None,
        fail_after: Callable[[Script], int | None] = lambda s: None,
        before_break: Callable[[], Awaitable[object]] | None = None,
    ) -> None:
        self.decide = decide
        self.delay = delay
        self.chunk_delay = chunk_delay
        self.fail_after = fail_after
        self.before_break = before_break
        self.requests: list[list[ModelMessage]] = []
        self.offered: list[set[str]] = []
        """The tool names each request offered."""
        self.model = FunctionModel(
            self._answer, stream_function=self._stream if chunk_delay is not None else None
        )

    async def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        self.tools = [t.name for t in info.function_tools]
        self.offered.append(set(self.tools))
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.decide(self)

    async def _stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        response = await self._answer(messages, info)
        chunks: list[Any] = [
            {0: DeltaThinkingPart(content=p.content)} for p in response.parts if isinstance(p, ThinkingPart)
        ]
        for part in response.parts:
            if isinstance(part, TextPart):
                chunks += re.findall(r"\S+\s*|\s+", part.content)
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        if calls:
            chunks.append(
                {
                    i + 1: DeltaToolCall(c.tool_name, c.args_as_json_str(), tool_call_id=c.tool_call_id)
                    for i, c in enumerate(calls)
                }
            )
        broken = self.fail_after(self)
        for n, chunk in enumerate(chunks):
            if broken is not None and n == broken:
                if self.before_break is not None:
                    await self.before_break()
                raise ConnectionError(f"stream broken after {n} chunks")
            if n:
                await asyncio.sleep(self.chunk_delay or 0)
            yield chunk

    @property
    def calls(self) -> int:
        return len(self.requests)


def text(content: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content)])


def tool(name: str, args: dict[str, Any], call_id: str | None = None) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id or f"c-{name}-{id(args)}")])


def tools(*calls: tuple[str, dict[str, Any]]) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart(n, a, tool_call_id=f"c{i}-{n}") for i, (n, a) in enumerate(calls)]
    )


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
