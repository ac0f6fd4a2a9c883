"""Hosts per (config, tenant): separate MCP processes and skill sets per tenant; idle hosts close and return."""

from __future__ import annotations

import uuid
from pathlib import Path

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.worker.host import HostRegistry
from tests.conftest import tools_server, wait_for
from tests.support.models import Script, text, tool


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _pids(pid_file: Path) -> list[int]:
    return [int(p) for p in pid_file.read_text().split()] if pid_file.exists() else []


def _manifest(pid_file: Path, skills: Path) -> Manifest:
    return Manifest.model_validate(
        {
            "host": {"mcp_servers": {"tools": tools_server(WOLF_PID_FILE=str(pid_file))}},
            "agents": {
                "a": {"model": "local:m", "capabilities": [{"mcp": "tools"}, {"skills": [f"{skills}/${{tenant}}"]}]}
            },
        }
    )


def _echo_then_answer(s: Script):
    last = s.requests[-1][-1]
    return tool("echo", {"text": "x"}) if any(p.part_kind == "user-prompt" for p in last.parts) else text("ok")


async def _turn(wolf: WolfClient, sid: str, prompt: str, turns: int) -> None:
    await wolf.prompt(sid, prompt)
    await wait_for(lambda: _turns_done(wolf, sid, turns))


async def _turns_done(wolf: WolfClient, sid: str, turns: int) -> bool:
    status = await wolf.status(sid)
    return status.counters.turns >= turns and status.state == "idle"


async def test_two_tenants_get_their_own_mcp_processes_and_skills(client, task_queue, run_worker, tmp_path):
    pid_file, skills = tmp_path / "pids", tmp_path / "skills"
    tenants = [f"t{i}-{uuid.uuid4().hex[:6]}" for i in range(2)]
    for tenant in tenants:
        folder = skills / tenant / f"only-{tenant}"
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(f"---\nname: only-{tenant}\ndescription: For {tenant}.\n---\nbody\n")
    script = Script(_echo_then_answer)
    manifest = _manifest(pid_file, skills)
    async with run_worker(local_models={"m": script.model}) as hosts:
        for tenant in tenants:
            wolf = WolfClient(client, tenant=tenant, task_queue=task_queue)
            sid = await wolf.start_session("a", manifest)
            await _turn(wolf, sid, "hi", 1)
            instructions = next(m.instructions for m in reversed(script.requests[-1]) if getattr(m, "instructions", None))
            other = next(t for t in tenants if t != tenant)
            assert f"only-{tenant}" in instructions and f"only-{other}" not in instructions
            await wolf.close(sid)
        assert len(hosts.hosts()) == 2
        assert len(set(_pids(pid_file))) == 2  # one tools server per tenant, none shared


async def test_idle_hosts_close_their_mcp_servers_and_come_back_on_demand(wolf, task_queue, run_worker, tmp_path):
    pid_file = tmp_path / "pids"
    script = Script(_echo_then_answer)
    registry = HostRegistry({"m": script.model}, host_idle_timeout=0.5)
    async with run_worker(hosts=registry):
        sid = await wolf.start_session("a", _manifest(pid_file, tmp_path / "skills"))
        await _turn(wolf, sid, "first", 1)
        (first,) = _pids(pid_file)
        await wait_for(lambda: registry.evicted == 1 and not _alive(first), timeout=20)
        assert registry.hosts() == []
        await _turn(wolf, sid, "second", 2)  # the host and its server come back for the next turn
        pids = _pids(pid_file)
        assert len(pids) == 2 and _alive(pids[1])
        status = await wolf.status(sid)
        assert status.last_outcome == "completed"
        await wolf.close(sid)


async def test_concurrent_first_uses_of_a_host_see_a_fully_registered_agent(tmp_path):
    """Two compiles racing on a fresh host (after a restart or an eviction) get the same tools and skills."""
    import asyncio

    from agentwolf.extensions.mcp import McpServerCap
    from agentwolf.extensions.skills import LocalSkillRoot

    manifest = _manifest(tmp_path / "pids", tmp_path / "skills")
    registry = HostRegistry(host_idle_timeout=float("inf"))
    host = registry.ensure(manifest, "default")
    try:
        scopes = await asyncio.gather(*(host.scope(manifest, "a", f"s{i}", "t") for i in range(5)))
        views = [[type(c) for c in host.registry.visible(scope)] for scope in scopes]
        assert all(view == views[0] for view in views)
        assert LocalSkillRoot in views[0] and McpServerCap in views[0]
    finally:
        await registry.close()
