"""Skills, slash commands and hot reload in running sessions (real Temporal, real watcher, real MCP
servers)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelRequest, ToolReturnPart

from agentwolf.config.manifest import Manifest
from agentwolf.workflows.types import Event, workflow_id
from tests.conftest import SUPPORT, TOOLS_SERVER, record_history, tools_server, wait_for
from tests.support.models import Script, sequence, text, tool, tools, user_texts
from tests.support.polls import alive
from tests.support.skills import write_skill


def manifest(
    skills: Path, *caps: dict[str, Any], allow_skill_servers: bool = False, **servers: dict[str, Any]
) -> Manifest:
    return Manifest.model_validate(
        {
            "host": {"mcp_servers": servers, "skills": {"allow_mcp_servers": allow_skill_servers}},
            "agents": {
                "a": {
                    "model": "local:m",
                    "instructions": "Be brief.",
                    "capabilities": [{"skills": [str(skills)]}, *caps],
                }
            },
        }
    )


def instructions(script: Script, request: int = -1) -> str:
    last = [m for m in script.requests[request] if isinstance(m, ModelRequest)][-1]
    return last.instructions or ""


def returns(script: Script, request: int = -1) -> dict[str, str]:
    return {
        p.tool_name: str(p.content)
        for m in script.requests[request]
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }


async def run_turn(wolf: Any, sid: str, prompt: str) -> list[Event]:
    offset = await wolf.event_offset(sid)
    await wolf.prompt(sid, prompt)
    events = []
    async for _, event in wolf.events(sid, offset):
        events.append(event)
        if event.kind == "turn_finished":
            return events
    return events


async def test_a_running_session_picks_up_a_new_skill_and_loads_it_on_demand(
    wolf, run_worker, tmp_path, client
):
    skills = tmp_path / "skills"
    write_skill(skills, "review", body="Read every line.")
    script = Script(
        lambda s: tool("load_skill", {"name": "deploy"}) if s.calls == 2 else text(f"answer {s.calls}")
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest(skills))
        await run_turn(wolf, sid, "hello")
        catalog = instructions(script)
        assert catalog.startswith("Be brief.") and "<available-skills>" in catalog
        assert "review" in catalog and "deploy" not in catalog
        assert "Read every line." not in catalog  # progressive disclosure: bodies load on demand

        offset = await wolf.event_offset(sid)
        write_skill(skills, "deploy", body="Ship it with care.", atomic=True)
        (skills / "deploy" / "runbook.md").write_text("step 1\n")
        async for _, event in wolf.events(sid, offset):  # the worker tells the idle session
            if event.kind == "extensions_changed":
                assert "deploy" in (event.text or "")
                break
        events = await run_turn(wolf, sid, "deploy please")
        assert "deploy" in instructions(script, 1)  # before the first model request of the turn
        recompiled = [e for e in events if e.kind == "compiled"]
        assert len(recompiled) == 1 and "recompiled" in (recompiled[0].text or "")
        loaded = returns(script)["load_skill"]
        assert (
            "Ship it with care." in loaded and "runbook.md" in loaded and "---" not in loaded.split("\n")[0]
        )
        await record_history(client, workflow_id("default", sid), "skills_hot_reload")
        await wolf.close(sid)


async def test_a_new_mcp_tool_reaches_the_very_next_model_request(wolf, run_worker, tmp_path, client):
    script = Script(sequence(tool("grow", {"name": "fresh"}), tool("fresh", {}), text("done")))
    skills_server = {"command": sys.executable, "args": [str(SUPPORT / "skills_server.py")]}
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("grow a tool", "a", manifest(tmp_path, {"mcp": "s"}, s=skills_server))
        result = await wolf.result(sid)
        events = [e async for _, e in wolf.events(sid)]
        await record_history(client, workflow_id("default", sid), "mcp_tools_changed")
    assert result.outcome == "completed"
    assert returns(script)["fresh"] == "fresh here"  # the model saw and called the new tool
    kinds = [e.kind for e in events]
    assert kinds.index("extensions_changed") < kinds.index(
        "tool_call_started", kinds.index("extensions_changed")
    )


async def test_slash_commands_expand_local_skills_and_mcp_prompts(wolf, run_worker, tmp_path):
    skills = tmp_path / "skills"
    write_skill(skills, "review", body="Review $ARGUMENTS; start with $1.")
    script = Script(lambda s: text(f"answer {s.calls}"))
    skills_server = {"command": sys.executable, "args": [str(SUPPORT / "skills_server.py")]}
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest(skills, {"mcp": "s"}, s=skills_server))
        events = await run_turn(wolf, sid, "/review main.py utils.py")
        assert user_texts(script.requests[-1])[-1] == "Review main.py utils.py; start with main.py."
        assert any(e.kind == "command_expanded" and e.tool == "/review" for e in events)
        await run_turn(wolf, sid, "/s:review the-release")
        assert user_texts(script.requests[-1])[-1] == "Please review the-release carefully."
        calls = script.calls
        events = await run_turn(wolf, sid, "/nope now")
        assert script.calls == calls  # no model request for an unknown command
        error = next(e for e in events if e.kind == "error")
        assert "unknown command /nope" in (error.text or "") and "/review" in (error.text or "")
        assert events[-1].outcome == "failed"
        transcript = await wolf.transcript(sid)
        assert "/nope now" in user_texts(transcript)  # the prompt is kept on record
        # Clients (wolf chat's Tab completion) read the same commands from the compiled agent.
        offered = await wolf.commands(sid)
        assert offered["/review"] == "The review skill."
        assert "/s:review" in offered
        await wolf.close(sid)
        await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "slash_commands")


async def test_allowed_tools_limit_the_agent_while_a_skill_is_active(wolf, run_worker, tmp_path):
    skills = tmp_path / "skills"
    write_skill(skills, "careful", extra="allowed-tools: echo\n")
    script = Script(
        sequence(
            tools(
                ("add", {"a": 5, "b": 5}), ("load_skill", {"name": "careful"})
            ),  # in one step: the load binds
            tool("add", {"a": 1, "b": 2}),
            text("ok"),
        )
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest(skills, {"mcp": "tools"}, tools=tools_server()))
        await run_turn(wolf, sid, "go")
        assert {"add", "echo", "load_skill"} <= script.offered[0]
        assert "not allowed while careful is active" in returns(script, 1)["add"]  # even beside the load
        assert script.offered[1] == {"echo", "load_skill", "read_skill_file"}  # while `careful` is active
        assert (
            "not allowed while careful is active" in returns(script)["add"]
        )  # and enforced, not just hidden
        await run_turn(wolf, sid, "again")  # the skill ended with its turn: every tool is back
        assert {"add", "echo", "load_skill"} <= script.offered[-1]
        await wolf.close(sid)


async def test_a_skill_brings_its_own_mcp_server_for_its_turn_only(wolf, run_worker, tmp_path):
    skills, pid_file = tmp_path / "skills", tmp_path / "pids"
    extra = (
        f"mcp-servers:\n  helper:\n    command: {sys.executable}\n    args: [{TOOLS_SERVER}]\n"
        f"    env: {{WOLF_PID_FILE: {pid_file}}}\n"
    )
    write_skill(skills, "helped", extra=extra)
    script = Script(
        sequence(tool("load_skill", {"name": "helped"}), tool("echo", {"text": "from helper"}), text("ok"))
    )
    async with run_worker(local_models={"m": script.model}) as hosts:
        sid = await wolf.start_session("a", manifest(skills, allow_skill_servers=True))
        other = await wolf.start_session("a", manifest(skills, allow_skill_servers=True))
        await run_turn(wolf, sid, "use the helper")
        assert "echo" not in script.offered[0]
        assert "echo" in script.offered[1]  # connected once the skill was loaded
        assert returns(script)["echo"] == "from helper"
        await run_turn(wolf, other, "hello")  # another session of the same agent: no helper tools
        assert "echo" not in script.offered[-1]
        await run_turn(wolf, sid, "and now?")  # the next turn: the skill's server is gone again
        assert "echo" not in script.offered[-1]
        (host,) = hosts.hosts()
        # No turn uses it any more: it left the pool (and all kept about it), and its process stopped.
        kept = [*host.pool.servers, *host.pool.connects, *host.mcp]
        assert not any(label.startswith("helped/helper@") for label in kept)
        (first,) = map(int, pid_file.read_text().split())
        await wait_for(lambda: not alive(first), timeout=15)
        await run_turn(wolf, sid, "/helped go")  # as a slash command the skill brings its server too
        assert "echo" in script.offered[-1]
        await wolf.close(sid)
        await wolf.close(other)


async def test_hostile_skills_and_a_list_changed_storm_do_not_stall_a_session(wolf, run_worker, tmp_path):
    skills, outside = tmp_path / "skills", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET")
    write_skill(skills, "good", body="Be good.")
    (skills / "good" / "escape").symlink_to(outside)  # a symlink inside the skill pointing out of it
    bomb = "---\nname: bomb\ndescription: &a [x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n---\nboom\n"
    (skills / "bomb").mkdir()
    (skills / "bomb" / "SKILL.md").write_text(bomb)
    (skills / "big").mkdir()
    (skills / "big" / "SKILL.md").write_text("---\nname: big\ndescription: big\n---\n" + "x" * 300_000)
    (skills / "away").symlink_to(outside)  # a whole skill folder outside the root
    attempts = [
        ("read_skill_file", {"name": "good", "path": "../../outside/secret.txt"}),
        ("read_skill_file", {"name": "good", "path": "%2e%2e/%2e%2e/outside/secret.txt"}),
        ("read_skill_file", {"name": "good", "path": "/etc/passwd"}),
        ("read_skill_file", {"name": "good", "path": "escape/secret.txt"}),
        ("read_skill_file", {"name": "good", "path": "a\\..\\..\\secret.txt"}),
        ("load_skill", {"name": "bomb"}),
        ("load_skill", {"name": "../good"}),
        ("grow", {"name": "stormy", "storm": 500}),
    ]
    script = Script(sequence(*(tool(n, a) for n, a in attempts), text("survived")))
    skills_server = {"command": sys.executable, "args": [str(SUPPORT / "skills_server.py")]}
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("try everything", "a", manifest(skills, {"mcp": "s"}, s=skills_server))
        result = await wolf.result(sid)
        events = [e async for _, e in wolf.events(sid)]
        transcript = await wolf.transcript(sid)
    assert result.outcome == "completed" and result.output == "survived"
    catalog = instructions(script, 0)
    assert "good" in catalog and not any(name in catalog for name in ("bomb", "big", "away"))
    finished = [e for e in events if e.kind == "tool_call_finished"]
    assert [e.outcome for e in finished[:7]] == ["failed"] * 7
    reasons = [e.text or "" for e in finished[:7]]
    assert all("may not leave the skill" in r for r in reasons[:2]), reasons
    assert "empty" in reasons[2] and "outside the skill" in reasons[3] and "backslash" in reasons[4]
    assert "unknown skill 'bomb'" in reasons[5] and "unknown skill '../good'" in reasons[6]
    assert "TOP-SECRET" not in str(transcript)
    assert sum(e.kind == "compiled" for e in events) <= 3  # 1000 notifications, a couple of recompiles


async def test_a_change_made_while_no_worker_watched_is_caught_by_the_next_worker(wolf, run_worker, tmp_path):
    skills = tmp_path / "skills"
    write_skill(skills, "review")
    script = Script(lambda s: text(f"answer {s.calls}"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest(skills))
        await run_turn(wolf, sid, "one")
    write_skill(skills, "deploy")  # no worker runs: nobody watches the folder
    async with run_worker(local_models={"m": script.model}):
        offset = await wolf.event_offset(sid)
        await run_turn(wolf, sid, "two")
        async for _, event in wolf.events(sid, offset):  # the new worker compared what it found
            if event.kind == "extensions_changed":
                assert "changed since the agent was compiled" in (event.text or "")
                break
        await run_turn(wolf, sid, "three")
        assert "deploy" in instructions(script)
        await wolf.close(sid)


async def test_skills_cannot_start_servers_unless_the_host_allows_and_never_see_secrets(
    wolf, run_worker, tmp_path, monkeypatch
):
    monkeypatch.setenv("WOLF_TEST_SECRET", "canary-4411")
    skills, pid_file = tmp_path / "skills", tmp_path / "helper.pids"  # the server writes its PID as it starts
    extra = (
        f"mcp-servers:\n  helper:\n    command: {sys.executable}\n    args: [{TOOLS_SERVER}]\n"
        f"    env: {{WOLF_PID_FILE: {pid_file}, LEAK: '${{WOLF_TEST_SECRET}}'}}\n"
    )
    write_skill(skills, "helped", extra=extra)
    load = tool("load_skill", {"name": "helped"})
    # Each session loads the skill; the second then asks the skill's server for LEAK.
    script = Script(sequence(load, text("ok"), load, tool("env", {"name": "LEAK"}), text("ok")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest(skills))  # allow_mcp_servers is off
        events = await run_turn(wolf, sid, "go")
        assert "Do the thing." in returns(script)["load_skill"]  # the skill itself still loads
        assert "echo" not in script.offered[-1] and events[-1].outcome == "completed"
        sid = await wolf.start_session("a", manifest(skills, allow_skill_servers=True))
        events = await run_turn(wolf, sid, "go")
        # Allowed, but `${WOLF_TEST_SECRET}` is not resolved for a skill's server: it does not start,
        # the turn goes on without its tools, and the secret went nowhere.
        assert "echo" not in script.offered[-1] and events[-1].outcome == "completed"
    assert (returns(script)["env"], pid_file.exists()) == ("unknown tool 'env'", False)
