"""pydantic-ai capabilities in sessions on a real dev server: specs as pydantic-ai writes them beside
AgentWolf's own, what they contribute reaching the scripted OpenAI-compatible server exactly as
pydantic-ai's own agent sends it, their hooks run inside the activities they wrap, and one clear
error for a spec nobody can build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from temporalio.client import WorkflowFailureError

from agentwolf.config.loading import ManifestError, load_manifest
from agentwolf.config.manifest import Manifest
from agentwolf.plugins import PluginRegistry, Plugins
from tests.conftest import tools_server
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs

MODEL = "gpt-5"
"""A reasoning model, so pydantic-ai sends thinking settings for it."""

SAME_AS_PYDANTIC_AI = [
    {"Thinking": {"effort": "high"}},
    {"Thinking": "low"},
    "WebSearch",
    {"WebSearch": {"search_context_size": "high"}},
    "ImageGeneration",
    {"PrefixTools": {"capability": "WebSearch", "prefix": "web"}},
    "ReinjectSystemPrompt",
    "IncludeToolReturnSchemas",
    "Instrumentation",
    "Citations",
    "ToolSearch",
]
"""Built-ins that fit a session, each compared with pydantic-ai's own agent on the same server."""

COMPARED = (
    "instructions",
    "reasoning",
    "tools",
    "tool_choice",
    "include",
    "max_output_tokens",
    "temperature",
)


def _manifest(base_url: str, agent: dict[str, Any], **host: Any) -> Manifest:
    return Manifest.model_validate(
        {
            "host": {"models": {"providers": {"openai": {"api_key": "k", "base_url": base_url}}}, **host},
            "agents": {"a": {"model": f"openai:{MODEL}", **agent}},
        }
    )


def _seen(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in COMPARED if k in body}


async def _pydantic_ai_sends(server: ScriptedOpenAI, spec: dict[str, Any]) -> dict[str, Any]:
    model = OpenAIResponsesModel(MODEL, provider=OpenAIProvider(base_url=server.base_url, api_key="k"))
    agent = Agent.from_spec(spec, model=model)
    async with agent.run_stream("hi") as run:
        await run.get_output()
    return server.requests[-1]


@pytest.mark.parametrize("capability", SAME_AS_PYDANTIC_AI, ids=json.dumps)
async def test_a_built_in_changes_the_request_as_pydantic_ais_agent_does(wolf, run_worker, capability):
    with ScriptedOpenAI(lambda body: Reply(text="ok")) as server:
        expected = _seen(
            await _pydantic_ai_sends(server, {"instructions": "Be brief.", "capabilities": [capability]})
        )
        plain = _seen(await _pydantic_ai_sends(server, {"instructions": "Be brief."}))
        manifest = _manifest(server.base_url, {"instructions": "Be brief.", "capabilities": [capability]})
        async with run_worker():
            result = await wolf.result(await wolf.submit("hi", "a", manifest))
        sent = _seen(server.requests[-1])
    assert result.output == "ok"
    assert sent == expected
    if capability not in (
        "ReinjectSystemPrompt",
        "IncludeToolReturnSchemas",
        "Instrumentation",
        "Citations",
        "ToolSearch",
    ):
        assert sent != plain  # the capability shows in what was sent


async def test_instructions_settings_and_order_follow_pydantic_ai(wolf, run_worker):
    """Two capabilities contributing settings: the later wins, as in pydantic-ai; the agent's own
    `model_settings` lie under them."""
    spec = {
        "instructions": "Be brief.",
        "model_settings": {"max_tokens": 300, "temperature": 0.2},
        "capabilities": [{"Thinking": "low"}, {"Thinking": {"effort": "high", "id": "second"}}],
    }
    with ScriptedOpenAI(lambda body: Reply(text="ok")) as server:
        expected = _seen(await _pydantic_ai_sends(server, spec))
        manifest = _manifest(server.base_url, spec)
        async with run_worker():
            await wolf.result(await wolf.submit("hi", "a", manifest))
        sent = _seen(server.requests[-1])
    assert sent == expected
    assert sent["reasoning"]["effort"] == "high" and sent["max_output_tokens"] == 300


def test_unknown_and_ill_typed_capabilities_are_one_clear_error(tmp_path: Path):
    file = tmp_path / "wolf.yaml"
    file.write_text(
        "agents:\n  a:\n    model: test\n    capabilities:\n"
        "      - {Thinkng: high}\n"
        "      - {Thinking: {effort: high, colour: blue}}\n"
        "      - {Thinking: {effort: 3.5}}\n"
    )
    with pytest.raises(ManifestError) as raised:
        load_manifest(file)
    text = str(raised.value)
    assert (
        "wolf.yaml:5: agents.a.capabilities.0: unknown capability 'Thinkng' (did you mean 'Thinking'?)"
        in text
    )
    assert "agents.a.capabilities.1: capability 'Thinking': " in text and "'colour'" in text
    assert "agents.a.capabilities.2: capability 'Thinking': " in text and "effort" in text
    file.write_text(
        "agents:\n  a:\n    capabilities:\n      - {mcp: tools, extra: 1}\n      - {A: 1, B: 2}\n"
    )
    with pytest.raises(ManifestError) as raised:
        load_manifest(file)
    text = str(raised.value)
    assert "agents.a.capabilities.0.mcp.extra: unknown" in text
    assert "a capability is one name with its arguments ({Thinking: {effort: high}}), got keys A, B" in text


async def test_a_capability_no_worker_knows_fails_the_compile_clearly(wolf, run_worker):
    with ScriptedOpenAI(lambda body: Reply(text="never")) as server:
        manifest = _manifest(server.base_url, {"capabilities": ["NoSuchCapabilityAnywhere"]})
        async with run_worker():
            sid = await wolf.submit("hi", "a", manifest)
            with pytest.raises(WorkflowFailureError) as failure:
                await wolf.result(sid)
    assert "unknown capability 'NoSuchCapabilityAnywhere'" in str(failure.value.cause)
    assert server.requests == []


async def test_a_plugin_capability_contributes_instructions_tools_and_hooks(wolf, run_worker):
    from dataclasses import dataclass

    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.toolsets import FunctionToolset

    calls: list[str] = []

    @dataclass
    class Clock(AbstractCapability[Any]):
        zone: str = "UTC"

        def get_instructions(self) -> Any:
            return [f"Times are in {self.zone}.", lambda ctx: f"Turn {ctx.deps.turn_id}."]

        def get_toolset(self) -> Any:
            toolset: FunctionToolset[Any] = FunctionToolset()

            @toolset.tool_plain
            def now() -> str:
                """The time now."""
                return "12:00"

            return toolset

        async def after_tool_execute(self, ctx, *, call, tool_def, args, result):
            calls.append(f"{call.tool_name}->{result}")
            return f"{result} {self.zone}"

    registry = PluginRegistry("clock")
    registry.capability(Clock)
    plugins = Plugins()
    plugins.add(registry)

    def reply(body: dict[str, Any]) -> Reply:
        outputs = tool_outputs(body)
        return Reply(text=f"it is {outputs[0]}") if outputs else Reply(tool_calls=[("now", {})])

    with ScriptedOpenAI(reply) as server:
        manifest = _manifest(
            server.base_url,
            {"capabilities": [{"mcp": "tools"}, {"Clock": {"zone": "Asia/Tokyo"}}], "instructions": "Hi."},
            mcp_servers={"tools": tools_server()},
        )
        async with run_worker(plugins=plugins):
            result = await wolf.result(await wolf.submit("time?", "a", manifest))
        first = server.requests[0]
    assert result.output == "it is 12:00 Asia/Tokyo"
    assert calls == ["now->12:00"]
    assert first["instructions"].startswith("Hi.\n\nTimes are in Asia/Tokyo.")
    assert "Turn turn-1." in first["instructions"]
    names = {t.get("name") for t in first["tools"]}
    assert {"now", "add"} <= names
