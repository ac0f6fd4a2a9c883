"""What the Temporal UI and CLI show of a session: its static summary and details, current details
kept up to date by the workflow, activity summaries, handler descriptions; and that a history with
all of them replays."""

from __future__ import annotations

import asyncio
import json
import subprocess

from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.worker import Replayer

from agentwolf.ops.devserver import temporal_binary
from agentwolf.payloads import data_converter
from agentwolf.worker.bootstrap import SANDBOX, WORKFLOWS
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, sequence, text, tool

PROMPT = "Add forty and two, then tell me the sum. " * 20
"""Longer than any summary: the UI shows it cut."""


async def test_describe_shows_summary_details_and_activity_summaries(wolf, run_worker, client):
    script = Script(sequence(tool("add", {"a": 40, "b": 2}), text("42")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt=PROMPT)
        handle = client.get_workflow_handle(workflow_id("default", sid))
        await wait_for(lambda: _idle_after_a_turn(wolf, sid))
        metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        described = await handle.describe()
        summary, details = await described.static_summary(), await described.static_details()
        cli = await asyncio.to_thread(_temporal_describe, client, handle.id)
        history = await handle.fetch_history()
        await wolf.close(sid)
    assert summary is not None and summary.startswith("a: Add forty and two") and summary.endswith("…")
    assert len(summary) <= 120
    assert details is not None and "**agent** a" in details and "**model** local:m" in details
    assert "**prompt** Add forty and two" in details and len(details) < len(PROMPT)
    current = metadata.current_details
    assert current.startswith("**idle**") and "1 turns" in current and "tokens" in current
    definition = metadata.definition
    handlers = [*definition.signal_definitions, *definition.query_definitions, *definition.update_definitions]
    ours = [h for h in handlers if not h.name.startswith("__")]
    assert {h.name for h in ours} >= {"prompt", "steer", "approve", "deny", "interrupt", "close", "status"}
    assert all(h.description for h in ours), [h.name for h in ours if not h.description]
    summaries = [
        json.loads(e.user_metadata.summary.data)
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert summaries[:3] == ["compile a", "model_request m step 1", "call_tool tools.add"]
    assert summaries[3] == "model_request m step 2"
    assert summary in cli  # `temporal workflow describe` shows it
    # Summaries are metadata on the commands: a history that has them replays.
    replayer = Replayer(workflows=WORKFLOWS, data_converter=data_converter(), workflow_runner=SANDBOX)
    await replayer.replay_workflow(history)


async def test_current_details_name_a_pending_approval(wolf, run_worker, client):
    manifest = make_manifest(permissions={"default": "confirm"})
    script = Script(sequence(tool("add", {"a": 1, "b": 2}, call_id="call-9"), text("3")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", manifest, prompt="add")
        handle = client.get_workflow_handle(workflow_id("default", sid))

        async def waiting() -> str | None:
            meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
            return meta.current_details if "waiting for approval" in meta.current_details else None

        current = await wait_for(waiting)
        await wolf.approve(sid, "call-9")
        await wait_for(lambda: _idle_after_a_turn(wolf, sid))
        after = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
        await wolf.close(sid)
    assert current.startswith("**waiting_approval** · turn-1 step 1") and "add (call-9)" in current
    assert "waiting for approval" not in after.current_details


async def _idle_after_a_turn(wolf, sid: str) -> bool:
    status = await wolf.status(sid)
    return status.state == "idle" and status.counters.turns >= 1


def _temporal_describe(client, wid: str) -> str:
    address = client.service_client.config.target_host
    done = subprocess.run(
        [temporal_binary(), "workflow", "describe", "--workflow-id", wid, "--address", address],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
