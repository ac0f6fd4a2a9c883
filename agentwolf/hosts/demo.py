"""The offline demo model (`local:demo`): a deterministic script that shows the product working
without a provider. For "what time is it in <city>?" it does what a real model would with the
bundled config: loads the `time-zones` skill, reads its zone table, calls the time tool with the
city's zone and answers in a sentence. Asked for a typed result (a job's `output`), it fills the
schema. It streams its answer like a real provider. How to use a real model is said by the live view
(cli/live_view.py), never in the answer: /v1 and MCP clients get the answer alone.

`local:slow` is the same script thinking `THINK_FOR` seconds before each answer, so steering,
interrupting and approving a running turn can be seen (and tested) offline."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

WORD_EVERY = 0.03
"""Seconds between streamed words: the demo streams at a pace people can see."""
THINK_FOR = 5.0
"""Seconds `local:slow` waits before each answer: time to type `wolf steer` or `wolf interrupt`."""
SKILL = "time-zones"
ZONES_FILE = "zones.md"


def demo_model() -> FunctionModel:
    return FunctionModel(_answer, stream_function=_stream, model_name="demo")


def slow_model() -> FunctionModel:
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(THINK_FOR)
        return _answer(messages, info)

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        await asyncio.sleep(THINK_FOR)
        async for chunk in _stream(messages, info):
            yield chunk

    return FunctionModel(answer, stream_function=stream, model_name="slow")


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    prompt, results = _this_turn(messages)
    tools = {t.name for t in info.function_tools}
    time_tool = next((t for t in sorted(tools) if t.endswith("get_current_time")), None)
    city = _city(prompt)
    step = len(messages)
    if time_tool is None or city is None:
        if info.output_tools:
            return _final(info, f"Offline demo answer to: {prompt}", step)
        return _text(
            "I am AgentWolf's offline demo model: I can tell the time in a city "
            '(try: wolf submit "What time is it in Tokyo?" --follow).'
        )
    if "load_skill" in tools and "load_skill" not in results:
        return _call("load_skill", {"name": SKILL}, step)
    if "read_skill_file" in tools and "read_skill_file" not in results and "load_skill" in results:
        return _call("read_skill_file", {"name": SKILL, "path": ZONES_FILE}, step)
    if time_tool not in results:
        zone = _zone(city, results.get("read_skill_file", ""))
        return _call(time_tool, {"timezone": zone}, step)
    return _final(info, _sentence(results[time_tool], city), step)


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    response = _answer(messages, info)
    for part in response.parts:
        if isinstance(part, TextPart):
            for word in re.findall(r"\S+\s*|\s+", part.content):
                await asyncio.sleep(WORD_EVERY)
                yield word
        elif isinstance(part, ToolCallPart):
            yield {0: DeltaToolCall(part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id)}


def _this_turn(messages: list[ModelMessage]) -> tuple[str, dict[str, str]]:
    """The turn's prompt and the results of the tools called since (by tool name)."""
    prompt = ""
    results: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                prompt, results = part.content, {}
            elif isinstance(part, ToolReturnPart):
                results[part.tool_name] = part.model_response_str()
    return prompt, results


_CITY = re.compile(r"\bin ([A-Z][\w.'/-]*(?: [A-Z][\w.'/-]*)*)")  # a city, or a zone: Europe/Paris


def _city(prompt: str) -> str | None:
    match = _CITY.search(prompt)
    return match.group(1).rstrip(".?!") if match else None


def _zone(city: str, table: str) -> str:
    """The city's zone from the skill's table (`| City | Zone |`); an IANA name as given; else UTC."""
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].lower() == city.lower():
            return cells[1]
    return city if "/" in city else "UTC"


def _sentence(result: str, city: str) -> str:
    try:
        data = json.loads(result)
        at = datetime.fromisoformat(data["datetime"])
    except (ValueError, KeyError, TypeError):
        return f"The time tool did not answer as expected for {city}: {result[:200]}"
    offset, zone = at.strftime("%z"), data.get("timezone", "UTC")
    day = data.get("day_of_week", at.strftime("%A"))
    if zone == "UTC" and city.upper() != "UTC":
        return (
            f"I do not know the time zone of {city} (the time-zones skill lists the common ones);"
            f" in UTC it is {at:%H:%M} on {day}."
        )
    return f"It is {at:%H:%M} on {day} in {zone} (UTC{offset[:3]}:{offset[3:]})."


def _final(info: AgentInfo, content: str, step: int) -> ModelResponse:
    """The answer: as text, or through the output tool when a typed result is asked for."""
    if not info.output_tools:
        return _text(content)
    tool = info.output_tools[0]
    return _call(tool.name, _fill(tool.parameters_json_schema, content), step)


def _fill(schema: dict[str, Any], text: str) -> Any:
    """A value that fits `schema`: enums and constants take their first value, strings the answer."""
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    if options := schema.get("anyOf") or schema.get("oneOf"):
        return _fill(options[0], text)
    kind = schema.get("type", "object")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        return {name: _fill(sub, text) for name, sub in schema.get("properties", {}).items()}
    if kind == "array":
        return []
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    return text


def _text(content: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content)], model_name="demo")


def _call(tool: str, args: dict[str, Any], step: int) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart(tool, args, tool_call_id=f"demo-{step}-{tool}")], model_name="demo"
    )
