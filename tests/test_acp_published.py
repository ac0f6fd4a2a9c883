"""A published ACP agent as an AgentWolf agent: Codex's ACP adapter (`@zed-industries/codex-acp`, from
package.json) with a custom model provider pointed at the scripted OpenAI server, offline; a real
Temporal server. Its shell command asks permission, a person approves it, and it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil

from agentwolf.config.manifest import Manifest
from tests.conftest import wait_for
from tests.support.needs import missing
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.processes import alive
from tests.test_acp_agents import approval

CODEX_ACP = Path(__file__).parent.parent / "node_modules" / ".bin" / "codex-acp"
MODEL = "gpt-5.4-mini"
"""A model Codex knows (an unknown one works too, but Codex then says so in its answer)."""


def codex_config(base_url: str) -> str:
    """`$CODEX_HOME/config.toml`: every request to the scripted server, nothing else on the network."""
    return f"""
model = "{MODEL}"
model_provider = "scripted"
check_for_update_on_startup = false

[model_providers.scripted]
name = "Scripted"
base_url = "{base_url}"
env_key = "SCRIPTED_API_KEY"
wire_api = "responses"

[analytics]
enabled = false
"""


def scripted(request: dict[str, Any]) -> Reply:
    """Codex runs one shell command outside its read-only sandbox (which asks the person), then answers."""
    if not tool_outputs(request):
        command = {
            "cmd": "touch marked",
            "sandbox_permissions": "require_escalated",
            "justification": "May I create the file marked?",
        }
        return Reply(text="Marking it. ", tool_calls=[("exec_command", command)])
    return Reply(text="Done: the file marked is there.", interval=0.05)


def codex_processes(cwd: Path) -> list[psutil.Process]:
    """The adapter's processes working in `cwd`: its node launcher and the Codex binary (not the
    shells Codex starts)."""
    return [
        p
        for p in psutil.process_iter(["cwd", "cmdline"])
        if p.info["cwd"] == str(cwd) and any("codex-acp" in arg for arg in p.info["cmdline"] or [])
    ]


async def test_codex_acp_answers_from_the_scripted_server_and_asks_before_its_shell_command(
    wolf, run_worker, tmp_path
):
    if not CODEX_ACP.exists():
        missing("the npm package @zed-industries/codex-acp (`npm install`)")
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    started: list[psutil.Process] = []
    with ScriptedOpenAI(scripted) as server:
        (home / "config.toml").write_text(codex_config(server.base_url))
        env = {"CODEX_HOME": str(home), "SCRIPTED_API_KEY": "sk-scripted"}
        manifest = Manifest.model_validate(
            {"agents": {"codex": {"acp": {"command": str(CODEX_ACP), "env": env, "cwd": str(work)}}}}
        )
        try:
            async with run_worker():
                sid = await wolf.start_session("codex", manifest)
                await wolf.prompt(sid, "mark it")
                asked = await approval(wolf, sid)
                started = codex_processes(work)
                assert asked.tool == "touch marked"
                assert asked.args and asked.args["command"][-1] == "touch marked"
                assert not (work / "marked").exists()  # the command waits for the person
                await wolf.approve(sid, asked.call_id or "")
                deltas, events = [], []
                async for _, event in wolf.events(sid):  # live: Codex's text streams as it comes
                    events.append(event)
                    if event.kind == "text_delta":
                        deltas.append(event.text or "")
                    if event.kind == "turn_finished":
                        break
                await wolf.close(sid)
                result = await wolf.result(sid)
                assert len(started) == 2  # node's launcher and Codex: closing the session stops both
                await wait_for(lambda: not any(alive(p.pid) for p in started))
        finally:
            for proc in started:  # killed here only when the test failed before they stopped
                if alive(proc.pid):
                    proc.kill()
    assert events[-1].outcome == "completed", events[-1].text
    assert result.output == "Marking it. Done: the file marked is there."
    assert "".join(deltas).endswith("Done: the file marked is there.")
    assert (work / "marked").exists()  # approved: Codex ran it
    kinds = [e.kind for e in events]
    assert kinds.count("tool_call_started") == 1 and kinds.count("tool_call_finished") == 1
    finished = next(e for e in events if e.kind == "tool_call_finished")
    assert finished.tool == "touch marked" and finished.outcome == "ok"
    assert [e.outcome for e in events if e.kind == "approval_resolved"] == ["approved"]
    assert len(server.requests) == 2 and "exited with code 0" in tool_outputs(server.requests[1])[0]
    assert {h["authorization"] for h in server.headers} == {"Bearer sk-scripted"}  # the provider's key
