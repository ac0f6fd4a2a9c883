"""A tool call in flight when its worker dies (issue 39, item 10): Temporal retries the activity, and a
call of a tool not marked read-only or idempotent must not run again blindly. The retry answers the
model that the call was cut and may or may not have run; a read-only tool's call runs again. Both are
said by a `tool_call_cut` event. Side effects are counted by the MCP server itself, in files outside
the worker."""

from __future__ import annotations

import signal

from agentwolf.workflows.contracts import CUT_NOTICE
from tests.conftest import openai_manifest, tools_server, wait_for, worker_process
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs
from tests.support.polls import tool_returns


async def test_a_call_cut_by_a_worker_loss_runs_again_only_when_safe_to_repeat(
    env, wolf, task_queue, tmp_path
):
    effects, started, gate = tmp_path / "effects", tmp_path / "slow_started", tmp_path / "gate"

    def reply(request):
        done = tool_outputs(request)
        if not done:  # both in one step: one with a side effect, one read-only
            return Reply(
                tool_calls=[("record_slowly", {"tag": "x", "seconds": 600}), ("slow", {"seconds": 600})]
            )
        return Reply(text=" | ".join(done))

    with ScriptedOpenAI(reply) as server:
        manifest = openai_manifest(
            server.base_url,
            mcp_servers={
                "tools": tools_server(
                    WOLF_SIDE_EFFECTS=str(effects), WOLF_SLOW_STARTED=str(started), WOLF_SLOW_GATE=str(gate)
                )
            },
        )
        first = worker_process(env, task_queue)
        second = None
        try:
            sid = await wolf.submit("do both", "a", manifest)
            # Both calls reached the MCP server: they are in flight when the worker dies.
            await wait_for(lambda: effects.exists() and started.exists(), timeout=120)
            first.send_signal(signal.SIGKILL)
            first.wait()
            gate.touch()  # from now on a call that runs ends at once
            second = worker_process(env, task_queue)
            result = await wolf.result(sid)
            transcript = await wolf.transcript(sid)
            events = [e async for _, e in wolf.events(sid, live=False)]
        finally:
            for proc in (first, second):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(60)
    assert effects.read_text().split() == ["x"]  # the call with a side effect ran once, not twice
    assert len(started.read_text().split()) == 2  # the read-only call ran again
    returns = {p.tool_name: p.content for p in tool_returns(transcript)}
    assert returns == {"record_slowly": CUT_NOTICE, "slow": "slept 600.0s"}
    assert CUT_NOTICE in result.output and result.output.endswith(" | slept 600.0s")  # the model was told
    cut = {e.tool: e.outcome for e in events if e.kind == "tool_call_cut"}
    assert cut == {"record_slowly": "not_repeated", "slow": "repeated"}
