"""Durable human approval of tool calls: confirm waits (across worker restarts), deny refuses,
timeouts apply their outcome, interrupt cancels the wait."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelRequest

from agentwolf.cli.errors import worker_polls
from agentwolf.config.manifest import Manifest
from agentwolf.workflows.types import workflow_id
from tests.conftest import (
    make_manifest,
    openai_manifest,
    record_history,
    tools_server,
    wait_for,
    worker_process,
)
from tests.support.models import Script, sequence, text, tool
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.polls import idle, tool_returns
from tests.support.processes import end

WOLF = str(Path(sys.executable).parent / "wolf")


def _confirming(effects: Path, **permissions) -> Manifest:
    rules = [{"tool": "record", "action": "confirm"}, {"tool": "fail", "action": "deny"}]
    return make_manifest(
        {"permissions": {"rules": rules, **permissions}},
        mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(effects))},
    )


async def _pending(wolf, sid):
    status = await wolf.status(sid)
    return status.pending_approvals if status.state == "waiting_approval" else None


async def test_deny_reaches_the_model_as_a_refusal(wolf, run_worker, tmp_path):
    effects = tmp_path / "effects"
    script = Script(sequence(tool("record", {"tag": "x"}, "call-1"), text("understood")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("record it", "a", _confirming(effects))
        (pending,) = await wait_for(lambda: _pending(wolf, sid))
        assert (pending.call_id, pending.tool, pending.args) == ("call-1", "record", {"tag": "x"})
        with pytest.raises(ValueError, match="no tool call 'nope' waits for approval"):
            await wolf.approve(sid, "nope")
        await wolf.deny(sid, "call-1", reason="not today")
        result = await wolf.result(sid)
        kinds = [e.kind async for _, e in _events(wolf, sid)]
        await record_history(wolf.client, workflow_id("default", sid), "approval_denied")
    assert result.output == "understood"
    (ret,) = tool_returns(script.requests[1][-1:])
    assert ret.outcome == "denied" and ret.content == "denied by the user: not today"
    assert not effects.exists()
    assert (
        kinds.index("approval_requested")
        < kinds.index("approval_resolved")
        < kinds.index("tool_call_finished")
    )


async def _events(wolf, sid):
    async for item in wolf.events(sid):
        yield item


async def test_approve_always_lets_later_calls_run_without_asking(wolf, run_worker, tmp_path):
    effects = tmp_path / "effects"
    script = Script(
        sequence(tool("record", {"tag": "one"}, "c1"), tool("record", {"tag": "two"}, "c2"), text("done"))
    )
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("record twice", "a", _confirming(effects))
        await wait_for(lambda: _pending(wolf, sid))
        await wolf.approve(sid, "c1", always=True)
        result = await wolf.result(sid)
        kinds = [e.kind async for _, e in _events(wolf, sid)]
        await record_history(wolf.client, workflow_id("default", sid), "approval_always")
    assert result.output == "done"
    assert effects.read_text().split() == ["one", "two"]
    assert kinds.count("approval_requested") == 1


async def test_deny_rule_refuses_without_asking(wolf, run_worker, tmp_path):
    script = Script(sequence(tool("fail", {"message": "x"}), text("ok")))
    async with run_worker(local_models={"m": script.model}):
        result = await wolf.result(await wolf.submit("try", "a", _confirming(tmp_path / "e")))
    (ret,) = tool_returns(script.requests[1][-1:])
    assert result.output == "ok" and ret.outcome == "denied" and "denied by policy" in ret.content


@pytest.mark.parametrize(("outcome", "ran"), [("allow", True), ("deny", False)])
async def test_a_timeout_applies_its_outcome(wolf, run_worker, tmp_path, outcome, ran):
    effects = tmp_path / "effects"
    script = Script(sequence(tool("record", {"tag": "t"}), text("after")))
    manifest = _confirming(effects, approval_timeout=1, timeout_outcome=outcome)
    async with run_worker(local_models={"m": script.model}):
        result = await wolf.result(await wolf.submit("go", "a", manifest))
    assert result.output == "after"
    (ret,) = tool_returns(script.requests[1][-1:])
    assert effects.exists() == ran
    assert (ret.outcome == "success") == ran
    if not ran:
        assert ret.content == "denied by the user: no answer within 1s"


async def test_interrupt_while_waiting_cancels_the_call_cleanly(wolf, run_worker, tmp_path):
    effects = tmp_path / "effects"
    script = Script(lambda s: tool("record", {"tag": "never"}, "w1") if s.calls == 1 else text("fresh start"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", _confirming(effects))
        await wolf.prompt(sid, "record")
        await wait_for(lambda: _pending(wolf, sid))
        await wolf.interrupt(sid)
        await wait_for(lambda: idle(wolf, sid))
        status = await wolf.status(sid)
        assert status.last_outcome == "interrupted" and status.pending_approvals == []
        closing = (await wolf.transcript(sid))[-1]
        assert isinstance(closing, ModelRequest) and [p.outcome for p in closing.parts] == ["interrupted"]
        await wolf.prompt(sid, "again")
        await wait_for(lambda: idle(wolf, sid, 2))
        assert (await wolf.status(sid)).last_output == "fresh start"
        await wolf.close(sid)
    assert not effects.exists()


async def test_approval_survives_a_worker_restart_and_the_call_runs_once(env, wolf, task_queue, tmp_path):
    effects = tmp_path / "effects"

    def reply(request):
        done = tool_outputs(request)
        return (
            Reply(tool_calls=[("record", {"tag": "approved"})])
            if not done
            else Reply(text=f"result: {done[0]}")
        )

    with ScriptedOpenAI(reply) as server:
        manifest = openai_manifest(
            server.base_url,
            mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(effects))},
            permissions={"rules": [{"tool": "rec.*", "action": "confirm"}]},
        )
        first = worker_process(env, task_queue)
        second = None
        try:
            sid = await wolf.submit("record something", "a", manifest)
            (pending,) = await wait_for(lambda: _pending(wolf, sid), timeout=60)
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = worker_process(env, task_queue)
            # The approval goes to the new worker (the killed one's poller is no longer counted).
            await wait_for(lambda: worker_polls(wolf, task_queue), timeout=120)
            address = env.client.service_client.config.target_host
            approve = await asyncio.to_thread(
                subprocess.run,
                [WOLF, "approve", sid, pending.call_id, "--address", address],
                capture_output=True,
                text=True,
            )
            assert approve.returncode == 0, approve.stderr
            result = await wolf.result(sid)
        finally:
            for proc in (first, second):
                if proc is not None:
                    end(proc)
    assert result.output == "result: recorded approved"
    assert effects.read_text().split() == ["approved"]  # exactly once
