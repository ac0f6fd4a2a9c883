"""ExtensionRegistry scopes and McpServerCap against real MCP servers (a skills server, server-everything)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from agentwolf.config.manifest import McpServerConfig
from agentwolf.extensions.mcp import McpServerCap
from agentwolf.extensions.pool import McpPool
from agentwolf.extensions.registry import POOL, ExtensionRegistry, Scope, ScopeLevel
from agentwolf.extensions.skills import LocalSkillRoot
from agentwolf.extensions.types import ChangeEvent, ExtensionError
from tests.conftest import SUPPORT, wait_for
from tests.support.polls import settled

EVERYTHING = Path(__file__).parent.parent / "node_modules" / ".bin" / "mcp-server-everything"


def skill(
    root: Path, name: str, description: str = "Does things.", body: str = "Do it well.", extra: str = ""
) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}\n")
    return folder


def agent(name: str) -> Scope:
    return Scope(ScopeLevel.AGENT, name)


def turn(agent_name: str, session: str, turn_id: str) -> Scope:
    return Scope(ScopeLevel.TURN, agent_name, session, turn_id)


# -- registry scopes ---------------------------------------------------------------------------


async def test_scopes_see_their_own_level_and_every_outer_one(tmp_path: Path) -> None:
    registry = ExtensionRegistry()
    caps = {name: LocalSkillRoot(tmp_path / name) for name in ("pool", "agent", "other", "s1", "s2", "t1")}
    registry.add(caps["pool"], POOL)
    registry.add(caps["agent"], agent("a"))
    registry.add(caps["other"], agent("b"))
    registry.add(caps["s1"], Scope(ScopeLevel.SESSION, "a", "s1"))
    registry.add(caps["s2"], Scope(ScopeLevel.SESSION, "a", "s2"))
    registry.add(caps["t1"], turn("a", "s1", "t1"))

    def names(scope: Scope) -> list[str]:
        return [Path(c.path).name for c in registry.visible(scope, LocalSkillRoot)]

    assert names(POOL) == ["pool"]
    assert names(agent("a")) == ["agent", "pool"]
    assert names(Scope(ScopeLevel.SESSION, "a", "s1")) == ["s1", "agent", "pool"]
    assert names(turn("a", "s1", "t1")) == ["t1", "s1", "agent", "pool"]  # innermost first
    assert names(turn("a", "s2", "t1")) == ["s2", "agent", "pool"]  # another session's entries stay hidden
    assert names(turn("b", "s1", "t1")) == ["other", "pool"]

    registry.clear_turns("s1", keep="t2")
    assert names(turn("a", "s1", "t1")) == ["s1", "agent", "pool"]
    registry.add(caps["t1"], turn("a", "s1", "t1"))
    registry.clear_session("s1")
    assert names(turn("a", "s1", "t1")) == ["agent", "pool"]
    assert names(Scope(ScopeLevel.SESSION, "a", "s2")) == ["s2", "agent", "pool"]
    await registry.close()


def test_scopes_need_their_keys() -> None:
    with pytest.raises(ValueError, match="agent_name"):
        Scope(ScopeLevel.AGENT)
    with pytest.raises(ValueError, match="session_id, turn_id"):
        Scope(ScopeLevel.TURN, "a")


async def test_inner_skills_win_and_shadowing_is_reported(tmp_path: Path) -> None:
    registry = ExtensionRegistry()
    skill(tmp_path / "pool", "review", description="Pool review.")
    skill(tmp_path / "agent", "review", description="Agent review.")
    skill(tmp_path / "pool", "deploy")
    registry.add(LocalSkillRoot(tmp_path / "pool"), POOL)
    registry.add(LocalSkillRoot(tmp_path / "agent"), agent("a"))
    manager = registry.skills(agent("a"))
    listed = {s.name: s.description for s in await manager.list_skills()}
    assert listed == {"review": "Agent review.", "deploy": "Does things."}
    assert any("review" in warning for warning in manager.shadowed)
    body = await registry.resolve_uri("skill://review/SKILL.md", agent("a"))
    assert body.text is not None and "Do it well." in body.text
    await registry.close()


@pytest.mark.parametrize("uri", ["http://x/y", "file:///etc/passwd", "ftp://a", "no-scheme", "SKILLS://x"])
async def test_unknown_uri_schemes_are_refused(uri: str) -> None:
    registry = ExtensionRegistry()
    with pytest.raises(ExtensionError, match="unknown URI scheme"):
        await registry.resolve_uri(uri, POOL)


def test_composition_cycles_are_refused_and_deep_chains_warned(caplog: pytest.LogCaptureFixture) -> None:
    registry = ExtensionRegistry(max_composition_depth=3)
    assert registry.link("skill:a", "mcp:x") == 1
    assert registry.link("mcp:x", "skill:b") == 2
    assert registry.link("skill:b", "mcp:y") == 3
    with pytest.raises(ExtensionError, match="cycle"):
        registry.link("mcp:y", "skill:a")
    with pytest.raises(ExtensionError, match="cycle"):
        registry.link("skill:c", "skill:c")
    with caplog.at_level(logging.WARNING):
        assert registry.link("mcp:y", "skill:d") == 4
    assert "4 deep" in caplog.text


# -- McpServerCap on real servers --------------------------------------------------------------


def skills_server(skills_dir: Path, *args: str) -> McpServerConfig:
    return McpServerConfig(
        command=sys.executable,
        args=[str(SUPPORT / "skills_server.py"), *args],
        env={"WOLF_SKILLS_DIR": str(skills_dir)},
    )


@pytest.mark.parametrize("mode", ["sep-2640", "resources"])
async def test_mcp_hosted_skills(tmp_path: Path, mode: str) -> None:
    skill(tmp_path, "review", body="Check every line.")
    (tmp_path / "review" / "checklist.md").write_text("1. tests\n")
    skill(tmp_path, "wrong-name")
    (tmp_path / "wrong-name" / "SKILL.md").write_text("---\nname: other\ndescription: x\n---\nbody\n")
    pool = McpPool({"s": skills_server(tmp_path, *(["--plain"] if mode == "resources" else []))})
    cap = McpServerCap(pool, "s")
    try:
        skills = await cap.list_skills()
        assert [s.name for s in skills] == ["review"]
        assert skills[0].origin == "mcp:s" and skills[0].uri == "skill://review/SKILL.md"
        assert any("other" in p for p in cap.problems)  # last path segment must equal the name
        body = await cap.read_skill("skill://review/SKILL.md")
        assert body.text is not None and body.text.strip() == "Check every line."  # frontmatter stripped
        assert (await cap.read_skill("skill://review/checklist.md")).text == "1. tests\n"
        with pytest.raises(ExtensionError, match="not a file of a listed skill"):
            await cap.read_skill("notes://readme")  # a resource, but never a skill
        commands = await cap.list_commands()
        assert [c.name for c in commands] == ["s:review"]
        assert await cap.get_command("s:review", {"topic": "the diff"}) == "Please review the diff carefully."
    finally:
        cap.close()
        await pool.close()


async def test_a_skill_file_that_no_longer_matches_its_digest_is_refused(tmp_path: Path) -> None:
    skill(tmp_path, "review")
    pool = McpPool({"s": skills_server(tmp_path)})
    cap = McpServerCap(pool, "s")
    try:
        await cap.list_tools()  # the server has read its files now
        (tmp_path / "review" / "SKILL.md").write_text("---\nname: review\ndescription: changed\n---\nevil\n")
        await cap.list_skills()  # lists the new digest; the resource still serves the old text
        with pytest.raises(ExtensionError, match="digest"):
            await cap.read_skill("skill://review/SKILL.md")
    finally:
        cap.close()
        await pool.close()


@asynccontextmanager
async def observed(
    name: str, config: McpServerConfig, **debounce: float
) -> AsyncIterator[tuple[McpServerCap, list[ChangeEvent]]]:
    """A server on its own pool, wired as a host wires it, with every change event it emits."""
    pool = McpPool({name: config})
    cap = McpServerCap(pool, name, **debounce)
    pool.on_list_changed = lambda server, kind: cap.list_changed(kind)
    events: list[ChangeEvent] = []

    async def collect() -> None:
        async for event in cap.on_change():
            events.append(event)

    collector = asyncio.create_task(collect())
    try:
        yield cap, events
    finally:
        collector.cancel()
        cap.close()
        await pool.close()


async def test_list_changed_invalidates_the_cached_tools_and_storms_coalesce(tmp_path: Path) -> None:
    # A 2 s quiet window: however slowly a loaded machine delivers the storm, its notifications come
    # closer together than that (the defaults, 0.25 s and 2 s, made the count depend on its speed).
    async with observed("s", skills_server(tmp_path), quiet=2.0, max_wait=120.0) as (cap, events):
        assert "fresh_listen" not in [t.name for t in await cap.list_tools()]
        # A 2026 session: the change arrives on the `subscriptions/listen` stream (server-everything,
        # below, speaks 2025 and uses notifications/tools/list_changed).
        await cap.call_tool("grow", {"name": "fresh_listen", "via": "listen"})
        await wait_for(lambda: events)
        assert events[0].source == "mcp:s"
        assert "fresh_listen" in [t.name for t in await cap.list_tools()]
        events.clear()
        await cap.call_tool("grow", {"name": "stormy", "storm": 500})  # 1000 notifications (both paths)
        await wait_for(lambda: events, timeout=120)
        await settled(events, seconds=4.0, timeout=120)  # any straggler events are in
        assert 1 <= len(events) <= 3
        assert "stormy" in [t.name for t in await cap.list_tools()]


@pytest.fixture
def everything() -> McpServerConfig:
    if not EVERYTHING.exists():
        pytest.fail("server-everything is missing: run `npm install` in the repository (README, .ci/run)")
    return McpServerConfig(command=str(EVERYTHING), args=["stdio"])


async def test_server_everything_tools_resources_prompts_and_changes(everything: McpServerConfig) -> None:
    async with observed("everything", everything) as (cap, events):
        tools = {t.name for t in await cap.list_tools()}
        assert {"echo", "get-sum"} <= tools
        result = await cap.call_tool("get-sum", {"a": 2, "b": 3})
        assert "5" in result.content[0].text
        resources = await cap.list_resources()
        assert resources and all(r.server == "everything" for r in resources)
        first = await cap.read_resource(resources[0].uri)
        assert first.text or first.blob
        assert await cap.list_skills() == []  # resources, but none is a skill://.../SKILL.md
        commands = {c.name: c for c in await cap.list_commands()}
        assert "everything:simple-prompt" in commands
        assert [a.name for a in commands["everything:args-prompt"].arguments][:1] == ["city"]
        text = await cap.get_command("everything:args-prompt", {"city": "Oslo"})
        assert "Oslo" in text
        # A tool that registers a session resource: the server announces resources/list_changed.
        before = len(resources)
        await cap.call_tool(
            "gzip-file-as-resource",
            {"name": "hi.gz", "data": "data:text/plain;base64,aGVsbG8=", "outputType": "resourceLink"},
        )
        await wait_for(lambda: events)
        assert events[0].source == "mcp:everything" and "resources" in events[0].detail
        assert len(await cap.list_resources()) == before + 1


async def test_allowed_commands_limit_stdio_servers(tmp_path: Path) -> None:
    pool = McpPool({"s": skills_server(tmp_path)}, allowed_commands=["node"])
    try:
        with pytest.raises(Exception, match="not in host.allowed_commands"):
            await pool.list_tools("s")
    finally:
        await pool.close()
