"""A worker holds one copy of each long text of a session's transcript (workflows/session/turn.py's
`share_texts`): the workflow's state, its transcript cache and the next run's snapshot each decode
the transcript from their own payload, and used to keep a copy of every tool result each. A run that
continued as new lets its transcript go at once, not with the next full collection (queries to it,
which replay it, still read it). And the fold lines the worker keeps with its copy drop a result's
whole text once the result is stubbed."""

from __future__ import annotations

import gc
import sys
from functools import partial

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from agentwolf.workflows.compaction import ContextView, Rendered, working_context
from agentwolf.workflows.session.core import SessionCore
from agentwolf.workflows.session.turn import SHARED_TEXT_MIN, share_texts
from agentwolf.workflows.types import SessionStatus, workflow_id
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, sequence, text, tool

mortal_interns = pytest.mark.skipif(
    sys.version_info[:2] == (3, 12), reason="interned strings are immortal on 3.12: texts stay unshared"
)

LONG = "r" * SHARED_TEXT_MIN


@mortal_interns
def test_copies_decoded_apart_share_their_long_texts_and_nothing_else_changes():
    messages = [
        ModelRequest(parts=[UserPromptPart("p" + LONG)]),
        ModelResponse(parts=[TextPart("t" + LONG), ToolCallPart("big", '{"a": "' + LONG + '"}', "c1")]),
        ModelRequest(parts=[ToolReturnPart("big", "x" + LONG, "c1"), ToolReturnPart("d", {"k": LONG}, "c2")]),
        ModelResponse(parts=[TextPart("short")]),
    ]
    raw = ModelMessagesTypeAdapter.dump_json(messages)
    workflow, cache = ModelMessagesTypeAdapter.validate_json(raw), ModelMessagesTypeAdapter.validate_json(raw)
    share_texts(workflow)
    share_texts(cache)
    assert ModelMessagesTypeAdapter.dump_json(cache) == raw  # the same content, byte for byte
    texts = [
        (getattr(a, f), getattr(b, f))
        for m, n in zip(workflow, cache, strict=True)
        for a, b in zip(m.parts, n.parts, strict=True)
        for f in ("content", "args")
        if isinstance(getattr(a, f, None), str) and len(getattr(a, f)) >= SHARED_TEXT_MIN
    ]
    assert len(texts) == 4 and all(a is b for a, b in texts)  # prompt, answer, arguments, result
    dict_result = workflow[2].parts[1]  # not a text: as decoded
    assert isinstance(dict_result, ToolReturnPart) and dict_result.content is not cache[2].parts[1].content


@mortal_interns
async def test_the_workers_cached_transcript_shares_the_tool_result_with_the_workflow(wolf, run_worker):
    script = Script(sequence(tool("big", {"size": 50_000}), text("done")))
    async with run_worker(local_models={"m": script.model}) as hosts:
        sid = await wolf.submit("go", "a", make_manifest())
        await wolf.result(sid)
        ((_, cached),) = hosts.transcripts._entries.items()
    results = [p for m in cached.messages for p in m.parts if isinstance(p, ToolReturnPart)]
    assert len(results) == 1 and len(results[0].content) == 50_000
    # Interned: the process's one copy, the one the workflow's transcript holds too (core.append).
    assert sys.intern("x" * 50_000) is results[0].content


def test_a_folded_result_keeps_only_its_stub_line_once_stubbed():
    turn = [
        ModelRequest(parts=[UserPromptPart("go")]),
        ModelResponse(parts=[ToolCallPart("big", {}, "c1")]),
        ModelRequest(parts=[ToolReturnPart("big", "x" * 8000, "c1")]),
        ModelResponse(parts=[TextPart("done")]),
    ]
    messages = [*turn, ModelRequest(parts=[UserPromptPart("again")])]
    rendered = Rendered()
    folded = working_context(messages, ContextView(fold_before=4), rendered=rendered)
    assert (2, False) in rendered.lines and "x" * 8000 in str(folded[0].parts[0].content)
    stubbed = working_context(messages, ContextView(fold_before=4, stub_before=4), rendered=rendered)
    assert (2, True) in rendered.lines and (2, False) not in rendered.lines
    assert "x" * 8000 not in str(stubbed[0].parts[0].content) and "recall" in str(stubbed[0].parts[0].content)


async def test_a_run_that_continued_as_new_lets_its_transcript_go_and_a_query_to_it_still_reads_it(
    wolf, run_worker, client
):
    script = Script(lambda s: text(f"answer {s.calls}"))
    manifest = make_manifest(sessions={"continue_as_new_bytes": 1})  # a snapshot at every idle point
    gc.disable()  # finished runs stay until collected: each one's core is there to look at
    try:
        async with run_worker(local_models={"m": script.model}):
            sid = await wolf.start_session("a", manifest)
            runs = [(await client.get_workflow_handle(workflow_id("default", sid)).describe()).run_id]
            first_run = runs[0]
            for i in range(2):
                await wolf.prompt(sid, f"question {i}")
                # Not a status query while the run hands over: the counter says so before the next
                # run is there, and a query that reaches a run once it has ended replays it (a core
                # that keeps its transcript, as a query's replay should).
                runs.append(await wait_for(partial(_next_run, client, sid, runs[-1]), timeout=120))
                await wait_for(partial(_live, client, sid, runs[-1], i + 1), timeout=120)
            cores = [o for o in gc.get_objects() if isinstance(o, SessionCore) and o.inp.session_id == sid]
            held = sorted(len(core.log.transcript) for core in cores)
            # A query to the first run replays it: it reads the transcript that run ended with.
            first = await client.get_workflow_handle(workflow_id("default", sid), run_id=first_run).query(
                "transcript", result_type=list[ModelMessage]
            )
            await wolf.close(sid)
            await wolf.result(sid)
    finally:
        gc.enable()
    assert held[-1] == 4 and held.count(4) == 1  # the live run holds both turns
    assert len(held) >= 2 and set(held[:-1]) == {0}  # the runs before it let theirs go
    assert len(first) == 2


async def _next_run(client: Client, sid: str, run_id: str) -> str | None:
    """The session's current run once it is another than `run_id` (the server says: no query)."""
    current = (await client.get_workflow_handle(workflow_id("default", sid)).describe()).run_id
    return current if current != run_id else None


async def _live(client: Client, sid: str, run_id: str, n: int) -> bool:
    """Whether run `run_id` has started and is idle after `n` continue-as-news: its core is there."""
    handle = client.get_workflow_handle(workflow_id("default", sid), run_id=run_id)
    try:
        status = await handle.query("status", result_type=SessionStatus)
    except (RPCError, WorkflowQueryFailedError):  # its first task is not done yet
        return False
    return status.counters.continued_as_new >= n and status.state == "idle"
