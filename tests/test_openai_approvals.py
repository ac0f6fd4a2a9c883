"""A turn that asks for approval ends its OpenAI answer there, with the waiting calls named, and is
answered with the Responses API's own `mcp_approval_response` items; non-streamed requests never
hang and stop following when their client leaves. The official `openai` client, a real dev server,
worker and app."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
from openai import AsyncOpenAI
from pydantic_ai.messages import ModelResponse, UserPromptPart

from agentwolf.client import feed
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, sequence, text, tool
from tests.support.serving import serving

CONFIRM: Manifest = make_manifest({"permissions": {"rules": [{"tool": "add", "action": "confirm"}]}})


def _add_then_answer(script: Script) -> ModelResponse:
    """Each session asks for `add` first, then answers (whatever the other sessions did)."""
    asked = any(isinstance(p, UserPromptPart) for p in script.requests[-1][-1].parts)
    return tool("add", {"a": 1, "b": 2}, "call-1") if asked else text("three")


def _approval(request_id: str, approve: bool = True) -> dict[str, object]:
    return {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": approve}


def api(base: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base + "/v1", api_key="key-a", max_retries=0, timeout=60)


async def test_a_response_that_needs_approval_asks_and_goes_on_when_answered(client, task_queue, run_worker):  # noqa: E501
    script = Script(sequence(tool("add", {"a": 1, "b": 2}, "call-1"), text("three")))
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, CONFIRM) as base,
    ):
        oa = api(base)
        asked = await oa.responses.create(model="a", input="add 1 and 2")
        (request,) = [i for i in asked.output if i.type == "mcp_approval_request"]
        answered = await oa.responses.create(
            model="a",
            previous_response_id=asked.id,
            input=[_approval(request.id)],
        )
        again = await oa.responses.retrieve(asked.id)
    assert asked.status == "incomplete" and asked.incomplete_details.reason == "approval_required"
    assert (request.name, json.loads(request.arguments), request.id) == (
        "add",
        {"a": 1, "b": 2},
        "mcpr_call-1",
    )
    assert answered.status == "completed" and answered.output_text == "three"
    (call,) = [i for i in answered.output if i.type == "mcp_call"]
    assert (call.name, call.output, call.status) == ("add", "3", "completed")
    # The first response stays what it was: it ended where the turn asked.
    assert again.status == "incomplete" and [i.type for i in again.output][-1] == "mcp_approval_request"


async def test_a_chat_completion_that_needs_approval_finishes_naming_the_calls(
    client, task_queue, run_worker
):
    script = Script(_add_then_answer)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, CONFIRM) as base,
    ):
        oa = api(base)
        raw = await oa.chat.completions.with_raw_response.create(
            model="a", messages=[{"role": "user", "content": "add 1 and 2"}]
        )
        completion = raw.parse()
        chunks = [
            c
            async for c in await oa.chat.completions.create(
                model="a", messages=[{"role": "user", "content": "add 1 and 2"}], stream=True
            )
        ]
        # The answer: the Responses API, on the turn the chat started (X-Wolf-Response).
        answered = await oa.responses.create(
            model="a",
            previous_response_id=raw.headers["x-wolf-response"],
            input=[_approval("mcpr_call-1", approve=False)],
        )
    choice = completion.choices[0]
    assert choice.finish_reason == "approval_required"
    assert "add" in choice.message.content and "mcpr_call-1" in choice.message.content
    assert chunks[-1].choices[0].finish_reason == "approval_required"
    assert "mcpr_call-1" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert answered.status == "completed"
    (call,) = [i for i in answered.output if i.type == "mcp_call"]
    assert call.status == "failed" and "denied" in call.output


async def test_a_non_streamed_request_stops_following_when_its_client_leaves(client, task_queue, run_worker):
    script = Script(sequence(tool("slow", {"seconds": 60}), text("late")))
    manifest = make_manifest()
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, manifest) as base,
        httpx.AsyncClient(timeout=120) as http,
    ):
        sid = await wolf.start_session("a", manifest)
        wid = workflow_id("tenant-a", sid)
        request = asyncio.create_task(
            http.post(
                base + "/v1/chat/completions",
                json={"model": "a", "messages": [{"role": "user", "content": "wait"}]},
                headers={"Authorization": "Bearer key-a", "X-Wolf-Session": sid},
            )
        )
        await wait_for(lambda: script.calls == 1 and feed.followers(client, wid) == 1, timeout=60)
        request.cancel()  # the client leaves (its connection closes) while the turn runs
        with contextlib.suppress(asyncio.CancelledError):
            await request
        await wait_for(lambda: feed.followers(client, wid) is None, timeout=60)
        assert (await wolf.status(sid)).state == "running"  # the turn itself goes on


async def test_a_response_that_asks_refuses_answers_for_calls_that_do_not_wait(
    client, task_queue, run_worker
):
    script = Script(sequence(tool("add", {"a": 1, "b": 2}, "call-1"), text("three")))
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, CONFIRM) as base,
    ):
        oa = api(base)
        asked = await oa.responses.create(model="a", input="add 1 and 2")
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            wrong = await http.post(
                "/v1/responses",
                json={
                    "model": "a",
                    "previous_response_id": asked.id,
                    "input": [
                        {"type": "mcp_approval_response", "approval_request_id": "mcpr_nope", "approve": True}
                    ],
                },
                headers={"Authorization": "Bearer key-a"},
            )
            alone = await http.post(
                "/v1/responses",
                json={
                    "model": "a",
                    "input": [
                        {
                            "type": "mcp_approval_response",
                            "approval_request_id": "mcpr_call-1",
                            "approve": True,
                        }
                    ],
                },
                headers={"Authorization": "Bearer key-a"},
            )
    assert wrong.status_code == 409 and wrong.json()["error"]["code"] == "approval_not_waiting"
    assert alone.status_code == 400 and alone.json()["error"]["code"] == "missing_previous_response"
