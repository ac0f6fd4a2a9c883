"""The host MCP pool: one process per server across sessions, reconnect after a crash, eviction."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from typing import Any

import httpx2
import mcp_types
import pytest
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from agentwolf.config.manifest import McpServerConfig
from agentwolf.extensions import mcp_transports
from agentwolf.extensions.pool import McpPool, McpUnavailable
from tests.conftest import TOOLS_SERVER, make_manifest, tools_server, wait_for
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
        mcp_servers={
            "tools": tools_server(WOLF_PID_FILE=str(pid_file)),
            "time": {"command": "mcp-server-time"},
        },
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


def _pid_pool(pid_file, **options) -> McpPool:
    """Its server writes its pid to `pid_file` and notes each `slow` call in `started` beside it."""
    env = {"WOLF_PID_FILE": str(pid_file), "WOLF_SLOW_STARTED": str(pid_file.with_name("started"))}
    config = McpServerConfig(command=sys.executable, args=[TOOLS_SERVER], env=env)
    return McpPool({"t": config}, backoff=0.1, **options)


async def test_a_server_that_dies_while_idle_is_replaced_before_the_next_call(tmp_path):
    pid_file = tmp_path / "pids"
    pool = _pid_pool(pid_file)
    try:
        assert (await pool.call_tool("t", "add", {"a": 1, "b": 2})).content[0].text == "3"
        os.kill(_pids(pid_file)[0], signal.SIGKILL)
        await wait_for(lambda: pool.live_servers() == [], timeout=10)  # noticed without any call
        # The next call connects first instead of getting "Connection closed".
        assert (await pool.call_tool("t", "add", {"a": 2, "b": 2})).content[0].text == "4"
        assert pool.connects["t"] == 2 and len(_pids(pid_file)) == 2
    finally:
        await pool.close()


async def test_a_call_in_flight_when_its_server_dies_fails_and_is_not_retried(tmp_path):
    pid_file = tmp_path / "pids"
    pool = _pid_pool(pid_file)
    try:
        assert (await pool.call_tool("t", "add", {"a": 1, "b": 2})).content[0].text == "3"
        call = asyncio.create_task(pool.call_tool("t", "slow", {"seconds": 600}))
        await wait_for(pid_file.with_name("started").exists, timeout=60)  # the server runs it
        os.kill(_pids(pid_file)[0], signal.SIGKILL)
        with pytest.raises(MCPError) as failed:
            await asyncio.wait_for(call, 120)  # when the server dies, not when the 600 s are up
        assert failed.value.code == mcp_types.CONNECTION_CLOSED
        # At most once: the server may have acted on it, so no new process ran it again.
        assert pool.connects["t"] == 1 and len(_pids(pid_file)) == 1
        assert (await pool.call_tool("t", "add", {"a": 2, "b": 2})).content[0].text == "4"
        assert pool.connects["t"] == 2 and len(_pids(pid_file)) == 2
    finally:
        await pool.close()


def _start_http_server(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, TOOLS_SERVER, "streamable-http", str(port)], stderr=subprocess.DEVNULL
    )


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


async def test_an_http_server_whose_stream_ends_is_reconnected_with_its_change_stream():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = _start_http_server(port)
    pool = McpPool(
        {"h": McpServerConfig(url=f"http://127.0.0.1:{port}/mcp")}, on_list_changed=lambda s, k: None
    )
    try:
        await wait_for(lambda: _listening(port))
        assert (await pool.call_tool("h", "add", {"a": 1, "b": 2})).content[0].text == "3"
        server.kill()
        server.wait()
        await wait_for(lambda: pool.live_servers() == [], timeout=15)  # its change stream ended
        server = _start_http_server(port)
        await wait_for(lambda: _listening(port))
        assert (await pool.call_tool("h", "add", {"a": 2, "b": 2})).content[0].text == "4"
        assert pool.connects["h"] == 2 and pool.live_servers() == ["h"]  # listening again
    finally:
        await pool.close()
        server.kill()
        server.wait()


async def test_http_reconnects_close_their_http_clients(http_tools_server, monkeypatch):
    created: list[httpx2.AsyncClient] = []

    def spy(**options: Any) -> httpx2.AsyncClient:
        created.append(create_mcp_http_client(**options))
        return created[-1]

    monkeypatch.setattr(mcp_transports, "create_mcp_http_client", spy)
    await wait_for(lambda: _listening(int(http_tools_server.split(":")[2].split("/")[0])))
    # One client allowed: every call to the other server evicts the last one and reconnects.
    pool = McpPool({name: McpServerConfig(url=http_tools_server) for name in "ab"}, max_clients=1)
    try:
        for i in range(20):
            assert (await pool.call_tool("ab"[i % 2], "echo", {"text": str(i)})).content[0].text == str(i)
        assert pool.connects == {"a": 10, "b": 10} and len(created) == 20
        await wait_for(lambda: [c.is_closed for c in created] == [True] * 19 + [False])
    finally:
        await pool.close()
    assert all(c.is_closed for c in created)


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
        await wait_for(lambda: pool.live_servers() == [], timeout=60)
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
    from agentwolf.hosts.host_registry import HostRegistry

    hosts = HostRegistry()
    first = hosts.ensure(make_manifest({"limits": {"max_steps": 3}}), "t1")
    assert hosts.ensure(make_manifest({"limits": {"max_steps": 9}}), "t1") is first
    assert hosts.ensure(make_manifest(), "t2") is not first  # tenants never share
    assert hosts.ensure(make_manifest(mcp_servers={}), "t1") is not first
    assert len(hosts.hosts()) == 3
