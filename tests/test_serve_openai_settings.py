"""A drop-in OpenAI server: a request's generation settings, answer format and system messages reach
the provider for that turn only; what cannot apply is OpenAI's 400; sessions `wolf serve` starts
close when idle, or at once with `store: false`. The official `openai` client -> `wolf serve` ->
a real dev server and worker -> the scripted OpenAI-compatible provider, whose request log is read."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from pydantic_ai.profiles import ModelProfile

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.hosts.turn_settings import answer_format, instructions, merged_settings
from agentwolf.protocols.openai_api import ResponseId
from agentwolf.protocols.openai_api.settings import ChatRequest, ResponsesRequest, checked
from agentwolf.protocols.served import IDLE_CLOSE_AFTER, ApiError
from agentwolf.workflows.session_input import SessionInput
from agentwolf.workflows.turn_settings import AnswerFormat, TurnSettings
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history
from tests.support.models import Script, sequence, text
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.support.serving import serving

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
SETTINGS = {"temperature", "top_p", "max_completion_tokens", "stop", "seed", "response_format"}


def api(base: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base + "/v1", api_key="key-a", max_retries=0)


def provider_manifest(server: ScriptedOpenAI) -> Manifest:
    """Agent `a` on the scripted provider's Chat Completions (`openai-chat:`), with its own instructions."""
    return make_manifest(
        {"model": "openai-chat:gpt-4o-mini", "instructions": "You are the test agent."},
        models={"providers": {"openai": {"api_key": "sk-test", "base_url": server.base_url}}},
    )


def system_text(request: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in request["messages"] if m["role"] in ("system", "developer"))


def user_text(request: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in request["messages"] if m["role"] == "user")


async def test_chat_settings_reach_the_provider_for_their_turn_only(client, task_queue, run_worker):
    with ScriptedOpenAI(lambda r: Reply(text='{"city": "Paris"}')) as server:
        async with run_worker(), serving(client, task_queue, provider_manifest(server)) as base:
            oa = api(base)
            raw = await oa.chat.completions.with_raw_response.create(
                model="a",
                messages=[
                    {"role": "system", "content": "Answer in JSON."},
                    {"role": "user", "content": "Where is the Louvre?"},
                ],
                temperature=0.3,
                top_p=0.5,
                max_tokens=50,
                stop=["END"],
                seed=7,
                parallel_tool_calls=False,
                response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "place", "schema": SCHEMA, "strict": True},
                },
                extra_headers={"X-Wolf-Session": "new"},
            )
            assert raw.parse().choices[0].message.content == '{"city": "Paris"}'
            session = raw.headers["x-wolf-session"]
            # The next turn of the same session sets nothing: the agent's own settings only.
            again = await oa.chat.completions.create(
                model="a",
                messages=[{"role": "user", "content": "And the Prado?"}],
                extra_headers={"X-Wolf-Session": session},
            )
            assert again.choices[0].message.content == '{"city": "Paris"}'
            # `max_completion_tokens` is the newer spelling of `max_tokens`: the same setting.
            await oa.chat.completions.create(
                model="a",
                messages=[{"role": "user", "content": "hi"}],
                max_completion_tokens=9,
                extra_headers={"X-Wolf-Session": session},
            )
    first, second, third = server.requests
    assert first["temperature"] == 0.3 and first["top_p"] == 0.5
    assert first["max_completion_tokens"] == 50 and first["stop"] == ["END"] and first["seed"] == 7
    assert first["parallel_tool_calls"] is False
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "place", "schema": SCHEMA, "strict": True},
    }
    # The system message is the turn's instructions, after the agent's own; not something the user said.
    assert system_text(first) == "You are the test agent.\n\nAnswer in JSON."
    assert "Answer in JSON" not in user_text(first) and user_text(first) == "Where is the Louvre?"
    assert not SETTINGS & second.keys() and "parallel_tool_calls" not in second
    assert system_text(second) == "You are the test agent."
    assert third["max_completion_tokens"] == 9 and not (SETTINGS - {"max_completion_tokens"}) & third.keys()


async def test_a_stateless_requests_system_message_is_instructions(client, task_queue, run_worker):
    with ScriptedOpenAI(lambda r: Reply(text="short")) as server:
        async with run_worker(), serving(client, task_queue, provider_manifest(server)) as base:
            completion = await api(base).chat.completions.create(
                model="a",
                messages=[
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                    {"role": "developer", "content": "No emoji."},
                    {"role": "user", "content": "what is 1+2?"},
                ],
            )
    assert completion.choices[0].message.content == "short"
    (request,) = server.requests
    assert system_text(request) == "You are the test agent.\n\nBe brief.\n\nNo emoji."
    said = user_text(request)
    assert "[user] hi" in said and "[assistant] hello" in said and said.endswith("what is 1+2?")
    assert "Be brief" not in said and "emoji" not in said


async def test_responses_settings_reach_the_provider(client, task_queue, run_worker):
    with ScriptedOpenAI(lambda r: Reply(text='{"ok": true}')) as server:
        async with run_worker(), serving(client, task_queue, provider_manifest(server)) as base:
            oa = api(base)
            first = await oa.responses.create(
                model="a",
                input=[
                    {"role": "developer", "content": "Reply in JSON."},
                    {"role": "user", "content": "status?"},
                ],
                instructions="Be terse.",
                temperature=1.5,
                top_p=0.9,
                max_output_tokens=64,
                text={"format": {"type": "json_object"}},
            )
            assert first.output_text == '{"ok": true}'
            await oa.responses.create(
                model="a",
                input="again",
                previous_response_id=first.id,
                text={"format": {"type": "json_schema", "name": "status", "schema": SCHEMA, "strict": True}},
            )
            await oa.responses.create(model="a", input="plain", previous_response_id=first.id)
    first_request, schema_request, plain = server.requests
    assert first_request["temperature"] == 1.5 and first_request["top_p"] == 0.9
    assert first_request["max_completion_tokens"] == 64
    assert first_request["response_format"] == {"type": "json_object"}
    assert system_text(first_request) == "You are the test agent.\n\nBe terse.\n\nReply in JSON."
    assert user_text(first_request) == "status?"
    assert schema_request["response_format"]["json_schema"]["name"] == "status"
    assert schema_request["response_format"]["json_schema"]["strict"] is True
    assert "temperature" not in schema_request and "Be terse" not in system_text(schema_request)
    assert not SETTINGS & plain.keys()


@pytest.mark.parametrize(
    ("extra", "param", "code"),
    [
        ({"n": 2}, "n", "unsupported_value"),
        ({"temperature": 2.5}, "temperature", "invalid_value"),
        ({"top_p": -0.1}, "top_p", "invalid_value"),
        ({"logprobs": True}, "logprobs", "unsupported_value"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "invalid_value"),
        ({"response_format": {"type": "xml"}}, "response_format", "invalid_value"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
            "response_format.json_schema.schema",
            "invalid_value",
        ),
        ({"modalities": ["text", "audio"]}, "modalities", "unsupported_value"),
        ({"best_of": 3}, "best_of", "unknown_parameter"),
    ],
)
async def test_what_cannot_apply_is_openais_400(client, task_queue, extra, param, code):
    with ScriptedOpenAI(lambda r: Reply(text="never")) as server:
        async with serving(client, task_queue, provider_manifest(server)) as base:
            with pytest.raises(openai.BadRequestError) as caught:
                await api(base).chat.completions.create(
                    model="a", messages=[{"role": "user", "content": "hi"}], extra_body=extra
                )
    assert caught.value.status_code == 400
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"
    assert body["param"] == param and body["code"] == code and body["message"]
    assert server.requests == []  # refused before any session started


async def test_a_responses_setting_out_of_range_is_a_400(client, task_queue):
    async with serving(client, task_queue, make_manifest()) as base:
        with pytest.raises(openai.BadRequestError) as caught:
            await api(base).responses.create(model="a", input="hi", max_output_tokens=0)
    assert caught.value.body["param"] == "max_output_tokens"  # type: ignore[index]


async def test_streamed_usage_only_when_asked(client, task_queue, run_worker):
    script = Script(sequence(text("one two three"), text("one two three")), chunk_delay=0.01)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        oa = api(base)
        asked = [
            c
            async for c in await oa.chat.completions.create(
                model="a",
                messages=[{"role": "user", "content": "go"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        ]
        plain = [
            c
            async for c in await oa.chat.completions.create(
                model="a", messages=[{"role": "user", "content": "go"}], stream=True
            )
        ]
    last = asked[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens > 0
    assert all(c.usage is None for c in asked[:-1])
    assert all(c.usage is None for c in plain) and plain[-1].choices[0].finish_reason == "stop"


async def _start_input(wolf: WolfClient, session: str) -> SessionInput:
    history = await wolf.client.get_workflow_handle(workflow_id(wolf.tenant, session)).fetch_history()
    payload = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    return SessionInput.model_validate_json(payload.data)


async def test_serve_started_sessions_close_when_idle_and_store_false_at_once(client, task_queue, run_worker):
    script = Script(lambda s: text("done"))
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with run_worker(local_models={"m": script.model}):
        async with serving(client, task_queue, make_manifest()) as base:
            oa = api(base)
            kept = await oa.responses.create(model="a", input="keep me")
            gone = await oa.responses.create(model="a", input="forget me", store=False)
            kept_session, gone_session = ResponseId.parse(kept.id).session, ResponseId.parse(gone.id).session
            # `store: false`: the session closes as soon as the answer is given.
            assert (await asyncio.wait_for(wolf.result(gone_session), 60)).output == "done"
            assert (await wolf.status(gone_session)).state == "done"
            # A stored one stays for more turns, with wolf serve's idle limit (the manifest sets none).
            assert (await wolf.status(kept_session)).state == "idle"
            assert (await _start_input(wolf, kept_session)).idle_close_after == IDLE_CLOSE_AFTER
            await wolf.close(kept_session)
        async with serving(
            client, task_queue, make_manifest(), idle_close_after=timedelta(seconds=1)
        ) as base:
            chat = await api(base).chat.completions.with_raw_response.create(
                model="a",
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"X-Wolf-Session": "new"},
            )
            session = chat.headers["x-wolf-session"]
            result = await asyncio.wait_for(wolf.result(session), 60)
            events = [e async for _, e in wolf.events(session, live=False)]
        # The manifest's own limit wins over wolf serve's default.
        manifest = make_manifest(sessions={"idle_close_after": 3600})
        async with serving(client, task_queue, manifest, idle_close_after=timedelta(seconds=1)) as base:
            own = await api(base).responses.create(model="a", input="hi")
            own_session = ResponseId.parse(own.id).session
            await asyncio.sleep(2)  # past wolf serve's limit, well within the manifest's
            assert (await wolf.status(own_session)).state == "idle"
            await wolf.close(own_session)
    assert result.outcome == "completed" and result.output == "done"
    assert [e.kind for e in events][-2:] == ["limit_reached", "session_closed"]
    assert "idle limit the session was started with" in (events[-2].text or "")


async def test_turn_settings_and_an_idle_limit_replay(wolf, run_worker):
    """Sessions with a prompt's own settings and a starter's idle limit, recorded for the replay corpus."""
    seen: list[TurnSettings | None] = []
    script = Script(sequence(text("first"), text("second")))
    async with run_worker(local_models={"m": script.model}):
        settings = TurnSettings(temperature=0.2, instructions="Be brief.")
        starter = WolfClient(wolf.client, task_queue=wolf.task_queue, idle_close_after=timedelta(seconds=1))
        sid = await starter.start_session("a", make_manifest(), prompt="go", prompt_settings=settings)
        await starter.prompt(sid, "more", TurnSettings(seed=3))  # queued: no idle time between the turns
        result = await asyncio.wait_for(starter.result(sid), 60)
        await record_history(wolf.client, workflow_id("default", sid), "turn_settings_idle_close")
        history = await wolf.client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
    for event in history.events:
        if event.HasField("activity_task_scheduled_event_attributes"):
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "wolf.model_request":
                body = json.loads(attrs.input.payloads[0].data)
                seen.append(TurnSettings.model_validate(body["settings"]) if body.get("settings") else None)
    assert result.output == "second"
    assert seen == [settings, TurnSettings(seed=3)]
    first_request = script.requests[0][-1]
    assert "Be brief." in (getattr(first_request, "instructions", None) or "")


# -- without servers: what each parameter becomes --------------------------------------------------


def test_every_applied_chat_parameter_becomes_a_turn_setting():
    request = checked(
        ChatRequest,
        {
            "model": "a",
            "messages": [],
            "temperature": 0,
            "top_p": 1,
            "max_tokens": 10,
            "max_completion_tokens": 20,
            "stop": "END",
            "seed": 1,
            "presence_penalty": -1,
            "frequency_penalty": 2,
            "logit_bias": {"50256": -100},
            "parallel_tool_calls": True,
            "reasoning_effort": "none",
            "response_format": {"type": "json_object"},
            "n": 1,
            "user": "u-1",
            "metadata": {"k": "v"},
            "store": True,
            "tool_choice": "auto",
            "modalities": ["text"],
        },
    )
    settings = request.turn_settings("sys")
    assert settings is not None
    assert settings.model_settings() == {
        "temperature": 0,
        "top_p": 1,
        "max_tokens": 20,
        "stop_sequences": ["END"],
        "seed": 1,
        "presence_penalty": -1,
        "frequency_penalty": 2,
        "logit_bias": {"50256": -100},
        "parallel_tool_calls": True,
        "thinking": False,
    }
    assert settings.answer_format == AnswerFormat(type="json_object")
    assert settings.instructions == "sys"
    # A request that sets nothing carries no settings; `text` is the plain answer.
    assert (
        checked(ChatRequest, {"model": "a", "response_format": {"type": "text"}}).turn_settings(None) is None
    )


def test_responses_parameters_and_refusals():
    settings = checked(
        ResponsesRequest,
        {"reasoning": {"effort": "high", "summary": "auto"}, "max_output_tokens": 5, "include": []},
    ).turn_settings(None)
    assert settings == TurnSettings(thinking="high", max_tokens=5)
    for body, param in [
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"text": {"format": {"type": "json_schema", "schema": SCHEMA}}}, "text.format.name"),
        ({"conversation": "c"}, "conversation"),
        ({"max_tool_calls": 3}, "max_tool_calls"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ]:
        with pytest.raises(ApiError) as caught:
            checked(ResponsesRequest, body)
        assert caught.value.status == 400 and caught.value.param == param


def test_the_turns_settings_lie_over_the_agents():
    turn = TurnSettings(
        temperature=0.9,
        seed=4,
        instructions="Answer in French.",
        answer_format=AnswerFormat(type="json_schema", json_schema=SCHEMA, strict=True),
    )
    assert merged_settings({"temperature": 0.1, "max_tokens": 100}, turn) == {
        "temperature": 0.9,
        "max_tokens": 100,
        "seed": 4,
    }
    assert merged_settings({"temperature": 0.1}, None) == {"temperature": 0.1}
    assert instructions("Be kind.", turn) == "Be kind.\n\nAnswer in French."
    assert instructions("", turn) == "Answer in French." and instructions("Be kind.", None) == "Be kind."
    able: ModelProfile = {"supports_json_schema_output": True, "supports_json_object_output": True}
    mode, schema = answer_format(turn, able)
    assert mode == "native" and schema is not None and schema.json_schema == SCHEMA and schema.strict
    json_mode = TurnSettings(answer_format=AnswerFormat(type="json_object"))
    assert answer_format(json_mode, able) == ("prompted", None)
    assert answer_format(None, able) == ("text", None)
    # A provider without JSON mode or schema-constrained output is asked in the instructions.
    mode, schema = answer_format(turn, {})
    assert mode == "prompted" and schema is not None and schema.json_schema == SCHEMA
    mode, schema = answer_format(json_mode, {})
    assert mode == "prompted" and schema is not None and schema.json_schema == {"type": "object"}
