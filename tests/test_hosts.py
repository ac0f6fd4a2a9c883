"""Hosts per (config, tenant): separate MCP processes and skill sets per tenant; idle hosts close and
return."""

from __future__ import annotations

import uuid
from pathlib import Path

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.extensions.registry import Scope, ScopeLevel
from agentwolf.extensions.skills import LocalSkillRoot
from agentwolf.hosts.host import HostRegistry
from agentwolf.workflows.types import ExtensionsChanged
from tests.conftest import tools_server, wait_for
from tests.support.models import Script, text, tool
from tests.support.polls import alive
from tests.test_watch import inotify_usage


def _pids(pid_file: Path) -> list[int]:
    return [int(p) for p in pid_file.read_text().split()] if pid_file.exists() else []


def _manifest(pid_file: Path, skills: Path) -> Manifest:
    return Manifest.model_validate(
        {
            "host": {"mcp_servers": {"tools": tools_server(WOLF_PID_FILE=str(pid_file))}},
            "agents": {
                "a": {
                    "model": "local:m",
                    "capabilities": [{"mcp": "tools"}, {"skills": [f"{skills}/${{tenant}}"]}],
                }
            },
        }
    )


def _echo_then_answer(s: Script):
    last = s.requests[-1][-1]
    return (
        tool("echo", {"text": "x"}) if any(p.part_kind == "user-prompt" for p in last.parts) else text("ok")
    )


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
            instructions = next(
                m.instructions for m in reversed(script.requests[-1]) if getattr(m, "instructions", None)
            )
            other = next(t for t in tenants if t != tenant)
            assert f"only-{tenant}" in instructions and f"only-{other}" not in instructions
            await wolf.close(sid)
        assert len(hosts.hosts()) == 2
        assert len(set(_pids(pid_file))) == 2  # one tools server per tenant, none shared


async def test_idle_hosts_close_their_mcp_servers_and_come_back_on_demand(
    wolf, task_queue, run_worker, tmp_path
):
    pid_file = tmp_path / "pids"
    script = Script(_echo_then_answer)
    async with run_worker(local_models={"m": script.model}, host_idle_timeout=0.5) as registry:
        sid = await wolf.start_session("a", _manifest(pid_file, tmp_path / "skills"))
        await _turn(wolf, sid, "first", 1)
        (first,) = _pids(pid_file)
        await wait_for(lambda: registry.evicted == 1 and not alive(first), timeout=20)
        assert registry.hosts() == []
        await _turn(wolf, sid, "second", 2)  # the host and its server come back for the next turn
        pids = _pids(pid_file)
        assert len(pids) == 2 and alive(pids[1])
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


def _versioned(skills: Path, version: int) -> Manifest:
    """The same config but for the agent's instructions: a new version of agent `a`."""
    manifest = _manifest(skills.parent / "pids", skills)
    agents = {"a": manifest.agents["a"].model_copy(update={"instructions": f"version {version}"})}
    return manifest.model_copy(update={"agents": agents})


async def test_a_host_forgets_old_sessions_and_the_agent_versions_nobody_uses(tmp_path):
    skills = tmp_path / "skills"
    (skills / "default" / "review").mkdir(parents=True)
    (skills / "default" / "review" / "SKILL.md").write_text(
        "---\nname: review\ndescription: Review.\n---\nbody\n"
    )
    registry = HostRegistry(host_idle_timeout=float("inf"))
    host = registry.ensure(_versioned(skills, 0), "default")
    host.max_sessions = 10
    try:
        for i in range(200):  # sessions come and go; every 20th brings a new version of the agent
            sid = f"wolf/default/s{i}"
            manifest = _versioned(skills, i // 20)
            scope = await host.scope(manifest, "a", sid, "t1")
            assert [e.name for e in await host.registry.skills(scope).list_skills()] == ["review"]
            host.track(sid, ["mcp:tools", f"skills:{skills / 'default'}"])
        assert list(host.sessions) == [f"wolf/default/s{i}" for i in range(190, 200)]
        # Only the newest version is registered: its root and server, plus the host's watcher.
        assert len(host.registry._entries) == 3
        old = Scope(ScopeLevel.AGENT, f"a@{_versioned(skills, 0).agent_identity('a')}")
        assert host.registry.visible(old, LocalSkillRoot) == []
    finally:
        await registry.close()


async def test_idle_hosts_take_their_configs_with_them(tmp_path):
    registry = HostRegistry(host_idle_timeout=0.3)
    try:
        for i in range(20):
            manifest = _versioned(tmp_path / "skills", i)
            with registry.serving(manifest.identity, f"t{i % 2}"):
                registry.ensure(manifest, f"t{i % 2}")
        assert len(registry.manifests) == 20 and len(registry.hosts()) == 2
        await wait_for(lambda: registry.hosts() == [], timeout=10)
        assert registry.manifests == {} and not registry._serving
    finally:
        await registry.close()


async def test_hosts_watching_one_folder_share_its_watch(tmp_path):
    skills = tmp_path / "shared"
    (skills / "review").mkdir(parents=True)
    (skills / "review" / "SKILL.md").write_text("---\nname: review\ndescription: Review.\n---\nbody\n")
    manifest = Manifest.model_validate({"host": {"skills": {"paths": [str(skills)]}}, "agents": {"a": {}}})
    told: list[str] = []

    async def notify(workflow_id: str, change: ExtensionsChanged) -> None:
        told.append(workflow_id)

    before = inotify_usage()
    registry = HostRegistry(host_idle_timeout=float("inf"))
    registry.notify = notify
    try:
        hosts = [registry.ensure(manifest, f"t{i}") for i in range(200)]
        for i, host in enumerate(hosts):
            await host.scope(manifest, "a", f"wolf/t{i}/s", "-")
            host.track(f"wolf/t{i}/s", [f"skills:{skills}"])
        assert inotify_usage()[0] == before[0] + 1  # one inotify instance for 200 hosts (the limit is 128)
        for host in hosts[1:]:  # a host closing stops only its share
            await host.close()
        (skills / "new").mkdir()
        (skills / "new" / "SKILL.md").write_text("---\nname: new\ndescription: New.\n---\nbody\n")
        await wait_for(lambda: told == ["wolf/t0/s"], timeout=15)
    finally:
        await registry.close()
    assert inotify_usage() == before
