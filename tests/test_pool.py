"""The host MCP pool: one process per server across sessions, reconnect after a crash, eviction."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest
from mcp.shared.exceptions import MCPError

from agentwolf.config.manifest import McpServerConfig
from agentwolf.worker.pool import McpPool, McpUnavailable
from tests.conftest import TOOLS_SERVER, make_manifest, tools_server
from tests.support.models import Script, text, tools


def _pids(path):
    return [int(x) for x in open(path).read().split()] if os.path.exists(path) else []


async def test_ten_sessions_share_one_process_per_server(wolf, run_worker, tmp_path):
    pid_file = tmp_path / "pids"
    # Each session: 5 steps of 2 parallel calls (one per server) = 10 calls; 10 sessions = 100 calls.
    def decide(s):
        if _steps(s) > 5:
            return text("done")
        return tools(("add", {"a": _steps(s), "b": 1}), ("convert_time", _convert(_steps(s))))

    script = Script(decide)
    manifest = make_manifest(
        {"capabilities": [{"mcp": "tools"}, {"mcp": "time"}]},
        mcp_servers={"tools": tools_server(WOLF_PID_FILE=str(pid_file)), "time": {"command": "mcp-server-time"}},
    )
    async with run_worker(local_models={"m": script.model}) as hosts:
        sids = await asyncio.gather(*(wolf.submit(f"job {i}", "a", manifest) for i in range(10)))
        results = await asyncio.gather(*(wolf.result(sid) for sid in sids))
        (host,) = hosts.hosts()
        assert host.pool.connects == {"tools": 1, "time": 1}
    assert sum(r.counters.usage.tool_calls for r in results) == 100
    assert len(_pids(pid_file)) == 1


def _steps(script):
    """The step number of the latest request in its own session (messages so far / 2)."""
    return (len(script.requests[-1]) + 1) // 2


async def test_reconnects_after_the_server_crashes(tmp_path):
    pid_file = tmp_path / "pids"
    pool = McpPool(
        {"t": McpServerConfig(command=sys.executable, args=[TOOLS_SERVER], env={"WOLF_PID_FILE": str(pid_file)})},
        backoff=0.1,
    )
    try:
        assert (await pool.call_tool("t", "add", {"a": 1, "b": 2})).content[0].text == "3"
        os.kill(_pids(pid_file)[0], signal.SIGKILL)
        with pytest.raises(MCPError):  # the in-flight call fails at once
            await pool.call_tool("t", "slow", {"seconds": 5})
        assert (await pool.call_tool("t", "add", {"a": 2, "b": 2})).content[0].text == "4"
        assert pool.connects["t"] == 2 and len(_pids(pid_file)) == 2
    finally:
        await pool.close()


async def test_the_client_cap_evicts_the_least_recently_used():
    servers = {f"s{i}": McpServerConfig(command=sys.executable, args=[TOOLS_SERVER]) for i in range(3)}
    pool = McpPool(servers, max_clients=2)
    try:
        for name in servers:
            await pool.call_tool(name, "echo", {"text": name})
        assert sorted(pool.live_servers()) == ["s1", "s2"]
    finally:
        await pool.close()


async def test_idle_clients_are_evicted_and_come_back_on_demand():
    pool = McpPool({"s": McpServerConfig(command=sys.executable, args=[TOOLS_SERVER])}, idle_timeout=0.4)
    try:
        await pool.call_tool("s", "echo", {"text": "a"})
        await asyncio.sleep(1.0)
        assert pool.live_servers() == []
        assert (await pool.call_tool("s", "echo", {"text": "again"})).content[0].text == "again"
        assert pool.connects["s"] == 2
    finally:
        await pool.close()


async def test_unknown_server_is_a_clear_error():
    pool = McpPool({})
    with pytest.raises(McpUnavailable, match="not declared"):
        await pool.call_tool("ghost", "x", {})


def _convert(step):
    return {"source_timezone": "UTC", "time": f"1{step}:00", "target_timezone": "Europe/Paris"}


def test_configs_differing_only_in_agents_share_one_host():
    from agentwolf.worker.host import HostRegistry

    hosts = HostRegistry()
    first = hosts.ensure(make_manifest({"limits": {"max_steps": 3}}), "t1")
    assert hosts.ensure(make_manifest({"limits": {"max_steps": 9}}), "t1") is first
    assert hosts.ensure(make_manifest(), "t2") is not first  # tenants never share
    assert hosts.ensure(make_manifest(mcp_servers={}), "t1") is not first
    assert len(hosts.hosts()) == 3
