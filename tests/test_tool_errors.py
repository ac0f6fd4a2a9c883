"""Tool calls that cannot run answer the model with an error it can read, never an exception that
fails the activity (retried, re-running the tool) or the turn's task (a wedged session)."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.worker import Worker

from agentwolf.activities.session import SessionActivities
from agentwolf.extensions.functions import FunctionToolsCap
from agentwolf.hosts.host_registry import HostRegistry
from agentwolf.plugins import PluginRegistry
from agentwolf.worker.bootstrap import SANDBOX, WORKFLOWS
from agentwolf.workflows.contracts import CompiledAgent, CompileInput, ToolSpec
from tests.conftest import make_manifest
from tests.support.models import Script, sequence, text, tool
from tests.support.polls import tool_returns


async def test_a_plugin_result_that_is_not_json_reaches_the_model_once():
    """It raised out of call_tool, so the activity failed and its retries ran the function again."""
    runs: list[str] = []
    registry = PluginRegistry("t")

    @registry.tool
    def thing(name: str) -> object:
        """Make a thing."""
        runs.append(name)
        if name == "loop":
            looped: list[object] = []
            looped.append(looped)
            return looped
        return {"made": object()}

    cap = FunctionToolsCap("s", "t", registry.tools, ["t"], call_timeout=5)
    made = await cap.call_tool("thing", {"name": "box"})
    looped = await cap.call_tool("thing", {"name": "loop"})
    assert not made.is_error and made.content[0].text.startswith('{"made":"<object object at')  # type: ignore[union-attr]
    assert looped.is_error and "Circular reference" in looped.content[0].text  # type: ignore[union-attr]
    assert runs == ["box", "loop"]


GONE = "session:tools@0123456789abcdef"


async def test_a_call_to_a_server_the_session_no_longer_has_answers_an_error(client, wolf, task_queue):
    """The compiled agent offers a tool of a session server that left (an editor re-joined with a
    changed config): the call raised KeyError in the turn's task and the session stayed `running`."""
    script = Script(sequence(tool("gone_add", {"a": 1, "b": 2}, "g1"), text("done")))
    hosts = HostRegistry({"m": script.model})
    activities = SessionActivities(hosts)

    @activity.defn(name="wolf.compile")
    async def compile_offering_a_gone_server(inp: CompileInput) -> CompiledAgent:
        compiled = await activities.compile(inp)
        gone = ToolSpec(name="gone_add", server=GONE, tool="add")
        return CompiledAgent.model_validate({**compiled.model_dump(), "tools": [*compiled.tools, gone]})

    acts = [compile_offering_a_gone_server, activities.model_request, activities.call_tool]
    try:
        async with Worker(
            client, task_queue=task_queue, workflows=WORKFLOWS, activities=acts, workflow_runner=SANDBOX
        ):
            sid = await wolf.submit("go", "a", make_manifest())
            result = await asyncio.wait_for(wolf.result(sid), 120)  # it never came: the task had died
            transcript = await wolf.transcript(sid)
    finally:
        await hosts.close()
    assert result.outcome == "completed" and result.output == "done"
    (answer,) = tool_returns(transcript)
    assert answer.outcome == "failed" and f"its MCP server {GONE!r} left this session" in str(answer.content)
