"""Continue-as-new keeps each run's history under `continue_as_new_bytes`: at idle, a session
continues as new when its next turn (as large as its largest) and the snapshot that ends the run
would pass the limit, not once the history has passed it."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.worker import Replayer

from agentwolf.payloads import data_converter
from agentwolf.worker.bootstrap import SANDBOX, WORKFLOWS
from agentwolf.workflows.session.loop import PROJECTED_SNAPSHOT
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, wait_for
from tests.support.models import Script, text, tool

LIMIT = 300_000
RESULT = 20_000  # each turn adds about twice this to history: the tool's result and the model request's delta


async def _closed_runs(client: Client, wid: str, count: int) -> list[str] | None:
    runs = [w async for w in client.list_workflows(f"WorkflowId = '{wid}'") if w.close_time is not None]
    return [w.run_id for w in sorted(runs, key=lambda w: w.close_time)] if len(runs) >= count else None


async def test_large_turns_continue_as_new_before_the_limit_and_replay(wolf, run_worker, client):
    def decide(s: Script) -> object:
        last = s.requests[-1][-1]
        prompted = any(p.part_kind == "user-prompt" for p in last.parts)
        return tool("big", {"size": RESULT}) if prompted else text(f"answer {s.calls}")

    script = Script(decide)
    manifest = make_manifest(sessions={"continue_as_new_bytes": LIMIT})
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest)
        wid = workflow_id("default", sid)
        turns = 0
        while turns < 16 and (turns < 3 or (await wolf.status(sid)).counters.continued_as_new < 2):
            await wolf.prompt(sid, f"question {turns}")
            turns += 1
            await wait_for(lambda n=turns: _idle_after(wolf, sid, n), timeout=120)
        runs = await wait_for(lambda: _closed_runs(client, wid, 2), timeout=60)
        histories = [await client.get_workflow_handle(wid, run_id=r).fetch_history() for r in runs]
        await record_history(client, wid, "projected_snapshot", run_id=runs[0])
        await wolf.close(sid)
        result = await wolf.result(sid)
    assert result.counters.turns == turns
    sizes = [sum(e.ByteSize() for e in h.events) for h in histories]
    assert all(size < LIMIT for size in sizes), sizes
    # The first run held several turns, and it was the projection that ended it, before the limit.
    first = histories[0]
    assert sum(e.HasField("activity_task_scheduled_event_attributes") for e in first.events) >= 6
    markers = [e.SerializeToString() for e in first.events if e.HasField("marker_recorded_event_attributes")]
    assert any(PROJECTED_SNAPSHOT.encode() in m for m in markers)
    replayer = Replayer(workflows=WORKFLOWS, data_converter=data_converter(), workflow_runner=SANDBOX)
    for history in histories:
        await replayer.replay_workflow(history)


async def _idle_after(wolf, sid, turns):
    status = await wolf.status(sid)
    return status.counters.turns >= turns and status.state == "idle"
