"""The scripted OpenAI server streams as OpenAI does: pydantic-ai's real Chat Completions and Responses
models, through `pydantic_ai.direct.model_request_stream`, without Temporal."""

from __future__ import annotations

import time

import pytest
from openai import AsyncOpenAI
from pydantic_ai import ModelRequest
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.messages import (
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolCallPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import ToolDefinition

from tests.conftest import wait_for
from tests.support.openai_server import Reply, ScriptedOpenAI

APIS = ["chat", "responses"]
PROMPT = [ModelRequest.user_text_prompt("hello")]


def _model(api: str, server: ScriptedOpenAI):
    provider = OpenAIProvider(base_url=server.base_url, api_key="x")
    cls = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    return cls("gpt-4o-mini", provider=provider)


async def _stream(model, params: ModelRequestParameters | None = None):
    """Every event with the time.time() it arrived, and the final response."""
    arrived = []
    async with model_request_stream(model, PROMPT, model_request_parameters=params) as stream:
        async for event in stream:
            arrived.append((time.time(), event))
        return arrived, stream.get()


def _pieces(arrived, kind: type) -> list[tuple[float, str]]:
    """The streamed (arrival time, text) pieces of TextPart (kind=TextPart) or ThinkingPart content."""
    delta_kind = TextPartDelta if kind is TextPart else ThinkingPartDelta
    out = []
    for t, event in arrived:
        if isinstance(event, PartStartEvent) and isinstance(event.part, kind) and event.part.content:
            out.append((t, event.part.content))
        elif (
            isinstance(event, PartDeltaEvent)
            and isinstance(event.delta, delta_kind)
            and event.delta.content_delta
        ):
            out.append((t, event.delta.content_delta))
    return out


@pytest.mark.parametrize("api", APIS)
async def test_text_streams_as_separate_deltas_spread_over_time(api):
    text = "one two three four five"
    with ScriptedOpenAI(lambda r: Reply(text=text, interval=0.2)) as server:
        arrived, response = await _stream(_model(api, server))

    assert server.requests[0]["stream"] is True
    pieces = _pieces(arrived, TextPart)
    assert [p for _, p in pieces] == ["one ", "two ", "three ", "four ", "five"]
    assert "".join(p for _, p in pieces) == text == response.text
    assert [d for _, d in server.sent] == [p for _, p in pieces]
    # Each delta reached the client after the server sent it, and the first one arrived before the
    # server had even sent the last: the chunks were flushed as written, not buffered to the end.
    for (arrival, _), (sent_at, _) in zip(pieces, server.sent, strict=True):
        assert arrival >= sent_at
    assert pieces[0][0] < server.sent[-1][0]
    assert server.sent[-1][0] - server.sent[0][0] >= 4 * 0.2 * 0.9
    assert response.usage.input_tokens == 100
    assert response.usage.output_tokens == 20
    assert response.finish_reason == "stop"


@pytest.mark.parametrize("api", APIS)
async def test_explicit_chunks(api):
    chunks = ["Hel", "lo, ", "wor", "ld!"]
    with ScriptedOpenAI(lambda r: Reply(chunks=chunks)) as server:
        arrived, response = await _stream(_model(api, server))
    assert [p for _, p in _pieces(arrived, TextPart)] == chunks
    assert response.text == "Hello, world!"


@pytest.mark.parametrize("api", APIS)
async def test_tool_calls_stream(api):
    calls = [("add", {"a": 40, "b": 2}), ("echo", {"text": "over http"})]
    tools = [
        ToolDefinition(name="add", parameters_json_schema={"type": "object", "properties": {}}),
        ToolDefinition(name="echo", parameters_json_schema={"type": "object", "properties": {}}),
    ]
    with ScriptedOpenAI(lambda r: Reply(tool_calls=calls, interval=0.01)) as server:
        arrived, response = await _stream(_model(api, server), ModelRequestParameters(function_tools=tools))

    parts = [p for p in response.parts if isinstance(p, ToolCallPart)]
    assert [(p.tool_name, p.args_as_dict()) for p in parts] == calls
    assert all(p.tool_call_id for p in parts)
    # Responses reports `status: completed` for a tool-call turn, which pydantic-ai maps to "stop".
    assert response.finish_reason == ("tool_call" if api == "chat" else "stop")
    assert response.usage.input_tokens == 100
    # The arguments arrived in several pieces, not whole.
    assert sum(1 for _, kind, _ in server.sent_events if kind == "tool_args") > len(calls)
    assert sum(1 for _, e in arrived if isinstance(e, PartDeltaEvent)) > 0


@pytest.mark.parametrize("api", APIS)
async def test_thinking_streams_before_text(api):
    reply = Reply(thinking="Let me think about it.", text="The answer is 42.", interval=0.01)
    with ScriptedOpenAI(lambda r: reply) as server:
        arrived, response = await _stream(_model(api, server))

    thinking = _pieces(arrived, ThinkingPart)
    text = _pieces(arrived, TextPart)
    assert [p for _, p in thinking] == ["Let ", "me ", "think ", "about ", "it."]
    assert "".join(p for _, p in text) == "The answer is 42."
    first_text = next(
        i
        for i, (_, e) in enumerate(arrived)
        if isinstance(e, PartStartEvent) and isinstance(e.part, TextPart)
    )
    last_thinking = max(
        i
        for i, (_, e) in enumerate(arrived)
        if isinstance(e, PartDeltaEvent) and isinstance(e.delta, ThinkingPartDelta)
    )
    assert last_thinking < first_text
    kinds = [p for p in response.parts if isinstance(p, ThinkingPart | TextPart)]
    assert [type(p) for p in kinds] == [ThinkingPart, TextPart]
    assert kinds[0].content == "Let me think about it."
    assert [k for _, k, _ in server.sent_events] == ["thinking"] * 5 + ["text"] * 4


async def test_chunks_carry_their_send_time():
    with ScriptedOpenAI(lambda r: Reply(text="a b c")) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="x")
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        stamped = [
            (c.model_extra or {}).get("x_sent_at")
            async for c in stream
            if c.choices and c.choices[0].delta.content
        ]
        events = await client.responses.create(model="m", input="hi", stream=True)
        deltas = [
            (e.model_extra or {}).get("x_sent_at")
            async for e in events
            if e.type == "response.output_text.delta"
        ]
        await client.close()
    assert stamped == [t for t, _ in server.sent[:3]]
    assert deltas == [t for t, _ in server.sent[3:]]


@pytest.mark.parametrize("api", APIS)
async def test_client_disconnect_mid_stream(api):
    with ScriptedOpenAI(lambda r: Reply(text=" ".join(["word"] * 20), interval=0.05)) as server:
        model = _model(api, server)
        async with model_request_stream(model, PROMPT) as stream:
            async for event in stream:
                if isinstance(event, PartStartEvent):
                    break
        await wait_for(lambda: server.disconnects, timeout=60)
        assert server.disconnects == 1
        assert len(server.sent) < 20
        # The server still answers, streaming or not.
        response = await model_request(model, PROMPT)
        assert response.text == " ".join(["word"] * 20)


@pytest.mark.parametrize("api", APIS)
async def test_non_streaming_unchanged(api):
    with ScriptedOpenAI(lambda r: Reply(text="plain", thinking="hmm")) as server:
        response = await model_request(_model(api, server), PROMPT)
    assert response.text == "plain"
    assert [p.content for p in response.parts if isinstance(p, ThinkingPart)] == ["hmm"]
    assert response.usage.input_tokens == 100
    assert server.sent == []
