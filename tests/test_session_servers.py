"""A session's own MCP servers (an editor's, `session_servers` / `join_servers`) under hostile use: a
same-named server joined again replaces the old one; the secrets an editor passes never reach history,
queries or events; only the session's owner joins servers to it; the worker policy keeps editor HTTP
servers off this machine's and private networks."""

from __future__ import annotations

from typing import Any

from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart

from agentwolf.config.manifest import Manifest, McpServerConfig
from tests.conftest import tools_server, wait_for
from tests.support.models import Script, text

BARE = Manifest.model_validate({"agents": {"a": {"model": "local:m"}}})


def _envs(tools: list[str]) -> list[str]:
    """The test server's `env` tool, under each name it is offered (prefixed when several list it)."""
    return sorted(t for t in tools if t == "env" or t.endswith("__env"))


async def _idle_after(wolf: Any, sid: str, turns: int) -> bool:
    status = await wolf.status(sid)
    return status.state == "idle" and status.counters.turns >= turns


def _session_labels(hosts: Any) -> set[str]:
    return {label for host in hosts.hosts() for label in host.pool.servers if label.startswith("session:")}


async def test_a_rejoined_server_replaces_the_old_one(wolf, run_worker):
    offered: list[list[str]] = []

    def decide(s: Script) -> ModelResponse:
        if s.calls in (1, 2):
            offered.append(_envs(s.tools))
        if s.calls == 2:  # whichever server answers to `env` tells which one it is
            return ModelResponse(parts=[ToolCallPart(offered[1][0], {"name": "V"}, tool_call_id="c1")])
        return text(f"answer {s.calls}")

    script = Script(decide)
    async with run_worker(local_models={"m": script.model}) as hosts:
        old = McpServerConfig(**tools_server(V="1"))
        sid = await wolf.start_session("a", BARE, session_servers={"tools": old})
        await wolf.prompt(sid, "one")
        await wait_for(lambda: _idle_after(wolf, sid, 1))
        first = _session_labels(hosts)
        await wolf.join_servers(sid, {"tools": McpServerConfig(**tools_server(V="2"))})
        await wolf.prompt(sid, "two")
        await wait_for(lambda: _idle_after(wolf, sid, 2), timeout=60)
        transcript = await wolf.transcript(sid)
        now = _session_labels(hosts)
        await wolf.close(sid)
    assert offered == [["env"], ["env"]]  # one server lists it: only the new one is offered
    results = [p for m in transcript for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    assert [str(p.content) for p in results] == ["2"]
    assert len(first) == 1 and len(now) == 1 and first != now  # the old server was released
