"""Continue-as-new at idle points: transcript, counters and the event stream carry over exactly;
the worker's transcript cache keeps hitting, so only deltas travel."""

from __future__ import annotations

from pydantic_ai.messages import ModelMessage

from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, wait_for
from tests.support.models import Script, text, tool, user_texts


async def test_transcript_counters_and_events_survive_continue_as_new(wolf, run_worker, client):
    def decide(s):
        last = s.requests[-1][-1]
        return (
            tool("add", {"a": s.calls, "b": 1})
            if any(p.part_kind == "user-prompt" for p in last.parts)
            else text(f"answer {s.calls}")
        )

    script = Script(decide)
    manifest = make_manifest(sessions={"continue_as_new_bytes": 1})  # snapshot at every idle point
    async with run_worker(local_models={"m": script.model}) as hosts:
        sid = await wolf.start_session("a", manifest)
        wid = workflow_id("default", sid)
        first_run = (await client.get_workflow_handle(wid).describe()).run_id
        runs = []
        for i in range(3):
            await wolf.prompt(sid, f"question {i}")
            await wait_for(lambda n=i + 1: _snapshotted(wolf, sid, n))
            runs.append((await client.get_workflow_handle(wid).describe()).run_id)
        before = await client.get_workflow_handle(wid, run_id=first_run).query(
            "transcript", result_type=list[ModelMessage]
        )
        status = await wolf.status(sid)
        transcript = await wolf.transcript(sid)
        events = []
        async for _, event in wolf.events(sid):
            events.append(event)
            if sum(e.kind == "turn_finished" for e in events) == 3:
                break
        (host,) = hosts.hosts()
        assert host.transcript_misses == 0  # every model request carried only its delta
        await record_history(client, wid, "continue_as_new_first_run", run_id=first_run)
        await wolf.close(sid)
        result = await wolf.result(sid)
    assert len(set(runs)) == 3 and first_run not in runs
    assert status.counters.turns == 3 and status.counters.steps == 6 and status.counters.continued_as_new == 3
    assert status.counters.usage.tool_calls == 3
    assert user_texts(transcript) == ["question 0", "question 1", "question 2"]
    assert len(transcript) == 12
    # The first run's final transcript is exactly the prefix the later runs carried on with.
    assert len(before) == 4 and before == transcript[:4]
    assert [e.kind for e in events].count("turn_started") == 3
    assert result.counters.model_dump(exclude={"continued_as_new"}) == status.counters.model_dump(
        exclude={"continued_as_new"}
    )


async def _snapshotted(wolf, sid, n):
    status = await wolf.status(sid)
    return status.counters.continued_as_new >= n and status.state == "idle"
