"""Activities heartbeat while they await slow work: a first use of a host (watchers, folder scans), a
query to the session after a worker restart. Unheartbeated, work longer than the 5 s heartbeat timeout
failed the attempt, and every retry did the same (core review, finding 14)."""

from __future__ import annotations

import asyncio

import pytest

from agentwolf.hosts.host import AgentHost
from agentwolf.workflows.session.turn import HEARTBEAT_TIMEOUT
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest
from tests.support.models import Script, text

SLOW = HEARTBEAT_TIMEOUT.total_seconds() + 3


@pytest.fixture
def slow_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host's scope takes longer than the heartbeat timeout (a first scan of a big skill folder)."""
    scope = AgentHost.scope

    async def slow(self, *args, **kwargs):
        await asyncio.sleep(SLOW)
        return await scope(self, *args, **kwargs)

    monkeypatch.setattr(AgentHost, "scope", slow)


async def test_a_compile_slower_than_the_heartbeat_timeout_succeeds_at_its_first_attempt(
    wolf, run_worker, slow_scope
):
    script = Script(lambda s: text("done"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.submit("go", "a", make_manifest())
        result = await asyncio.wait_for(wolf.result(sid), 120)
        history = await wolf.client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
    assert result.outcome == "completed" and result.output == "done"
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert attempts and set(attempts) == {1}
