"""`read_tool_output` reads the result its cut note names, also when the model repeats call ids
(it read the last result with that id: another step's, different, output; core review 16)."""

from __future__ import annotations

import re

from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart

from agentwolf.workflows.compaction import cut_tool_outputs
from tests.conftest import make_manifest
from tests.support.models import Script, text
from tests.support.polls import tool_returns


def _echo(*texts: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("echo", {"text": t}, tool_call_id="dup") for t in texts])


def _note(content: str) -> dict[str, int | str]:
    """The arguments the cut note tells the model to read on with."""
    found = re.search(r"read_tool_output\((.*)\)\]$", content)
    assert found, content
    return {
        k: v.strip("'") if v.startswith("'") else int(v)
        for k, v in re.findall(r"(\w+)=('[^']*'|\d+)", found[1])
    }


async def test_the_cut_note_names_which_of_the_repeated_ids_to_read(wolf, run_worker):
    reads: list[dict[str, int | str]] = []

    def model(s: Script) -> ModelResponse:
        if s.calls == 1:
            return _echo("a" * 1500)
        if s.calls == 2:
            return _echo("b" * 1500)
        if s.calls == 3:  # read on the first result, as its note says
            first = tool_returns(s.requests[-1])[0].content
            reads.append(_note(first))
            return ModelResponse(parts=[ToolCallPart("read_tool_output", reads[0], tool_call_id="r")])
        return text("read")

    script = Script(model)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("go", "a", make_manifest({"limits": {"tool_output_chars": 1000}}))
        assert (await wolf.result(sid)).output == "read"
    page = tool_returns(script.requests[3])[-1].content
    assert reads[0]["call_id"] == "dup" and page.endswith("\n" + "a" * 500)


def test_a_call_id_repeated_within_one_step_names_the_part():
    (sent,) = cut_tool_outputs([_returns("dup", "a" * 30, "b" * 30)], limit=10, start=7)
    notes = [_note(p.content) for p in sent.parts]
    assert notes == [
        {"call_id": "dup", "offset": 10, "message": 7, "part": 0},
        {"call_id": "dup", "offset": 10, "message": 7, "part": 1},
    ]


def _returns(call_id: str, *contents: str) -> ModelRequest:
    return ModelRequest(parts=[ToolReturnPart("echo", c, tool_call_id=call_id) for c in contents])
