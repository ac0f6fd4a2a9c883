"""Third-party pydantic-ai capability packages run unchanged in a session: loaded as a worker plugin
(`--plugin <package>`: a module of capability classes registers them all), named in the manifest by
their class names. pydantic-ai-shields 0.3.4 is in the test group; pydantic-ai-harness 0.62 pins
pydantic-ai-slim==2.62.0 (this project pins 2.68), so it is not installed: its test runs where it
is importable (installed with `--no-deps`, its imports work with 2.68) and is skipped otherwise."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentwolf.config.manifest import Manifest
from agentwolf.plugins import load_plugins
from agentwolf.workflows.types import Event
from tests.conftest import tools_server, wait_for
from tests.support.needs import import_or_skip
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs


def _manifest(base_url: str, *capabilities: Any) -> Manifest:
    return Manifest.model_validate(
        {
            "host": {
                "models": {"providers": {"openai": {"api_key": "k", "base_url": base_url}}},
                "mcp_servers": {"tools": tools_server()},
            },
            "agents": {
                "a": {"model": "openai:gpt-4o-mini", "capabilities": [{"mcp": "tools"}, *capabilities]}
            },
        }
    )


async def _turns(wolf: Any, sid: str, n: int) -> bool:
    status = await wolf.status(sid)
    return status.state == "idle" and status.counters.turns >= n


async def test_pydantic_ai_shields_guard_a_session_unchanged(wolf, run_worker):
    import_or_skip("pydantic_ai_shields", "pydantic-ai-shields (the test group)")
    shields = [
        {"ToolGuard": {"blocked": ["add"]}},
        {"BlockedKeywords": {"keywords": ["password"]}},
    ]
    plugins = load_plugins(["pydantic_ai_shields"], entry_points=[])
    with ScriptedOpenAI(lambda body: Reply(text="fine")) as server:
        async with run_worker(plugins=plugins):
            sid = await wolf.start_session("a", _manifest(server.base_url, *shields))
            await wolf.prompt(sid, "what is my password?")
            events: list[Event] = []
            async for _, event in wolf.events(sid):
                events.append(event)
                if event.kind == "turn_finished":
                    break
            await wolf.prompt(sid, "add 1 and 2")
            await wait_for(lambda: _turns(wolf, sid, 2))
            await wolf.close(sid)
    blocked = events[-1]
    assert blocked.outcome == "failed"
    assert "InputBlocked: Blocked keyword detected: 'password'" in (blocked.text or "")
    (request,) = server.requests  # the blocked prompt never reached the provider
    offered = {t.get("name") for t in request["tools"]}
    assert "add" not in offered and "slow" in offered  # ToolGuard hid the blocked tool


async def test_a_pydantic_ai_harness_capability_runs_unchanged(wolf, run_worker):
    pytest.importorskip(
        "pydantic_ai_harness",
        reason="pydantic-ai-harness 0.62 requires pydantic-ai-slim==2.62.0; this project pins 2.68",
    )
    window = {
        "SlidingWindowCompaction": {
            "max_messages": 3,
            "keep_messages": 2,
            "preserve_first_user_message": False,
        }
    }
    plugins = load_plugins(["pydantic_ai_harness.compaction"], entry_points=[])

    def reply(body: dict[str, Any]) -> Reply:
        return Reply(text=f"answer {len(body['input'])}")

    with ScriptedOpenAI(reply) as server:
        async with run_worker(plugins=plugins):
            sid = await wolf.start_session("a", _manifest(server.base_url, window))
            for n, prompt in enumerate(["one", "two", "three"], start=1):
                await wolf.prompt(sid, prompt)
                await wait_for(lambda n=n: _turns(wolf, sid, n))
            transcript = await wolf.transcript(sid)
            await wolf.close(sid)
    sizes = [len(r["input"]) for r in server.requests]
    assert sizes[0] == 1 and sizes[1] == 3  # under the window: everything
    assert sizes[2] == 2  # over it: the last two messages only, for that request
    assert "three" in json.dumps(server.requests[2]["input"]) and "one" not in json.dumps(
        server.requests[2]["input"]
    )
    assert len(transcript) == 6  # the session's transcript keeps everything
    assert tool_outputs(server.requests[2]) == []
