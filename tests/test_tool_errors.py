"""Tool calls that cannot run answer the model with an error it can read, never an exception that
fails the activity (retried, re-running the tool) or the turn's task (a wedged session)."""

from __future__ import annotations

from agentwolf.extensions.functions import FunctionToolsCap
from agentwolf.plugins import PluginRegistry


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
