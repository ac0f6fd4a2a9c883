"""Capability hooks run exactly once per recorded step, inside the activity they wrap: counted with a
side effect outside the worker (a file) across a worker SIGKILL mid-turn and continue-as-new; a hook
that raises fails that request or call with a clear error and the session takes the next prompt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from agentwolf.config.manifest import Manifest
from agentwolf.plugins import load_plugins
from agentwolf.workflows.types import Event
from tests.conftest import tools_server, wait_for
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.polls import tool_call_ids, tool_returns

PLUGIN = "tests.support.hook_counter"
ROOT = Path(__file__).parent.parent


def _manifest(base_url: str, *capabilities: Any, **sessions: Any) -> Manifest:
    return Manifest.model_validate(
        {
            "host": {
                "models": {"providers": {"openai": {"api_key": "k", "base_url": base_url}}},
                "mcp_servers": {"tools": tools_server()},
                "sessions": sessions,
            },
            "agents": {
                "a": {"model": "openai:gpt-4o-mini", "capabilities": [{"mcp": "tools"}, *capabilities]}
            },
        }
    )


def _worker(env: Any, task_queue: str) -> subprocess.Popen[bytes]:
    """A worker process loading the counting plugin, for a SIGKILL."""
    address = env.client.service_client.config.target_host
    command = [sys.executable, "-m", "agentwolf.worker", "--address", address, "--task-queue", task_queue]
    return subprocess.Popen(
        [*command, "--plugin", PLUGIN],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )


def _last_input(body: dict[str, Any]) -> str:
    return json.dumps(body["input"][-1])


async def test_hooks_run_once_per_recorded_step_across_a_sigkill_and_continue_as_new(
    env, wolf, task_queue, tmp_path
):
    counts = tmp_path / "hooks"
    counts.touch()

    def reply(body: dict[str, Any]) -> Reply:
        if "again" in _last_input(body):
            return Reply(text="second answer")
        done = tool_outputs(body)
        if not done:
            return Reply(tool_calls=[("add", {"a": 1, "b": 2})])
        if len(done) == 1:
            return Reply(tool_calls=[("slow", {"seconds": 3})])
        return Reply(text="first answer")

    with ScriptedOpenAI(reply) as server:
        manifest = _manifest(server.base_url, {"CountHooks": {"path": str(counts)}}, continue_as_new_bytes=1)
        first = _worker(env, task_queue)
        second = None
        try:
            sid = await wolf.start_session("a", manifest)
            await wolf.prompt(sid, "do the work")
            async for _, event in wolf.events(sid):
                if event.kind == "tool_call_started" and event.tool == "slow":
                    break
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = _worker(env, task_queue)

            async def snapshotted(n: int) -> bool:
                status = await wolf.status(sid)
                return status.state == "idle" and status.counters.continued_as_new >= n

            await wait_for(lambda: snapshotted(1), timeout=120)
            await wolf.prompt(sid, "again")
            await wait_for(lambda: snapshotted(2), timeout=120)
            transcript = await wolf.transcript(sid)
            await wolf.close(sid)
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(60)
    lines = counts.read_text().splitlines()
    turn1, turn2 = sorted({line.split()[1] for line in lines})
    add_call, slow_call = tool_call_ids(transcript)
    assert [r.content for r in tool_returns(transcript)] == ["3", "slept 3.0s"]
    # Nothing ran twice in one attempt; the steps recorded before the kill never ran again.
    assert max(Counter(lines).values()) == 1
    recorded = [
        f"before_run {turn1} step=1 attempt=1",
        f"before_model_request {turn1} step=1 attempt=1",
        f"before_tool_execute {turn1} call={add_call} attempt=1",
        f"before_model_request {turn1} step=2 attempt=1",
        f"before_tool_execute {turn1} call={slow_call} attempt=1",
    ]
    assert lines[: len(recorded)] == recorded
    # The call the kill cut was retried (`slow` is safe to repeat): its activity's hooks ran again.
    assert lines[len(recorded)] == f"before_tool_execute {turn1} call={slow_call} attempt=2"
    assert lines[len(recorded) + 1 :] == [
        f"before_model_request {turn1} step=3 attempt=1",
        f"after_run {turn1} step=3 attempt=1",
        f"before_run {turn2} step=1 attempt=1",
        f"before_model_request {turn2} step=1 attempt=1",
        f"after_run {turn2} step=1 attempt=1",
    ]
    assert len(server.requests) == 4


async def test_a_raising_hook_is_a_clear_error_and_the_session_goes_on(wolf, run_worker):
    def reply(body: dict[str, Any]) -> Reply:
        outputs = tool_outputs(body)
        if "use a tool" in _last_input(body):
            return Reply(tool_calls=[("add", {"a": 1, "b": 2})])
        return Reply(text=f"saw: {outputs[-1]}" if outputs else "hello")

    raising = [
        {"Raises": {"hook": "before_model_request", "when": "forbidden"}},
        {"Raises": {"hook": "before_tool_execute", "when": "add"}},
    ]
    plugins = load_plugins([PLUGIN], entry_points=[])
    with ScriptedOpenAI(reply) as server:
        manifest = _manifest(server.base_url, *raising)
        async with run_worker(plugins=plugins):
            sid = await wolf.start_session("a", manifest)
            await wolf.prompt(sid, "a forbidden topic")
            events: list[Event] = []
            async for _, event in wolf.events(sid):
                events.append(event)
                if event.kind == "turn_finished":
                    break
            await wait_for(lambda: _idle(wolf, sid))
            asked = len(server.requests)
            await wolf.prompt(sid, "use a tool")
            await wait_for(lambda: _turns(wolf, sid, 2))
            transcript = await wolf.transcript(sid)
            await wolf.close(sid)
    finished = events[-1]
    assert finished.outcome == "failed"
    assert "a capability's hook refused the model request: RuntimeError: no requests about forbidden" in (
        finished.text or ""
    )
    assert asked == 0  # the refused request never reached the provider
    (ret,) = tool_returns(transcript)
    assert ret.content == "a capability's hook refused the call to add: PermissionError: add is not for today"
    answer = transcript[-1].parts[-1].content  # type: ignore[union-attr]
    assert "saw: " in answer and "refused the call to add: PermissionError" in answer  # the model read it


async def _idle(wolf: Any, sid: str) -> bool:
    return (await wolf.status(sid)).state == "idle"


async def _turns(wolf: Any, sid: str, n: int) -> bool:
    status = await wolf.status(sid)
    return status.state == "idle" and status.counters.turns >= n
