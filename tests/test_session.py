"""SessionWorkflow logic on the real dev server, with scripted in-process models."""

from __future__ import annotations

from pydantic_ai.messages import ModelRequest, ModelResponse, ToolReturnPart

from tests.conftest import make_manifest
from tests.support.models import Script, sequence, text, tool, tools, user_texts


async def test_multi_step_turn_runs_tools_and_answers(wolf, run_worker):
    script = Script(sequence(tool("add", {"a": 2, "b": 3}), tools(("echo", {"text": "hi"}), ("add", {"a": 1, "b": 1})), text("five and hi")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("compute", "a", make_manifest())
        result = await wolf.result(sid)
    assert result.output == "five and hi"
    assert result.outcome == "completed"
    assert result.counters.steps == 3 and result.counters.usage.tool_calls == 3
    returns = [p for m in script.requests[-1] for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    assert [(r.tool_name, r.content) for r in returns] == [("add", "5"), ("echo", "hi"), ("add", "2")]
    assert set(script.tools) == {"echo", "add", "slow", "fail", "record"}
