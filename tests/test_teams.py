"""Subagents (the delegate tool) and teams run as child sessions on the real stack."""

from __future__ import annotations

import time

import pytest
from pydantic_ai.messages import ToolReturnPart
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import CancelledError

from agentwolf.config.manifest import Manifest
from agentwolf.workflows.types import workflow_id
from tests.conftest import record_history, tools_server, wait_for
from tests.support.models import Script, text, tools, user_texts


def _manifest(**extra) -> Manifest:
    return Manifest.model_validate(
        {
            "host": {"mcp_servers": {"tools": tools_server()}},
            "agents": {
                "boss": {"model": "local:boss", "capabilities": [{"subagent": ["reviewer", "tester"]}]},
                "reviewer": {"model": "local:reviewer"},
                "tester": {"model": "local:tester"},
            },
            **extra,
        }
    )


def _echoing(name: str, delay: float = 0.0) -> Script:
    return Script(lambda s: text(f"{name} says: {user_texts(s.requests[-1])[-1]}"), delay=delay)


async def test_parent_delegates_to_two_subagents_in_parallel(wolf, run_worker):
    def boss(s):
        if s.calls == 1:
            return tools(
                ("delegate", {"agent": "reviewer", "task": "review"}),
                ("delegate", {"agent": "tester", "task": "test"}),
            )
        returns = [p.content for p in s.requests[-1][-1].parts if isinstance(p, ToolReturnPart)]
        return text(" | ".join(returns))

    models = {
        "boss": Script(boss).model,
        "reviewer": _echoing("reviewer", 0.5).model,
        "tester": _echoing("tester", 0.5).model,
    }
    async with run_worker(local_models=models):
        sid = await wolf.submit("ship it", "boss", _manifest())
        result = await wolf.result(sid)
        children = await wait_for(lambda: _children(wolf, sid, 2), timeout=20)
        await record_history(wolf.client, workflow_id("default", sid), "subagents")
    assert result.output == "reviewer says: review | tester says: test"
    assert {c.agent for c in children} == {"reviewer", "tester"}
    assert all(c.state == "done" and c.parent == sid for c in children)


async def _children(wolf, parent, n):
    found = [s for s in await wolf.list_sessions() if s.parent == parent]
    return found if len(found) >= n else None


async def test_interrupting_the_parent_cancels_its_children(wolf, run_worker, client):
    def boss(s):
        return tools(
            ("delegate", {"agent": "reviewer", "task": "slow review"}),
            ("delegate", {"agent": "tester", "task": "slow test"}),
        )

    models = {
        "boss": Script(boss).model,
        "reviewer": _echoing("r", 60).model,
        "tester": _echoing("t", 60).model,
    }
    async with run_worker(local_models=models):
        sid = await wolf.start_session("boss", _manifest())
        await wolf.prompt(sid, "go")
        children = await wait_for(lambda: _children(wolf, sid, 2), timeout=20)
        handles = [client.get_workflow_handle(workflow_id("default", c.session_id)) for c in children]
        t0 = time.monotonic()
        await wolf.interrupt(sid)

        async def all_stopped():
            statuses = [(await h.describe()).status for h in handles]
            return all(st != WorkflowExecutionStatus.RUNNING for st in statuses)

        await wait_for(all_stopped, timeout=20)
        print(f"children stopped {time.monotonic() - t0:.2f}s after the interrupt")
        for child in children:  # cancelled by their parent: the turn was interrupted, the session closed
            with pytest.raises(WorkflowFailureError) as failure:
                await wolf.result(child.session_id)
            assert isinstance(failure.value.cause, CancelledError)
            child_status = await wolf.status(child.session_id)
            assert child_status.state == "done" and child_status.last_outcome == "interrupted"
        status = await wolf.status(sid)
        assert status.state == "idle" and status.last_outcome == "interrupted"
        await wolf.close(sid)
        await wolf.result(sid)


async def test_depth_limit_refuses_delegation(wolf, run_worker):
    boss = Script(
        lambda s: tools(("delegate", {"agent": "reviewer", "task": "x"})) if s.calls == 1 else text("alone")
    )
    manifest = _manifest()
    manifest = manifest.model_copy(
        update={
            "host": manifest.host.model_copy(
                update={"sessions": manifest.host.sessions.model_copy(update={"max_subagent_depth": 0})}
            )
        }
    )
    async with run_worker(
        local_models={"boss": boss.model, "reviewer": _echoing("r").model, "tester": _echoing("t").model}
    ):
        result = await wolf.result(await wolf.submit("go", "boss", manifest))
    assert result.output == "alone"
    (ret,) = [p for p in boss.requests[1][-1].parts if isinstance(p, ToolReturnPart)]
    assert ret.outcome == "failed" and "depth limit (0)" in ret.content


async def test_sequential_team_feeds_each_member_the_previous_output(wolf, run_worker):
    manifest = _manifest(teams={"pipeline": {"mode": "sequential", "members": ["reviewer", "tester"]}})
    models = {
        "boss": Script(lambda s: text("-")).model,
        "reviewer": _echoing("reviewer").model,
        "tester": _echoing("tester").model,
    }
    async with run_worker(local_models=models):
        sid = await wolf.submit("write code", "pipeline", manifest)
        result = await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "team_sequential")
    assert result.output == "tester says: reviewer says: write code"


async def test_parallel_team_gathers_every_member(wolf, run_worker):
    manifest = _manifest(teams={"panel": {"mode": "parallel", "members": ["reviewer", "tester"]}})
    models = {
        "boss": Script(lambda s: text("-")).model,
        "reviewer": _echoing("reviewer").model,
        "tester": _echoing("tester").model,
    }
    async with run_worker(local_models=models):
        result = await wolf.result(await wolf.submit("look", "panel", manifest))
    assert result.output == "## reviewer\nreviewer says: look\n\n## tester\ntester says: look"
