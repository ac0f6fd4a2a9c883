"""Schedules on Temporal Schedules (real dev server): job runs per firing, prompts to sessions under
a busy policy, pause/trigger/delete, tenants, and hostile input that must create nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.client import Client

from agentwolf.activities.schedule import deliver
from agentwolf.client.schedules import ScheduleNotFound, parse_duration
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.config.jobs import JobError
from agentwolf.config.manifest import Manifest
from agentwolf.tenants import TenantError
from agentwolf.workflows.schedule import DeliverInput, Delivery
from agentwolf.workflows.types import SCHEDULE_ATTR
from tests.conftest import make_manifest, record_history, wait_for
from tests.support.models import Script, text, tool, user_texts
from tests.support.polls import idle


def job_manifest() -> Manifest:
    base = make_manifest().model_dump()
    base["jobs"] = {
        "greet": {
            "agent": "a",
            "prompt": "Greet {who} {times} times.",
            "vars": {"who": {}, "times": {"type": "integer", "default": 1}},
        }
    }
    return Manifest.model_validate(base)


async def schedule_names(wolf: WolfClient) -> list[str]:
    return [s.name for s in await wolf.schedule_list()]


async def completed_runs(client: Client, name: str) -> int:
    query = (
        f"{SCHEDULE_ATTR.name} = '{name}' AND WorkflowType = 'SessionWorkflow'"
        " AND ExecutionStatus = 'Completed'"
    )
    return (await client.count_workflows(query)).count


async def test_a_job_schedule_every_2s_fires_runs_that_all_complete(wolf, run_worker):
    script = Script(lambda s: text(f"hello {s.calls}"))
    async with run_worker(local_models={"m": script.model}):
        made = await wolf.schedule_create(
            "greeter",
            every="2s",
            job="greet",
            variables={"who": "Ada", "times": "2"},
            manifest=job_manifest(),
        )
        assert (made.target, made.when, made.paused, made.overlap) == ("job greet", "every 2s", False, "skip")
        try:
            await wait_for(
                lambda: _at_least(completed_runs(wolf.client, "greeter"), 3), timeout=60, interval=0.5
            )
        finally:
            await wolf.schedule_delete("greeter")
        described = [s async for s in wolf.client.list_workflows(f"{SCHEDULE_ATTR.name} = 'greeter'")]
    sessions = [s for s in described if s.workflow_type == "SessionWorkflow"]
    assert len(sessions) >= 3
    assert all(s.id.startswith("wolf/default/greeter-") for s in sessions)
    assert "Greet Ada 2 times." in user_texts(script.requests[0])
    with pytest.raises(ScheduleNotFound):
        await wolf.schedule_describe("greeter")
    assert "greeter" not in await schedule_names(wolf)


async def _at_least(count: Any, n: int) -> bool:
    return await count >= n


async def test_pause_resume_and_trigger(wolf, run_worker):
    script = Script(lambda s: text("hi"))
    async with run_worker(local_models={"m": script.model}):
        made = await wolf.schedule_create(
            "paused-job", cron="0 3 * * *", job="greet", variables={"who": "Bo"}, manifest=job_manifest(),
            paused=True, timezone="Europe/Berlin", jitter="30s",
        )  # fmt: skip
        try:
            assert made.paused and made.when == "cron 0 3 * * *, jitter 30s, Europe/Berlin"
            await wolf.schedule_resume("paused-job")
            assert not (await wolf.schedule_describe("paused-job")).paused
            await wolf.schedule_pause("paused-job", note="maintenance")
            paused = await wolf.schedule_describe("paused-job")
            assert paused.paused and paused.note == "maintenance"
            await wolf.schedule_trigger("paused-job")  # fires now, paused or not
            runs = await wait_for(lambda: _recent(wolf, "paused-job"), timeout=30)
            await wait_for(lambda: completed_runs(wolf.client, "paused-job"), timeout=30)
            result = await wolf.job_result(runs[0])
            assert result.output == "hi" and result.outcome == "completed"
            assert (await wolf.schedule_describe("paused-job")).actions == 1
        finally:
            await wolf.schedule_delete("paused-job")


async def _recent(wolf: WolfClient, name: str) -> list[str]:
    return (await wolf.schedule_describe(name)).recent_runs


@pytest.mark.parametrize("policy", ["skip", "queue", "steer", "interrupt"])
async def test_a_session_schedule_delivers_under_its_busy_policy(wolf, run_worker, policy):
    """Against a session whose turn runs (a 30 s tool): each policy does what it says."""

    def answer(s: Script) -> Any:
        return tool("slow", {"seconds": 30}) if s.calls == 1 else text(f"answer {s.calls}")

    script = Script(answer)
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="work")
        await wait_for(lambda: script.calls, timeout=30)  # the turn is in its 30 s tool call
        name = f"poke-{policy}"
        target = f"wolf/default/{sid}" if policy == "queue" else sid  # a full id names the same session
        await wolf.schedule_create(
            name, every="1h", session=target, prompt=f"scheduled {policy}", when_busy=policy, paused=True
        )
        try:
            await wolf.schedule_trigger(name)
            fired = await wait_for(lambda: _recent(wolf, name), timeout=30)
            delivery = await wolf.client.get_workflow_handle(fired[0], result_type=Delivery).result()
            if policy == "queue":
                await record_history(wolf.client, fired[0], "schedule_fire_queue")
        finally:
            await wolf.schedule_delete(name)
        status = await wolf.status(sid)
        if policy == "skip":
            assert not delivery.delivered and "skipped: the session is running" in delivery.detail
            assert status.queued == 0 and status.state == "running"
        elif policy == "queue":
            assert delivery.delivered and delivery.turn_id == "turn-2"
            assert status.queued == 1 and status.state == "running"
        elif policy == "steer":
            assert delivery.delivered and delivery.detail == "steered"
            assert status.steer_room == 99 and status.queued == 0
        else:  # interrupt: the running turn stops and the prompt runs next
            assert delivery.delivered and delivery.turn_id == "turn-2"
            await wait_for(lambda: idle(wolf, sid, 2), timeout=30)
            assert "scheduled interrupt" in user_texts(script.requests[-1])
            assert (await wolf.status(sid)).counters.turns == 2
        await wolf.close(sid)


async def test_a_repeated_delivery_of_one_firing_queues_one_prompt(wolf, run_worker):
    """The activity's retry after a delivery it did not hear back from: same update id, same turn."""
    script = Script(lambda s: tool("slow", {"seconds": 30}) if s.calls == 1 else text("done"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="work")
        await wait_for(lambda: script.calls, timeout=30)
        inp = DeliverInput(session_id=sid, prompt="once", when_busy="queue", schedule="s")
        first = await deliver(wolf.client, wolf.tenant, inp, update_id="firing-1/1")
        again = await deliver(wolf.client, wolf.tenant, inp, update_id="firing-1/1")
        other = await deliver(wolf.client, wolf.tenant, inp, update_id="firing-2/1")
        assert first.turn_id == again.turn_id == "turn-2" and other.turn_id == "turn-3"
        assert (await wolf.status(sid)).queued == 2
        await wolf.close(sid)


async def test_hostile_input_creates_nothing(wolf, client, run_worker, task_queue):
    manifest = job_manifest()
    who = {"who": "x"}
    ghost = f"ghost-{uuid.uuid4().hex[:8]}"  # test_failures leaves a session named 'ghost'
    cases: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"cron": "61 * * * *", "job": "greet", "variables": {"who": "x"}}, ValueError, "refused"),
        ({"cron": "every tuesday", "job": "greet", "variables": {"who": "x"}}, ValueError, "refused"),
        ({"every": "5 minutes", "job": "greet", "variables": {"who": "x"}}, ValueError, "invalid duration"),
        ({"every": "1h", "job": "nope"}, ValueError, "unknown job 'nope'"),
        ({"every": "1h", "job": "greet", "variables": {**who, "times": "many"}}, JobError, "not an integer"),
        ({"every": "1h", "job": "greet"}, JobError, "missing variable 'who'"),
        ({"every": "1h", "job": "greet", "variables": who, "timezone": "Mars/Nix"}, ValueError, "time zone"),
        ({"every": "1h", "session": ghost, "prompt": "hi"}, SessionNotFound, "not found"),
        ({"every": "1h", "cron": "* * * * *", "job": "greet"}, ValueError, "exactly one"),
    ]  # fmt: skip
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            await wolf.schedule_create("hostile", manifest=manifest, **kwargs)
        assert "hostile" not in await schedule_names(wolf), kwargs
    with pytest.raises(ValueError, match="invalid config name"):
        await wolf.schedule_create("a/b", every="1h", job="greet", variables={"who": "x"}, manifest=manifest)

    # Another tenant's schedule: refused by its id, unknown by its name.
    await wolf.schedule_create(
        "mine", every="1h", job="greet", variables={"who": "x"}, manifest=manifest, paused=True
    )
    other = WolfClient(client, tenant="other", task_queue=task_queue)
    try:
        with pytest.raises(TenantError, match="belongs to tenant 'default'"):
            await other.schedule_delete("wolf/default/mine")
        with pytest.raises(ScheduleNotFound):
            await other.schedule_trigger("mine")
        assert "mine" not in await schedule_names(other)
        with pytest.raises(ValueError, match="exists already"):
            await wolf.schedule_create(
                "mine", every="2h", job="greet", variables={"who": "y"}, manifest=manifest
            )
        assert (await wolf.schedule_describe("mine")).when == "every 1h"
    finally:
        await wolf.schedule_delete("mine")
    # Another tenant's session is not a target.
    async with run_worker(local_models={"m": Script(lambda s: text("ok")).model}):
        sid = await wolf.start_session("a", make_manifest())
        with pytest.raises(TenantError):
            await other.schedule_create("theirs", every="1h", session=f"wolf/default/{sid}", prompt="hi")
        assert "theirs" not in await schedule_names(other)
        await wolf.close(sid)


def test_durations() -> None:
    assert parse_duration("1h30m").total_seconds() == 5400
    assert parse_duration("250ms").total_seconds() == 0.25
    for bad in ("", "5", "0s", "1h 30m", "-1s", "1w"):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(bad)
