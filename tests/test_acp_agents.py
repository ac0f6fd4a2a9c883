"""External agents over ACP as AgentWolf agents: a real ACP agent process (tests/support/acp_agent.py,
written with the ACP Python SDK), a real Temporal server, real worker processes killed mid-turn."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any

import psutil

from agentwolf.config.manifest import AgentConfig, Manifest, SubagentCapability
from agentwolf.config.policy import WorkerPolicy
from agentwolf.workflows.types import Event, workflow_id
from tests.conftest import SUPPORT, record_history, wait_for, worker_process
from tests.support.models import Script, sequence, text, tool
from tests.support.processes import end
from tests.test_skills_in_sessions import returns

ACP_AGENT = str(SUPPORT / "acp_agent.py")


def acp_manifest(
    state: Path,
    *,
    load: bool = True,
    delay: float = 0.02,
    permissions: dict[str, Any] | None = None,
    cwd: Path | None = None,
    workspace: bool = False,
) -> Manifest:
    env = {"ACP_STATE": str(state), "ACP_CHUNK_DELAY": str(delay), **({} if load else {"ACP_NO_LOAD": "1"})}
    acp = {"command": sys.executable, "args": [ACP_AGENT], "env": env, "cwd": str(cwd or state)}
    return Manifest.model_validate(
        {
            "agents": {
                "planner": {"model": "local:m", "instructions": "Plan."},
                "coder": {
                    **({"permissions": permissions} if permissions else {}),
                    **({"workspace": {}} if workspace else {}),
                    "acp": acp,
                },
            },
            "teams": {"crew": {"members": ["planner", "coder"]}},
        }
    )


def counter(state: Path) -> int:
    path = state / "counter"
    return int(path.read_text()) if path.exists() else 0


def prompts(state: Path) -> list[str]:
    path = state / "prompts"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def lines(state: Path, name: str) -> list[str]:
    """What the scripted agent wrote down, a line each: `answers` (the option each permission
    request got), `modes` (each `session/set_mode`)."""
    path = state / name
    return path.read_text().splitlines() if path.exists() else []


async def _until_turns_end(wolf: Any, sid: str, turns: int) -> Any:
    async for offset, event in wolf.events(sid, live=False):
        if event.kind == "turn_finished":
            yield offset, event
            turns -= 1
            if not turns:
                return


async def child_session(wolf: Any, sid: str, agent: str) -> str:
    async for _, event in wolf.events(sid, live=False):
        if event.kind == "child_started" and event.tool == agent:
            return event.call_id or ""
    raise AssertionError(f"{agent} never started")


async def approval(wolf: Any, sid: str, offset: int = 0) -> Event:
    async for _, event in wolf.events(sid, offset, live=False):
        if event.kind == "approval_requested":
            return event
    raise AssertionError("the session ended without asking")


async def test_a_team_of_a_native_and_an_acp_agent_streams_asks_and_completes(
    wolf, run_worker, tmp_path, client
):
    script = Script(lambda s: text("please write it with permission, slow"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("build it", "crew", acp_manifest(tmp_path, delay=0.1))
        child = await child_session(wolf, sid, "coder")
        asked = await approval(wolf, child)
        assert asked.tool == "write the mark file" and asked.args == {"n": 1}
        assert counter(tmp_path) == 0  # the tool waits for the person
        await wolf.approve(child, asked.call_id or "")
        deltas, events = [], []
        async for _, event in wolf.events(child):  # live: the agent's text streams as it comes
            events.append(event)
            if event.kind == "text_delta":
                deltas.append(event)
            if event.kind == "turn_finished":
                break
        result = await wolf.result(sid)
        await record_history(client, workflow_id("default", child), "acp_agent_turn")
    assert result.outcome == "completed"
    words = " ".join(f"w{i}" for i in range(30))
    assert (result.output or "").strip() == f"ACP answer to: with permission, slow {words}"
    assert prompts(tmp_path) == ["please write it with permission, slow"]  # the native member's output
    assert counter(tmp_path) == 1
    # A delta with an attempt was read from the running step's heartbeats (text a follower first sees
    # at the step's model_text has none); the deltas join to the step's text.
    assert any(d.attempt is not None for d in deltas)
    assert "".join(d.text or "" for d in deltas).endswith("w29 ")
    kinds = [e.kind for e in events]
    assert kinds.count("tool_call_started") == 1 and kinds.count("tool_call_finished") == 1
    finished = next(e for e in events if e.kind == "tool_call_finished")
    assert finished.call_id == "mark-1" and finished.outcome == "ok"
    assert [e.outcome for e in events if e.kind == "approval_resolved"] == ["approved"]


async def test_a_denied_permission_reaches_the_agent_and_interrupt_cancels_its_turn(
    wolf, run_worker, tmp_path, client
):
    async with run_worker():
        sid = await wolf.start_session("coder", acp_manifest(tmp_path, delay=0.2))
        await wolf.prompt(sid, "ask permission")
        asked = await approval(wolf, sid)
        await wolf.steer(sid, "be brief")  # ACP has no way in mid-prompt: it goes with the next prompt
        await wolf.deny(sid, asked.call_id or "", "not now")
        finished = [e async for _, e in _until_turns_end(wolf, sid, 2)]  # the steer is the next prompt
        assert [e.outcome for e in finished] == ["completed", "completed"]
        offset = await wolf.event_offset(sid)
        await wolf.prompt(sid, "go slow")
        async for _, event in wolf.events(sid, offset):
            if event.kind == "text_delta":
                await wolf.interrupt(sid, "enough")
            if event.kind == "turn_finished":
                assert event.outcome == "interrupted"
                break
        status = await wolf.status(sid)
        assert status.state == "idle"
        await wait_for(lambda: (tmp_path / "cancels").exists())  # it reached the agent: session/cancel
        (pid,) = map(int, (tmp_path / "pids").read_text().split())  # one process for both turns
        await wolf.close(sid)
        await wait_for(lambda: not psutil.pid_exists(pid))  # the closed session's agent process stopped
        await record_history(client, workflow_id("default", sid), "acp_agent_interrupt_release")
    assert counter(tmp_path) == 0  # denied: the tool never ran
    assert prompts(tmp_path) == ["ask permission", "be brief", "go slow"]


async def _kill_mid_turn(
    env, wolf, task_queue, tmp_path, *, load: bool, before_answer: bool = False, record: str | None = None
) -> tuple[Any, list[Event]]:
    """SIGKILL the worker while the agent streams after its tool ran (or, `before_answer`, while its
    permission request waits for a person, who answers while no worker runs the session: the answer
    waits for the next worker)."""
    first = worker_process(env, task_queue)
    second = None
    try:
        sid = await wolf.submit(
            "write with permission, slow", "coder", acp_manifest(tmp_path, load=load, delay=0.1)
        )
        asked = await approval(wolf, sid)
        if not before_answer:
            await wolf.approve(sid, asked.call_id or "")
            await wait_for(lambda: counter(tmp_path) == 1)  # the side effect happened, the agent streams on
        first.send_signal(signal.SIGKILL)
        first.wait()
        if before_answer:
            await wolf.approve(sid, asked.call_id or "")
        second = worker_process(env, task_queue)
        result = await wolf.result(sid)
        events = [e async for _, e in wolf.events(sid, live=False)]
        if record:
            await record_history(env.client, workflow_id("default", sid), record)
    finally:
        for proc in (first, second):
            if proc is not None:
                end(proc)
    return result, events


async def test_a_worker_killed_mid_turn_resumes_by_loading_the_session(env, wolf, task_queue, tmp_path):
    result, events = await _kill_mid_turn(
        env, wolf, task_queue, tmp_path, load=True, record="acp_agent_loaded"
    )
    assert result.outcome == "completed", result.output
    assert counter(tmp_path) == 1  # the side effect was not repeated
    assert (tmp_path / "loads").exists()  # session/load brought the agent's state back
    assert [e.outcome for e in events if e.kind == "agent_resumed"] == ["loaded"]
    assert [e.kind for e in events].count("approval_requested") == 1  # asked once, answered once
    assert [e.kind for e in events].count("model_text") == 1  # the answer arrives once
    assert result.output and result.output.startswith("ACP answer to:")


async def test_an_agent_without_load_is_told_the_transcript_and_the_loss_is_said(
    env, wolf, task_queue, tmp_path
):
    result, events = await _kill_mid_turn(env, wolf, task_queue, tmp_path, load=False)
    assert result.outcome == "completed", result.output
    assert [e.outcome for e in events if e.kind == "agent_resumed"] == ["lost"]
    assert "state in this session was lost" in prompts(tmp_path)[-1]
    assert [e.kind for e in events].count("approval_requested") == 1  # the answer was delivered again
    assert [e.kind for e in events].count("model_text") == 1
    assert counter(tmp_path) == 2  # its own state lost, the agent did its work again: hence the event


async def test_the_worker_policy_holds_acp_commands_like_mcp_servers(wolf, run_worker, tmp_path):
    policy = WorkerPolicy(commands=["/bin/true"])
    manifest = acp_manifest(tmp_path)
    assert any(p.startswith("agents.coder.acp: command") for p in policy.problems(manifest, "default"))
    async with run_worker(policy=policy):
        sid = await wolf.submit("hello", "coder", manifest)
        async for _, event in wolf.events(sid, live=False):
            if event.kind == "turn_finished":
                break
    assert event.outcome == "failed" and "not allowed by the worker policy" in (event.text or "")
    assert not (tmp_path / "prompts").exists()  # never started


async def test_a_permission_answered_after_a_restart_is_delivered_once(env, wolf, task_queue, tmp_path):
    result, events = await _kill_mid_turn(env, wolf, task_queue, tmp_path, load=True, before_answer=True)
    assert result.outcome == "completed", result.output
    assert counter(tmp_path) == 1  # the tool ran once, on the new worker
    assert [e.kind for e in events].count("approval_requested") == 1  # the agent asked again: not the person
    assert [e.outcome for e in events if e.kind == "agent_resumed"] == ["loaded"]


async def test_the_agents_rules_and_approval_timeout_answer_its_permission_requests(
    wolf, run_worker, tmp_path
):
    async with run_worker():
        allowed = acp_manifest(tmp_path, permissions={"rules": [{"tool": "edit", "action": "allow"}]})
        first = await wolf.submit("with permission", "coder", allowed)
        events = [e async for _, e in _until_turns_end(wolf, first, 1)]
        timed = acp_manifest(
            tmp_path, permissions={"default": "confirm", "approval_timeout": 0.5, "timeout_outcome": "deny"}
        )
        second = await wolf.submit("with permission", "coder", timed)
        [e async for _, e in _until_turns_end(wolf, second, 1)]
        asked = [e async for _, e in wolf.events(second, live=False) if e.kind.startswith("approval")]
    assert events[-1].outcome == "completed"
    assert counter(tmp_path) == 1  # the rule allowed it without a person; the timeout denied it
    assert [(e.kind, e.outcome) for e in asked] == [
        ("approval_requested", None),
        ("approval_resolved", "denied"),
    ]


async def test_a_native_agent_delegates_to_an_acp_agent(wolf, run_worker, tmp_path):
    script = Script(sequence(tool("delegate", {"agent": "coder", "task": "say hello"}), text("done")))
    manifest = acp_manifest(tmp_path)
    manifest = manifest.model_copy(
        update={
            "agents": {
                **manifest.agents,
                "lead": AgentConfig(model="local:m", capabilities=[SubagentCapability(subagent=["coder"])]),
            }
        }
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("go", "lead", manifest)
        result = await wolf.result(sid)
    assert result.outcome == "completed" and result.output == "done"
    assert returns(script)["delegate"].strip() == "ACP answer to: say hello"


async def test_a_rule_matches_what_the_agent_would_run_not_its_title(wolf, run_worker, tmp_path, client):
    """The request's `kind` is the tool, its `raw_input` the arguments: a rule with `args` holds."""
    rules = [
        {"tool": "write the mark file", "action": "confirm"},
        {"tool": "edit", "args": {"n": "1"}, "action": "deny"},
    ]
    async with run_worker():
        sid = await wolf.submit(
            "with permission", "coder", acp_manifest(tmp_path, permissions={"rules": rules})
        )
        events = [e async for _, e in _until_turns_end(wolf, sid, 1)]
        asked = [e async for _, e in wolf.events(sid, live=False) if e.kind == "approval_requested"]
        await record_history(client, workflow_id("default", sid), "acp_agent_rules")
    assert events[-1].outcome == "completed"
    assert asked == []  # the title rule (confirm) did not apply: the deny on kind and input did
    assert lines(tmp_path, "answers") == ["no"] and counter(tmp_path) == 0


async def test_the_agent_runs_in_agentwolfs_mode_and_home_not_its_checkouts_settings(
    wolf, run_worker, tmp_path, monkeypatch
):
    """A checkout whose `.claude/settings.json` would approve for the person (a bypass mode, an allow
    list) gets no say: AgentWolf sets the agent's mode, leaves project settings out, and gives the
    process a home of its own under the worker's data folder."""
    repo = tmp_path / "repo"
    (repo / ".claude").mkdir(parents=True)
    settings = {"permissions": {"defaultMode": "bypassPermissions", "allow": ["mark"]}}
    (repo / ".claude" / "settings.json").write_text(json.dumps(settings))
    monkeypatch.setenv("WOLF_HOME", str(tmp_path / "wolf-home"))
    async with run_worker():
        sid = await wolf.submit("with permission", "coder", acp_manifest(tmp_path, cwd=repo))
        asked = await approval(wolf, sid)  # the person is asked: the checkout approved nothing
        assert counter(tmp_path) == 0
        await wolf.approve(sid, asked.call_id or "")
        result = await wolf.result(sid)
    assert result.outcome == "completed" and counter(tmp_path) == 1
    assert lines(tmp_path, "modes") == ["default"]
    (session,) = map(json.loads, lines(tmp_path, "sessions"))
    home = tmp_path / "wolf-home" / "acp" / "default" / "coder"
    assert session == {"home": str(home), "config": str(home / ".claude"), "sources": ["user"]}


async def test_always_is_kept_by_agentwolf_and_the_agent_is_told_allow_once(wolf, run_worker, tmp_path):
    """ "Always" for the agent's permission request stays in the session: the agent is told allow_once
    both times, and its next request for the same tool is answered by AgentWolf without asking.
    (The session stays open, so its events are read up to the second turn's end, not to the end.)"""
    async with run_worker():
        sid = await wolf.start_session("coder", acp_manifest(tmp_path))
        await wolf.prompt(sid, "with permission")
        asked = await approval(wolf, sid)
        await wolf.approve(sid, asked.call_id or "", always=True)
        await wolf.prompt(sid, "with permission again")
        events = []
        async for _, event in wolf.events(sid, live=False):
            events.append(event)
            if sum(e.kind == "turn_finished" for e in events) == 2:
                break
        await wolf.close(sid)
    assert [e.outcome for e in events if e.kind == "turn_finished"] == ["completed", "completed"]
    assert [e.kind for e in events].count("approval_requested") == 1  # the second was not asked
    assert lines(tmp_path, "answers") == ["yes", "yes"]  # allow_once, never the agent's allow_always
    assert counter(tmp_path) == 2


async def test_an_acp_agent_reads_and_writes_its_sessions_workspace_and_nothing_else(
    wolf, run_worker, tmp_path, client
):
    """`fs/write_text_file` lands in the session's workspace (its snapshot has it); `../` and absolute
    paths outside the folder are refused, in both directions."""
    (tmp_path / "outside").mkdir()
    state = tmp_path / "outside"
    async with run_worker():
        sid = await wolf.start_session("coder", acp_manifest(state, workspace=True))
        await wolf.prompt(sid, "fswrite please")
        [_ async for _ in _until_turns_end(wolf, sid, 1)]
        assert await wolf.workspace_read(sid, "notes/hello.txt") == b"hi from acp\n"
        await record_history(client, workflow_id("default", sid), "acp_agent_workspace_fs")
    said = [json.loads(line) for line in lines(state, "fs")]
    assert [(s["op"], s["ok"]) for s in said] == [
        ("write", True),
        ("read", True),
        ("write", False),
        ("write", False),
        ("read", False),
        ("read", False),
    ]
    assert said[1]["content"] == "hi from acp\n"
    assert all("outside the workspace" in s["error"] for s in said[2:])
    assert not (state / "abs-escape.txt").exists() and not list(tmp_path.glob("**/escape.txt"))
