"""A long session's older messages go to the payload store at continue-as-new (workflows/archive.py):
on a real dev server and worker, against the scripted OpenAI server in window mode. Nothing is lost:
the transcript reads back whole, `recall` reads an archived result, a fork starts from an archived
turn, a new worker (no cached copy) carries on, and a tampered part is refused."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowQueryFailedError

from agentwolf.transcript_store import ArchiveError
from agentwolf.workflows.archive import TranscriptTail
from agentwolf.workflows.contracts import TRANSCRIPT_QUERY, TRANSCRIPT_TAIL_QUERY
from agentwolf.workflows.session_input import SessionInput
from agentwolf.workflows.types import workflow_id
from tests.conftest import record_history, wait_for
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.support.polls import idle, tool_returns
from tests.test_compaction import activities_of, closed_runs, manifest, reply, run_turns

RECALL = re.compile(r"recall call (\S+) at message (\d+)")


def recalling(request: dict[str, Any]) -> Reply:
    """`reply`, and a prompt naming a call and its message asks `recall` for it."""
    last = json.dumps(request["input"][-1]) if request.get("input") else ""
    if (asked := RECALL.search(last)) and request["input"][-1].get("type") != "function_call_output":
        return Reply(tool_calls=[("recall", {"call_id": asked[1], "offset": 0, "message": int(asked[2])})])
    return reply(request)


async def test_older_messages_go_to_the_store_and_nothing_is_lost(wolf, run_worker, client):
    with ScriptedOpenAI(recalling, window=3000) as server:
        config = manifest(server.base_url, 3000, sessions={"continue_as_new_bytes": 1})
        async with run_worker():
            sid = await wolf.start_session("a", config)
            wid = workflow_id("default", sid)
            handle = client.get_workflow_handle(wid)
            await run_turns(wolf, sid, 0, 16)
            held = await handle.query(TRANSCRIPT_TAIL_QUERY, result_type=TranscriptTail)
            runs = await wait_for(lambda: closed_runs(client, wid, 16), timeout=60)
            archiving = [r for r in runs if "wolf.archive_transcript" in await activities_of(client, wid, r)]
            await record_history(client, wid, "transcript_archive", run_id=archiving[0])
        # A new worker: no cached copy, it reads the tail and the archive's fold from the session.
        async with run_worker():
            await run_turns(wolf, sid, 16, 2)
            whole = await wolf.transcript(sid)
            first = tool_returns(whole)[0]
            at = next(i for i, m in enumerate(whole) if first in getattr(m, "parts", []))
            await wolf.prompt(sid, f"turn 18: recall call {first.tool_call_id} at message {at}")
            await wait_for(lambda: idle(wolf, sid, 19), timeout=120)
            recalled = tool_returns(await wolf.transcript(sid))[-1]
            with pytest.raises(WorkflowQueryFailedError, match="archived in the payload store"):
                await handle.query(TRANSCRIPT_QUERY)
            with pytest.raises(Exception, match="fork from it instead"):
                await wolf.rewind(sid, "1")
            fork = await wolf.fork(sid, at="2")
            forked = await wolf.transcript(fork.session_id)
            snapshot = await client.get_workflow_handle(wid).fetch_history()
            runs = await wait_for(lambda: closed_runs(client, wid, 19), timeout=60)
            recalling_runs = [r for r in runs if "wolf.read_archived" in await activities_of(client, wid, r)]
            await record_history(client, wid, "transcript_archive_recall", run_id=recalling_runs[-1])
    assert server.refused == 0 and max(server.tokens) <= 3000
    assert len(recalling_runs) == 1  # the archived result was read back by activity
    # Archived at continue-as-new: the session holds only the tail, and the runs start from it.
    assert held.archive.parts and held.archive.length > 0
    assert len(held.messages) + held.archive.length == len(whole) - 8  # 2 turns since, 4 messages each
    start = snapshot.events[0].workflow_execution_started_event_attributes
    carried = await client.data_converter.decode(start.input.payloads, [SessionInput])
    assert carried[0].archive is not None and len(carried[0].transcript) < len(whole)
    # The transcript reads back whole: every prompt and every result as they were.
    prompts = [p.content for m in whole for p in m.parts if type(p).__name__ == "UserPromptPart"]
    assert prompts == [f"turn {i}: remember fact-{i}" for i in range(18)]
    assert [r.content for r in tool_returns(whole)] == ["x" * 1800] * 18
    # `recall` reads a result that is archived, whole.
    assert at < held.archive.length
    assert recalled.tool_name == "recall"
    assert recalled.content == "[characters 0-1800 of 1800; that is the end]\n" + "x" * 1800
    # A fork after an archived turn (turn-2: the prompts of turns 0 and 1) starts from the whole prefix.
    assert [p.content for m in forked for p in m.parts if type(p).__name__ == "UserPromptPart"] == [
        f"turn {i}: remember fact-{i}" for i in range(2)
    ]


async def test_a_tampered_archived_part_is_refused(wolf, run_worker, client):
    """The store's folder is outside the session's control: a part changed there is refused by its
    digest, and the transcript is not read from it."""
    with ScriptedOpenAI(reply, window=3000) as server:
        config = manifest(server.base_url, 3000, sessions={"continue_as_new_bytes": 1})
        async with run_worker():
            sid = await wolf.start_session("a", config)
            await run_turns(wolf, sid, 0, 14)
            handle = client.get_workflow_handle(workflow_id("default", sid))
            held = await handle.query(TRANSCRIPT_TAIL_QUERY, result_type=TranscriptTail)
            assert held.archive.parts
            digest = json.loads(held.archive.parts[0].ref.data)["claimData"]["sha256"]
            stored = Path(os.environ["WOLF_PAYLOAD_STORE"]) / digest[:2] / digest
            stored.write_bytes(stored.read_bytes().replace(b"x" * 100, b"y" * 100, 1))
            with pytest.raises(ArchiveError, match="could not be read back"):
                await wolf.transcript(sid)
