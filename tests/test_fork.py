"""Forks: a new session from a recorded prefix of another, nothing re-run, its effect ledger said."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessagesTypeAdapter, ModelRequest, ModelResponse, ToolReturnPart
from temporalio.api.enums.v1 import EventType
from temporalio.exceptions import WorkflowAlreadyStartedError

from agentwolf.access import TenantError
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.workflows.session.cuts import CutError
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, tools_server, wait_for
from tests.support.models import Script, text, tools, user_texts
from tests.support.polls import idle

WOLF = str(Path(sys.executable).parent / "wolf")
TURNS = 10


def _turns(script: Script) -> ModelResponse:
    """Each turn `turn N`: one step calling echo (read-only) and record (a side effect), then an answer."""
    last = script.requests[-1][-1]
    assert isinstance(last, ModelRequest)
    if any(isinstance(p, ToolReturnPart) for p in last.parts):
        return text(f"done {user_texts(script.requests[-1])[-1]}")
    prompt = user_texts([last])[-1]
    return tools(("echo", {"text": prompt}), ("record", {"tag": prompt}))


async def _wolf_cli(wolf: WolfClient, *args: str) -> subprocess.CompletedProcess[str]:
    address = wolf.client.service_client.config.target_host
    environ = {**os.environ, "NO_COLOR": "1", "TEMPORAL_ADDRESS": address}
    return await asyncio.to_thread(
        subprocess.run, [WOLF, *args], capture_output=True, text=True, env=environ, timeout=120
    )


def _dump(messages) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


async def _activities(wolf: WolfClient, sid: str) -> list[str]:
    history = await wolf.client.get_workflow_handle(workflow_id(wolf.tenant, sid)).fetch_history()
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_fork_reuses_the_prefix_and_lists_the_effects_after_it(client, run_worker, tmp_path):
    from agentwolf.worker.bootstrap import TASK_QUEUE  # the CLI's queue: `wolf fork` starts forks there

    wolf = WolfClient(client, task_queue=TASK_QUEUE)
    effects = tmp_path / "effects"
    manifest = make_manifest(mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(effects))})
    script = Script(_turns)
    async with run_worker(task_queue=TASK_QUEUE, local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        for n in range(1, TURNS + 1):
            await wolf.prompt(sid, f"turn {n}")
            await wait_for(lambda n=n: idle(wolf, sid, n))
        source = await wolf.transcript(sid)
        snapshot = await wolf.snapshot(sid)
        requests, recorded = script.calls, effects.read_text()
        assert recorded.splitlines() == [f"turn {n}" for n in range(1, TURNS + 1)]

        made = await wolf.fork(sid, at="4", as_id=f"{sid}-f4")
        await wait_for(lambda: idle(wolf, made.session_id, 4))
        end = snapshot.turns[3].end
        assert made.messages == end and made.point == "turn-4"
        assert _dump(await wolf.transcript(made.session_id)) == _dump(source[:end])
        assert await _activities(wolf, made.session_id) == []  # not even a compile: the agent came along
        assert (script.calls, effects.read_text()) == (requests, recorded)
        assert [(e.turn_id, e.tool, e.args) for e in made.effects] == [
            (f"turn-{n}", "record", {"tag": f"turn {n}"}) for n in range(5, TURNS + 1)
        ]
        status = await wolf.status(made.session_id)
        assert (status.counters.turns, status.counters.usage.tool_calls) == (4, 8)
        assert status.counters.usage.requests == 8

        # The fork goes on from turn 4; the source is untouched and goes on too.
        assert await wolf.prompt(made.session_id, "turn 11") == "turn-5"
        await wait_for(lambda: idle(wolf, made.session_id, 5))
        assert user_texts(script.requests[-1]) == ["turn 1", "turn 2", "turn 3", "turn 4", "turn 11"]
        assert _dump(await wolf.transcript(sid)) == _dump(source)

        # --edit: before turn 3, with another prompt in its place.
        edited = await wolf.fork(sid, at="3", edit="turn 3 again")
        await wait_for(lambda: idle(wolf, edited.session_id, 3))
        after = await wolf.transcript(edited.session_id)
        assert _dump(after[: snapshot.turns[2].start]) == _dump(source[: snapshot.turns[2].start])
        assert user_texts(after) == ["turn 1", "turn 2", "turn 3 again"]
        assert [e.turn_id for e in edited.effects] == [f"turn-{n}" for n in range(3, TURNS + 1)]

        # A step cut keeps the step's results; bad points are refused with the valid ones.
        step = await wolf.fork(sid, at="2.1")
        assert _dump(await wolf.transcript(step.session_id)) == _dump(source[: snapshot.turns[1].start + 3])
        with pytest.raises(CutError, match=r"no turn 42 .*finished turns: 1, 2, 3"):
            await wolf.fork(sid, at="42")
        with pytest.raises(CutError, match=r"turn-2 has no step 3 \(its steps: 2.1, 2.2\)"):
            await wolf.fork(sid, at="2.3")

        # Another tenant's session cannot be forked; a taken id or one with a '/' is refused.
        with pytest.raises(TenantError):
            await WolfClient(client, tenant="other", task_queue=TASK_QUEUE).fork(workflow_id("default", sid))
        with pytest.raises(SessionNotFound):
            await WolfClient(client, tenant="other", task_queue=TASK_QUEUE).fork(sid)
        with pytest.raises(WorkflowAlreadyStartedError):
            await wolf.fork(sid, at="2", as_id=made.session_id)
        with pytest.raises(CutError, match="invalid session id"):
            await wolf.fork(sid, as_id="wolf/other/x")

        # The CLI says the ledger.
        done = await _wolf_cli(wolf, "fork", sid, "--at", "8", "--json")
        assert done.returncode == 0, done.stderr
        said = json.loads(done.stdout)
        assert [e["args"]["tag"] for e in said["effects"]] == ["turn 9", "turn 10"]
        refused = await _wolf_cli(wolf, "fork", sid, "--at", "x")
        assert refused.returncode == 2 and "say TURN or TURN.STEP" in refused.stderr
    assert effects.read_text() == recorded + "turn 11\nturn 3 again\n"


async def test_rewind_keeps_the_later_turns_as_a_branch_and_redo_restores_them(wolf, run_worker, tmp_path):
    effects = tmp_path / "effects"
    manifest = make_manifest(mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(effects))})
    script = Script(_turns)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        for n in range(1, 5):
            await wolf.prompt(sid, f"turn {n}")
            await wait_for(lambda n=n: idle(wolf, sid, n))
        source = await wolf.transcript(sid)
        marks = (await wolf.snapshot(sid)).turns
        requests = script.calls

        back = await wolf.rewind(sid, "2")
        assert (back.point, back.branch) == ("turn-2", "branch-1")
        assert [e.args["tag"] for e in back.effects] == ["turn 3", "turn 4"]
        assert _dump(await wolf.transcript(sid)) == _dump(source[: marks[1].end])
        assert script.calls == requests  # nothing ran again
        (branch,) = await wolf.branches(sid)
        assert (branch.name, branch.point, branch.turns) == ("branch-1", "turn-2", ["turn-3", "turn-4"])
        assert branch.last_output == "done turn 4"

        assert await wolf.prompt(sid, "turn 5") == "turn-5"  # turn ids never repeat in a session
        await wait_for(lambda: idle(wolf, sid, 5))
        assert user_texts(script.requests[-1]) == ["turn 1", "turn 2", "turn 5"]
        with pytest.raises(CutError, match=r"no branch-7 in this session \(its branches: branch-1\)"):
            await wolf.rewind(sid, "branch-7")
        with pytest.raises(CutError, match="at turn-5 already"):
            await wolf.rewind(sid, "5")

        redo = await wolf.rewind(sid, "branch-1")  # the turn-5 line is set aside in its turn
        assert (redo.point, redo.branch) == ("turn-4", "branch-2")
        assert [e.args["tag"] for e in redo.effects] == ["turn 5"]
        assert _dump(await wolf.transcript(sid)) == _dump(source)
        assert [b.turns for b in await wolf.branches(sid)] == [["turn-5"]]
        listed = await _wolf_cli(wolf, "branches", sid)
        assert listed.returncode == 0 and "branch-2" in listed.stdout and "done turn 5" in listed.stdout
        refused = await _wolf_cli(wolf, "rewind", sid, "--to", "9")
        assert refused.returncode == 2 and "no turn 9" in refused.stderr, refused.stderr
        await wolf.prompt(sid, "turn 6")
        await wait_for(lambda: idle(wolf, sid, 6))
        assert user_texts(script.requests[-1]) == ["turn 1", "turn 2", "turn 3", "turn 4", "turn 6"]
        await wolf.close(sid)
        await wolf.result(sid)
        await record_history(wolf.client, workflow_id("default", sid), "rewind_and_redo")
    assert effects.read_text().splitlines() == [f"turn {n}" for n in range(1, 7)]


async def test_an_openai_previous_response_id_of_an_older_turn_continues_a_fork(
    client, task_queue, run_worker
):
    from openai import AsyncOpenAI

    from agentwolf.protocols.openai_api import ResponseId
    from tests.support.serving import serving

    script = Script(lambda s: text(f"answer to {user_texts(s.requests[-1])[-1]}"))
    async with (
        run_worker(local_models={"m": script.model}),
        serving(client, task_queue, make_manifest()) as base,
    ):
        oa = AsyncOpenAI(base_url=base + "/v1", api_key="key-a", max_retries=0)
        ids = []
        previous = None
        for n in range(1, 4):
            said = await oa.responses.create(model="a", input=f"turn {n}", previous_response_id=previous)
            ids.append(said.id)
            previous = said.id
        source = ResponseId.parse(ids[0]).session
        assert {ResponseId.parse(i).session for i in ids} == {source}
        requests = script.calls

        again = await oa.responses.create(model="a", input="turn 3, other", previous_response_id=ids[1])
        assert again.output_text == "answer to turn 3, other"
        forked = ResponseId.parse(again.id)
        assert forked.session != source and forked.turn == 3
        assert script.calls == requests + 1  # the fork re-ran nothing: one request, the new turn's
        assert user_texts(script.requests[-1]) == ["turn 1", "turn 2", "turn 3, other"]
        # The fork's response continues like any: on the fork, its latest turn.
        more = await oa.responses.create(model="a", input="turn 4", previous_response_id=again.id)
        assert ResponseId.parse(more.id).session == forked.session
        assert user_texts(script.requests[-1]) == ["turn 1", "turn 2", "turn 3, other", "turn 4"]


def test_a_fork_leaves_the_sources_own_servers_and_always_allowed_tools_behind():
    """What belongs to the source session, not to its conversation: the tools its user allowed
    "always" (the fork asks again) and its own MCP servers (an editor's), with the compiled agent
    that names them (the fork compiles without them); a source without servers lends its agent."""
    from pydantic_ai.messages import TextPart, UserPromptPart

    from agentwolf.config.manifest import McpServerConfig
    from agentwolf.workflows.contracts import CompiledAgent
    from agentwolf.workflows.session.cuts import cut, fork_input
    from agentwolf.workflows.session_input import SessionInput, TurnMark
    from agentwolf.workflows.types import Counters

    transcript = [ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[TextPart("hello")])]
    counters = Counters(turns=1, turn_seq=1, steps=1)
    source = SessionInput(
        session_id="s",
        agent="a",
        manifest=make_manifest(),
        transcript=transcript,
        turns=[TurnMark(turn_id="turn-1", start=0, end=2, counters=counters)],
        compiled=CompiledAgent(agent="a", models=["local:m"], instructions="", tools=[]),
        always_allowed=["record"],
        session_servers={"editor": McpServerConfig(command="editor-tools")},
    )
    fork = fork_input(source, cut(source.transcript, source.turns, None), "f")
    bare = source.model_copy(update={"session_servers": {}})
    assert (fork.always_allowed, fork.session_servers, fork.compiled) == ([], {}, None)
    assert fork_input(bare, cut(bare.transcript, bare.turns, None), "f").compiled == source.compiled
    assert fork.counters == counters and _dump(fork.transcript) == _dump(transcript)


def test_a_turn_mark_leaves_counters_at_their_defaults_out_of_the_snapshot():
    """One mark per turn rides every continue-as-new snapshot: zero fields stay out, and come back."""
    from agentwolf.workflows.session_input import TurnMark
    from agentwolf.workflows.types import Counters, Usage

    usage = Usage(requests=2, input_tokens=200, output_tokens=20, cost_usd=0.002)
    counters = Counters(turns=2, turn_seq=2, steps=2, usage=usage, models={"openai:gpt-5": usage})
    mark = TurnMark(turn_id="turn-2", start=2, end=4, config_version=1, counters=counters)
    dumped = json.loads(mark.model_dump_json())["counters"]
    assert TurnMark.model_validate_json(mark.model_dump_json()) == mark
    assert not {"subagents", "continued_as_new"} & set(dumped)
    assert not {"tool_calls", "unpriced_requests"} & set(dumped["usage"])
    assert len(json.dumps(dumped)) < 0.7 * len(counters.model_dump_json())
