"""A session's own MCP servers (an editor's, `session_servers` / `join_servers`) under hostile use: a
same-named server joined again replaces the old one; the secrets an editor passes never reach history,
queries or events; only the session's owner joins servers to it; the worker policy keeps editor HTTP
servers off this machine's and private networks."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart

from agentwolf.client.sessions import NotOwner
from agentwolf.config.manifest import Manifest, McpServerConfig
from agentwolf.config.policy import PolicyError, WorkerPolicy
from agentwolf.config.session_servers import SealError, seal, unseal
from agentwolf.payloads import data_converter
from tests.conftest import tools_server, wait_for
from tests.support.models import Script, text

BARE = Manifest.model_validate({"agents": {"a": {"model": "local:m"}}})


def _envs(tools: list[str]) -> list[str]:
    """The test server's `env` tool, under each name it is offered (prefixed when several list it)."""
    return sorted(t for t in tools if t == "env" or t.endswith("__env"))


async def _idle_after(wolf: Any, sid: str, turns: int) -> bool:
    status = await wolf.status(sid)
    return status.state == "idle" and status.counters.turns >= turns


async def _run_changed(handle: Any, first_run: str) -> bool:
    return (await handle.describe()).run_id != first_run


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


CANARY = "ghp_EDITOR_CANARY_0123456789"


def _history_holds(history: Any, secret: str) -> list[str]:
    """The history events whose bytes (payloads as they are stored: JSON, not base64) hold `secret`."""
    return [str(e.event_type) for e in history.events if secret.encode() in e.SerializeToString()]


async def test_an_editors_secrets_reach_its_server_but_never_history_queries_or_events(
    wolf, client, run_worker, caplog
):
    def decide(s: Script) -> ModelResponse:
        if s.calls == 1:  # the server says what it got (the worker redacts it on the way back)
            return ModelResponse(parts=[ToolCallPart("env", {"name": "GH_TOKEN"}, tool_call_id="c1")])
        return text(f"answer {s.calls}")

    script = Script(decide)
    editor = McpServerConfig(**tools_server(GH_TOKEN=CANARY))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", BARE, session_servers={"gh": editor}, prompt="what token?")
        await wait_for(lambda: _idle_after(wolf, sid, 1))
        handle = client.get_workflow_handle(f"wolf/{wolf.tenant}/{sid}")
        before = await handle.query("compiled")
        await wolf.join_servers(sid, {"gh": editor})  # an editor reattaching with the same server
        await wolf.prompt(sid, "again")
        await wait_for(lambda: _idle_after(wolf, sid, 2))
        after = await handle.query("compiled")
        transcript = await wolf.transcript(sid)
        answers = [
            str(before),
            str(after),
            str(await wolf.status(sid)),
            str(transcript),
        ]
        await wolf.close(sid)
        answers.append(str([e async for _, e in wolf.events(sid, 0, live=False)]))  # ends with the session
        history = await handle.fetch_history()
    results = [p for m in transcript for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    assert [p.content for p in results] == ["****"]  # the server had the token (redacted on its way back)
    assert _history_holds(history, CANARY) == []
    assert [a for a in answers if CANARY in a] == []
    assert CANARY not in caplog.text
    # Sealed, the config shows where the value went; reattached unchanged, the server kept its label.
    [(label, shown)] = before["session_servers"].items()
    assert shown["env"]["GH_TOKEN"].startswith("sealed:") and list(after["session_servers"]) == [label]


async def test_sealed_secrets_open_only_for_their_session_and_server(tmp_path):
    converter = data_converter(str(tmp_path / "store"))
    http = McpServerConfig(url="https://mcp.example.com/mcp", headers={"Authorization": f"Bearer {CANARY}"})
    sealed = await seal(converter, "default", "wolf/default/s1", http)
    assert CANARY not in sealed.model_dump_json() and sealed.headers["Authorization"].startswith("sealed:")
    assert await unseal(converter, "wolf/default/s1", sealed) == (http, [f"Bearer {CANARY}"])
    # Copied into another session, or onto another server (which would hand the token elsewhere):
    elsewhere = sealed.model_copy(update={"url": "https://attacker.example.com/mcp"})
    for wid, config in (("wolf/default/s2", sealed), ("wolf/default/s1", elsewhere)):
        with pytest.raises(SealError, match="another session or another server"):
            await unseal(converter, wid, config)
    assert await seal(converter, "default", "wolf/default/s1", sealed) == sealed  # sealed once


async def test_only_the_owner_joins_servers_also_after_continue_as_new(wolf, run_worker):
    script = Script(lambda s: text(f"answer {s.calls}"))
    manifest = Manifest.model_validate(
        {"host": {"sessions": {"continue_as_new_bytes": 1}}, "agents": {"a": {"model": "local:m"}}}
    )
    server = {"tools": McpServerConfig(**tools_server())}
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest, owner="alice", prompt="one")
        first_run = (await wolf.client.get_workflow_handle(f"wolf/{wolf.tenant}/{sid}").describe()).run_id
        await wait_for(lambda: _idle_after(wolf, sid, 1))
        handle = wolf.client.get_workflow_handle(f"wolf/{wolf.tenant}/{sid}")
        await wait_for(lambda: _run_changed(handle, first_run))  # continued as new
        for stranger in ("bob", None):
            with pytest.raises(NotOwner):
                await wolf.join_servers(sid, server, owner=stranger)
        await wolf.join_servers(sid, server, owner="alice")
        await wolf.close(sid)


async def _finished(wolf: Any, sid: str) -> Any:
    status = await wolf.status(sid)
    return status if status.state == "idle" and status.last_outcome else None


async def test_an_editors_http_server_on_this_machine_is_refused(wolf, run_worker, http_tools_server):
    local = {"local": McpServerConfig(url=http_tools_server)}
    script = Script(lambda s: text("answer"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", BARE, session_servers=local, prompt="hi")
        refused = await wait_for(lambda: _finished(wolf, sid), timeout=60)
        await wolf.close(sid)
    assert refused.last_outcome == "failed" and script.calls == 0
    assert "127.0.0.1, a loopback, link-local or private address" in (refused.last_output or "")
    assert "private_urls: true" in (refused.last_output or "")
    # The operator may allow it; a manifest's own servers on this machine keep working by default.
    async with run_worker(local_models={"m": script.model}, policy=WorkerPolicy(private_urls=True)):
        sid = await wolf.start_session("a", BARE, session_servers=local, prompt="hi")
        allowed = await wait_for(lambda: _finished(wolf, sid), timeout=60)
        await wolf.close(sid)
    assert allowed.last_outcome == "completed" and "add" in script.offered[-1]


async def test_the_url_policy():
    policy = WorkerPolicy(urls=["https://mcp.example.com/*"])
    policy.check_url("https://mcp.example.com/mcp")
    for url in ("https://evil.example.com/mcp", "file:///etc/passwd", "http://mcp.example.com/mcp"):
        with pytest.raises(PolicyError):
            policy.check_url(url)
    manifest = Manifest.model_validate({"host": {"mcp_servers": {"x": {"url": "http://10.0.0.1/mcp"}}}})
    assert "not allowed by the worker policy" in policy.problems(manifest, "default")[0]
    for url in ("http://localhost:1/mcp", "http://[::1]/mcp", "http://169.254.169.254/", "http://10.1.2.3/"):
        with pytest.raises(PolicyError, match="private address"):
            await WorkerPolicy().check_reach(url)
    await WorkerPolicy(private_urls=True).check_reach("http://localhost:1/mcp")
