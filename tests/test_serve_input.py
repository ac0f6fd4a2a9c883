"""`wolf serve` against hostile or unlucky input (issue 23, frontends review F8, F11, F13, F15, F16
and its minor notes): each gets a clear answer in the protocol's shape, never a 500, a hang or
Temporal's own words. Real dev server and worker unless a test says it injects a fault."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import openai
import pytest
from openai import AsyncOpenAI
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.client.configs import ConfigNotFound, ConfigQueryFailed
from agentwolf.client.wolf_client import WolfClient
from agentwolf.protocols import agui
from agentwolf.protocols.a2a_tasks import task_id
from agentwolf.protocols.auth import ApiKeys
from agentwolf.protocols.openai_api import ResponseId
from agentwolf.protocols.turns import TurnRef
from agentwolf.workflows.types import registry_id
from tests.conftest import make_manifest, tools_server, wait_for
from tests.support.models import Script, sequence, text, tool
from tests.support.serving import serving
from tests.test_a2a import _rpc
from tests.test_serve_agui import Stream, _read, _run_input

ANSWER = "The quick brown fox jumps over the lazy dog and keeps on running far away."
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
TEMPORAL_SAYS = "workflow wolf/tenant-a/secret-id in namespace private-ns"


def _api(base: str, key: str = "key-a") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=30)


async def test_deeply_nested_json_is_a_400_on_every_route(client, task_queue):
    """F15: 200,000 nested brackets made json.loads raise RecursionError: a 500 in plain text."""
    deep = b"[" * 200_000 + b"]" * 200_000
    async with (
        serving(client, task_queue, make_manifest()) as base,
        httpx.AsyncClient(
            base_url=base, headers={"Authorization": "Bearer key-a", "Content-Type": "application/json"}
        ) as http,
    ):
        for path in ("/v1/chat/completions", "/v1/responses", "/agui/a", "/a2a/a", "/mcp"):
            answer = await http.post(path, content=deep, headers=MCP_HEADERS if path == "/mcp" else {})
            assert answer.status_code < 500, (path, answer.status_code, answer.text[:200])
            body = answer.json()
            assert "error" in body, (path, body)
            if answer.status_code == 400 and path != "/mcp":
                assert body["error"]["code"] == "invalid_json", (path, body)


async def test_an_agui_stream_that_breaks_ends_with_run_error(client, task_queue, run_worker, monkeypatch):
    """F15: an error other than SessionNotFound/RPCError while following (here injected: the events
    break after the first) cut the SSE response with no RUN_ERROR; what broke stays in the log."""
    real = agui.events_after

    async def breaking(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for item in real(*args, **kwargs):
            yield item
            raise RuntimeError(TEMPORAL_SAYS)

    monkeypatch.setattr(agui, "events_after", breaking)
    script = Script(sequence(text(ANSWER)), chunk_delay=0.05)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        run = Stream()
        thread = f"t-{uuid.uuid4().hex[:8]}"
        assert await _read(http, "/agui/a", _run_input(thread), run, Authorization="Bearer key-a") == 200
        assert run.events[-1]["type"] == "RUN_ERROR", run.events
        assert "Last-Event-ID" in run.events[-1]["message"] and "secret-id" not in str(run.events)
        await WolfClient(client, tenant="tenant-a", task_queue=task_queue).close(thread)


async def test_temporal_s_words_do_not_reach_callers_when_a_prompt_is_refused(
    client, task_queue, run_worker, monkeypatch
):
    """F16: AG-UI answered 409 with the RPCError's text, and MCP/A2A callers got `exc.message` in
    their refusal. The refusal is injected at WolfClient.prompt (an RPC that fails for the server's
    own reasons cannot be provoked on demand)."""
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)

    async def refused(self: WolfClient, session_id: str, text: str) -> str:
        raise RPCError(TEMPORAL_SAYS, RPCStatusCode.UNAVAILABLE, b"")

    async with (
        run_worker(local_models={"m": Script(sequence(text("ok"))).model}),
        serving(client, task_queue, make_manifest()) as base,
        httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key-a"}, timeout=60) as http,
    ):
        sid = await wolf.start_session("a", make_manifest())
        monkeypatch.setattr(WolfClient, "prompt", refused)
        agui_answer = await http.post("/agui/a", json=_run_input(sid, "hello"))
        assert agui_answer.status_code == 503 and agui_answer.headers["retry-after"]
        a2a_answer = await _rpc(
            http,
            "message/send",
            {
                "message": {
                    "messageId": "m",
                    "role": "user",
                    "parts": [{"kind": "text", "text": "hi"}],
                    "contextId": sid,
                }
            },
        )
        assert "retry" in a2a_answer["error"]["message"]
        for said in (agui_answer.text, str(a2a_answer)):
            assert "secret-id" not in said and "private-ns" not in said, said
        await wolf.close(sid)


async def test_a_tenant_without_the_served_registry_config_gets_nothing_not_a_500(
    client, task_queue, run_worker
):
    """F11: `wolf serve --config NAME` answered 500 on every route to a tenant that has no config
    NAME; a registry query that fails is not "no such config" either."""
    name = f"shared-{uuid.uuid4().hex[:6]}"
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with run_worker(local_models={"m": Script(sequence(text("ok"))).model}):
        await wolf.config_push(name, make_manifest())
        try:
            async with (
                serving(client, task_queue, config_name=name) as base,
                httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key-b"}) as http,
            ):
                assert (await http.get("/v1/models")).json()["data"] == []
                chat = await http.post(
                    "/v1/chat/completions",
                    json={"model": "a", "messages": [{"role": "user", "content": "x"}]},
                )
                assert chat.status_code == 404 and chat.json()["error"]["code"] == "model_not_found"
                assert (await http.post("/agui/a", json=_run_input("t"))).status_code == 404
                assert (await http.get("/a2a/a/.well-known/agent-card.json")).status_code == 404
                mine = await http.get("/v1/models", headers={"Authorization": "Bearer key-a"})
                assert [m["id"] for m in mine.json()["data"]] == ["a"]
            with pytest.raises(ConfigQueryFailed) as failed:  # the registry answered: no version 99
                await wolf.config_get(name, version=99)
            assert not isinstance(failed.value, ConfigNotFound)
        finally:
            await client.get_workflow_handle(registry_id("tenant-a", name)).terminate("test done")


async def test_mcp_sessions_belong_to_the_key_that_opened_them(client, task_queue, caplog):
    """F8: any key holding another's `mcp-session-id` could use, stream from or DELETE that MCP
    session; and the SDK logged the ids at INFO (wolf serve logs INFO)."""
    caplog.set_level(logging.DEBUG)
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    async with serving(client, task_queue, make_manifest()) as base, httpx.AsyncClient(base_url=base) as http:
        opened = await http.post("/mcp", json=init, headers={**MCP_HEADERS, "Authorization": "Bearer key-a"})
        sid = opened.headers["mcp-session-id"]
        on = {**MCP_HEADERS, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
        a, b = {**on, "Authorization": "Bearer key-a"}, {**on, "Authorization": "Bearer key-b"}
        await http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=a)
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        assert (await http.post("/mcp", json=ping, headers=b)).status_code == 404
        assert (await http.delete("/mcp", headers=b)).status_code == 404
        assert (await http.post("/mcp", json=ping, headers=a)).status_code == 200
        assert (await http.delete("/mcp", headers=a)).status_code == 200
    above_debug = [r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG]
    assert not any(sid in m for m in above_debug), [m for m in above_debug if sid in m]
    assert any(sid in r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG)


async def test_a_response_and_a_task_whose_events_were_trimmed_are_expired(client, task_queue, run_worker):
    """F13: once continue-as-new trimmed a finished turn's events, GET answered `queued` (or, with
    nothing kept, never answered), streams and cancel followed for ever, A2A said SUBMITTED."""
    manifest = make_manifest(sessions={"continue_as_new_bytes": 1, "events_kept": 0})
    wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
    async with (
        run_worker(local_models={"m": Script(sequence(text(ANSWER))).model}),
        serving(client, task_queue, manifest) as base,
        httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer key-a"}, timeout=30) as http,
    ):
        oa = _api(base)
        first = await oa.responses.create(model="a", input="go", background=True)
        rid = ResponseId.parse(first.id)
        await wait_for(lambda: _continued(wolf, rid.session))  # turn-1 finished, its events dropped
        for attempt in (
            lambda: oa.responses.retrieve(first.id),
            lambda: oa.responses.retrieve(first.id, stream=True),
            lambda: oa.responses.cancel(first.id),
        ):
            with pytest.raises(openai.NotFoundError) as gone:
                await attempt()
            assert gone.value.body["code"] == "response_expired"
        task = task_id(TurnRef(rid.session, rid.turn_id, rid.base))
        expired = await _rpc(http, "tasks/get", {"id": task})
        assert expired["error"]["code"] == -32001 and "expired" in expired["error"]["message"]
        await wolf.close(rid.session)


async def _continued(wolf: WolfClient, session_id: str) -> bool:
    return (await wolf.status(session_id)).counters.continued_as_new > 0


async def test_an_agui_message_sent_while_the_thread_runs_is_a_turn_of_its_own(
    client, task_queue, run_worker
):
    """Minor note: a run with a NEW user message on a thread whose turn runs streamed the old turn
    and dropped the message. It is prompted now (queued behind: the default double-texting policy);
    the running turn's own message again is a reconnect."""
    script = Script(sequence(text(ANSWER), text("second answer")), chunk_delay=0.1)
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        thread, key = f"t-{uuid.uuid4().hex[:8]}", {"Authorization": "Bearer key-a"}
        first = Stream()
        assert await _read(http, "/agui/a", _run_input(thread, "tell me"), first, until=1, **key) == 200
        reconnect = Stream()
        assert await _read(http, "/agui/a", _run_input(thread, "tell me"), reconnect, until=1, **key) == 200
        assert reconnect.events[0]["metadata"]["agentwolf"]["turn_id"] == "turn-1"
        second = Stream()
        assert await _read(http, "/agui/a", _run_input(thread, "and another thing"), second, **key) == 200
        assert second.events[0]["metadata"]["agentwolf"]["turn_id"] == "turn-2"
        assert second.events[-1]["type"] == "RUN_FINISHED"
        assert (
            "".join(e["delta"] for e in second.events if e["type"] == "TEXT_MESSAGE_CONTENT")
            == "second answer"
        )
        assert script.requests[-1][-1].parts[-1].content == "and another thing"
        await WolfClient(client, tenant="tenant-a", task_queue=task_queue).close(thread)


def test_api_keys_may_end_in_equals_signs():
    """Minor note: WOLF_API_KEYS split at the first `=`, refusing base64 keys that end in `=`."""
    keys = ApiKeys.load([], {"WOLF_API_KEYS": "c2VjcmV0IGtleQ===tenant-a,plain=tenant-b"})
    assert keys.principal("c2VjcmV0IGtleQ==").tenant == "tenant-a"
    assert keys.principal("plain").tenant == "tenant-b"


async def test_an_agui_message_sent_while_the_thread_waits_for_approval_is_refused_clearly(
    client, task_queue, run_worker, tmp_path
):
    """Minor note, the other half: behind a turn waiting for approval, a queued message would wait
    unseen, so a new message is 409 `approval_pending`; the waiting turn's own message re-shows its
    interrupts."""
    manifest = make_manifest(
        {"permissions": {"rules": [{"tool": "record", "action": "confirm"}]}},
        mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(tmp_path / "effects"))},
    )
    script = Script(sequence(tool("record", {"tag": "x"}), text("recorded")))
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, manifest) as base,
        httpx.AsyncClient(base_url=base) as http,
    ):
        thread, key = f"t-{uuid.uuid4().hex[:8]}", {"Authorization": "Bearer key-a"}
        first = Stream()
        assert await _read(http, "/agui/a", _run_input(thread, "record x"), first, **key) == 200
        assert first.events[-1]["outcome"]["type"] == "interrupt"
        refused = await http.post("/agui/a", json=_run_input(thread, "something else"), headers=key)
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "approval_pending"
        again = Stream()
        assert await _read(http, "/agui/a", _run_input(thread, "record x"), again, **key) == 200
        assert again.events[-1]["outcome"]["type"] == "interrupt"
        wolf = WolfClient(client, tenant="tenant-a", task_queue=task_queue)
        assert (await wolf.status(thread)).queued == 0
        await wolf.close(thread)
