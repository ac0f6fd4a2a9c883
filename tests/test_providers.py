"""The real `openai:` provider path against a scripted OpenAI-compatible server on 127.0.0.1,
calling tools on the published `mcp-server-time` (stdio) and a test MCPServer over streamable HTTP."""

from __future__ import annotations

import json
import socket

import pytest
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart

from agentwolf.config.manifest import Manifest
from agentwolf.config.policy import WorkerPolicy
from tests.conftest import wait_for
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs


async def test_openai_provider_with_stdio_and_http_mcp_servers(
    wolf, run_worker, http_tools_server, monkeypatch
):
    def reply(request):
        done = tool_outputs(request)
        if not done:
            return Reply(tool_calls=[("get_current_time", {"timezone": "UTC"}), ("add", {"a": 40, "b": 2})])
        if len(done) == 2:
            return Reply(tool_calls=[("echo", {"text": "over http"})])
        return Reply(text="It is " + json.loads(done[0])["timezone"] + "; 42; " + done[2])

    monkeypatch.setenv("WOLF_TEST_KEY", "sk-test-canary")
    with ScriptedOpenAI(reply) as server:
        await wait_for(lambda: _port_open(http_tools_server))
        manifest = Manifest.model_validate(
            {
                "host": {
                    "models": {
                        "providers": {"openai": {"api_key": "${WOLF_TEST_KEY}", "base_url": server.base_url}},
                        "aliases": {"fast": "openai:gpt-4o-mini"},
                        "defaults": {"model": "fast", "temperature": 0.2},
                    },
                    "mcp_servers": {
                        "time": {"command": "mcp-server-time"},
                        "web": {"url": http_tools_server},
                    },
                },
                "agents": {
                    "coder": {"instructions": "Be brief.", "capabilities": [{"mcp": "time"}, {"mcp": "web"}]}
                },
            }
        )
        async with run_worker(policy=WorkerPolicy(secrets={"*": ["WOLF_TEST_KEY"]})):
            sid = await wolf.submit("what time is it?", "coder", manifest)
            result = await wolf.result(sid)
            transcript = await wolf.transcript(sid)
    assert result.output == "It is UTC; 42; over http"
    assert len(server.requests) == 3
    first = server.requests[0]
    assert first["model"] == "gpt-4o-mini" and first["temperature"] == 0.2
    assert first["instructions"] == "Be brief."
    assert {t["name"] for t in first["tools"]} >= {"get_current_time", "convert_time", "add", "echo"}
    calls = [
        p.tool_name
        for m in transcript
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    ]
    returns = [p for m in transcript for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    assert calls == ["get_current_time", "add", "echo"]
    assert [r.outcome for r in returns] == ["success"] * 3
    assert server.headers[0]["authorization"] == "Bearer sk-test-canary"  # resolved on the worker, at use
    # That it never leaves the worker is tests/test_trust.py's business.


async def test_a_permanent_provider_error_fails_the_task_clearly(wolf, run_worker):
    from temporalio.client import WorkflowFailureError

    with ScriptedOpenAI(lambda r: Reply(text="invalid api key", status=401)) as server:
        manifest = Manifest.model_validate(
            {
                "host": {
                    "models": {"providers": {"openai": {"api_key": "bad", "base_url": server.base_url}}}
                },
                "agents": {"a": {"model": "openai:gpt-4o-mini"}},
            }
        )
        async with run_worker():
            sid = await wolf.submit("hi", "a", manifest)
            with pytest.raises(WorkflowFailureError) as failure:
                await wolf.result(sid)
    assert "401" in str(failure.value.cause)
    assert len(server.requests) == 1  # non-retryable: asked once (the SDK itself does not retry 401s)


def _port_open(url):
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
