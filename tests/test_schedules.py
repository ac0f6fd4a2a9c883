"""Schedules on Temporal Schedules (real dev server): job runs per firing, prompts to sessions under
a busy policy, pause/trigger/delete, tenants, and hostile input that must create nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio import activity
from temporalio import client as temporal_client
from temporalio.client import Client, ScheduleActionExecutionStartWorkflow, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from agentwolf.access import TenantError
from agentwolf.activities.schedule import deliver
from agentwolf.client.durations import parse_duration
from agentwolf.client.schedules import ScheduleNotFound
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.config.jobs import JobError
from agentwolf.config.manifest import Manifest
from agentwolf.worker.bootstrap import create_worker
from agentwolf.workflows.schedule import DeliverInput, Delivery
from agentwolf.workflows.types import RUN_PREFIX, SCHEDULE_ATTR, schedule_id
from tests.conftest import make_manifest, record_history, wait_for
from tests.support.models import Script, text, tool, user_texts
from tests.support.polls import idle
from tests.support.serving import serving


def job_manifest(prompt: str = "Greet {who} {times} times.") -> Manifest:
    base = make_manifest().model_dump()
    base["jobs"] = {
        "greet": {
            "agent": "a",
            "prompt": prompt,
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
    assert all(s.id.startswith("wolf/default/_greeter-") for s in sessions)
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


async def _firings(wolf: WolfClient, name: str) -> list[tuple[str, str]]:
    """The schedule's latest firings (ScheduleFire runs): (workflow id, run id); two triggers in one
    second share the workflow id."""
    described = await wolf.client.get_schedule_handle(schedule_id(wolf.tenant, name)).describe()
    return [
        (a.action.workflow_id, a.action.first_execution_run_id)
        for a in described.info.recent_actions
        if isinstance(a.action, ScheduleActionExecutionStartWorkflow)
    ]


async def test_a_registry_job_runs_the_config_version_current_at_its_firing(wolf, run_worker):
    """`wolf config push` reaches the next firing: the job is rendered from the new version."""
    script = Script(lambda s: text("done"))
    config, name = f"cfg-{uuid.uuid4().hex[:8]}", f"nightly-{uuid.uuid4().hex[:6]}"
    async with run_worker(local_models={"m": script.model}):
        await wolf.config_push(config, job_manifest("v1: greet {who}."))
        await wolf.schedule_create(
            name, every="1h", job="greet", variables={"who": "Ada"}, config_name=config, paused=True
        )
        try:
            await wolf.config_push(config, job_manifest("v2: welcome {who}."))
            await wolf.schedule_trigger(name)
            firing, _ = (await wait_for(lambda: _firings(wolf, name), timeout=30))[0]
            run = (await wolf.client.get_workflow_handle(firing, result_type=Delivery).result()).session_id
            await record_history(wolf.client, firing, "schedule_fire_registry_job")
        finally:
            await wolf.schedule_delete(name)
        assert (await wolf.job_result(run)).outcome == "completed"
        assert "v2: welcome Ada." in user_texts(script.requests[0])
        assert (await wolf.status(run)).config_version == 2


class _LoseFirstDelivery(temporal_client.Interceptor, Interceptor):
    """The first attempt of every `wolf.deliver_prompt` does its work, then fails as if its
    completion had been lost (a worker that died right after): Temporal retries it."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _LostCompletion(next)


class _LostCompletion(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        result = await super().execute_activity(input)
        info = activity.info()
        if info.activity_type == "wolf.deliver_prompt" and info.attempt == 1:
            raise ApplicationError("the completion was lost")
        return result


@asynccontextmanager
async def lossy_worker(client: Client, task_queue: str, **kwargs: Any) -> AsyncIterator[None]:
    """A worker whose deliveries lose their first completion."""
    lossy = Client(**{**client.config(), "interceptors": [_LoseFirstDelivery()]})
    worker, hosts = create_worker(lossy, task_queue=task_queue, **kwargs)
    async with worker:
        try:
            yield
        finally:
            await hosts.close()


@pytest.mark.parametrize("policy", ["steer", "interrupt"])
async def test_a_retried_delivery_steers_once_and_never_interrupts_its_own_turn(
    wolf, client, task_queue, policy
):
    """Turn 1 runs a 30 s tool; the delivery's first attempt loses its completion. `steer`: one
    steer waits, not two. `interrupt`: turn 1 stops, and the delivered turn (a 10 s tool, then an
    answer) completes: the retry does not interrupt the turn its first attempt started."""

    def answer(s: Script) -> Any:
        return tool("slow", {"seconds": 30 if s.calls == 1 else 10}) if s.calls <= 2 else text("answered")

    script = Script(answer)
    name = f"retried-{policy}-{uuid.uuid4().hex[:6]}"
    async with lossy_worker(client, task_queue, local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="work")
        await wait_for(lambda: script.calls, timeout=30)
        await wolf.schedule_create(
            name, every="1h", session=sid, prompt=f"scheduled {policy}", when_busy=policy, paused=True,
            overlap="allow_all",  # the scheduler may not have seen the first firing end by the second
        )  # fmt: skip
        try:
            await wolf.schedule_trigger(name)
            fired = await wait_for(lambda: _firings(wolf, name), timeout=30)
            delivery = await wolf.client.get_workflow_handle(fired[0][0], result_type=Delivery).result()
            await record_history(wolf.client, fired[0][0], f"schedule_fire_{policy}_once")
            assert delivery.delivered and delivery.detail == ("steered" if policy == "steer" else "interrupt")
            if policy == "steer":
                assert (await wolf.status(sid)).steer_room == 99
            else:
                assert delivery.turn_id == "turn-2"
                await wait_for(lambda: idle(wolf, sid, 2), timeout=60)
                status = await wolf.status(sid)
                assert (status.last_outcome, status.last_output) == ("completed", "answered")
            # A session that has ended is not found, by the firing's own signal too.
            await wolf.close(sid)
            await wolf.result(sid)
            await wolf.schedule_trigger(name)
            again = await wait_for(lambda: _later(wolf, name, fired), timeout=30)
            with pytest.raises(WorkflowFailureError) as failed:
                await wolf.client.get_workflow_handle(again[0], run_id=again[1]).result()
            assert "not found" in str(failed.value.cause)
        finally:
            await wolf.schedule_delete(name)


async def _later(wolf: WolfClient, name: str, before: list[tuple[str, str]]) -> tuple[str, str] | None:
    return next((f for f in await _firings(wolf, name) if f not in before), None)


async def test_a_session_or_thread_named_like_a_future_run_cannot_block_it(
    wolf, client, task_queue, run_worker
):
    """Sessions squat the ids this schedule's runs would have had in the next seconds; an id in the
    runs' own space is refused, from WolfClient and from an AG-UI thread alike. The firing runs."""
    name = f"nightly-{uuid.uuid4().hex[:6]}"
    now = datetime.now(UTC)
    squatted = [f"{name}-{now + timedelta(seconds=s):%Y-%m-%dT%H:%M:%SZ}" for s in range(-2, 30)]
    async with run_worker(local_models={"m": Script(lambda s: text("ran")).model}):
        await wolf.schedule_create(
            name, every="1h", job="greet", variables={"who": "x"}, manifest=job_manifest(), paused=True
        )
        try:
            await asyncio.gather(*(wolf.start_session("a", make_manifest(), session_id=s) for s in squatted))
            with pytest.raises(ValueError, match="marks job runs"):
                await wolf.start_session("a", make_manifest(), session_id=RUN_PREFIX + squatted[3])
            async with (
                serving(client, task_queue, make_manifest()) as base,
                httpx.AsyncClient(base_url=base) as http,
            ):
                thread = {
                    "threadId": RUN_PREFIX + squatted[4],
                    "runId": "r",
                    "messages": [{"id": "m", "role": "user", "content": "go"}],
                    "tools": [],
                    "context": [],
                    "state": {},
                }
                refused = await http.post("/agui/a", json=thread, headers={"Authorization": "Bearer key-a"})
            assert refused.status_code == 400 and "marks job runs" in refused.text
            await wolf.schedule_trigger(name)
            firing, _ = (await wait_for(lambda: _firings(wolf, name), timeout=30))[0]
            run = await wolf.client.get_workflow_handle(firing, result_type=Delivery).result()
            await record_history(wolf.client, firing, "schedule_fire_reserved_run_id")
        finally:
            await wolf.schedule_delete(name)
            await asyncio.gather(*(wolf.close(s) for s in squatted))
        assert run.session_id == RUN_PREFIX + firing.split("/", 2)[2]
        assert run.result is not None and run.result.output == "ran"


async def test_a_retried_delivery_after_a_continue_as_new_queues_nothing_twice(wolf, run_worker):
    """The first attempt queued turn 2, the session ran it and continued as new, then the retry
    came: it names the first attempt's turn, in the run before."""
    script = Script(lambda s: tool("slow", {"seconds": 2}) if s.calls == 1 else text(f"answer {s.calls}"))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session(
            "a", make_manifest(sessions={"continue_as_new_bytes": 1}), prompt="work"
        )
        handle = wolf.client.get_workflow_handle(f"wolf/default/{sid}")
        first_run = (await handle.describe()).run_id
        await wait_for(lambda: script.calls, timeout=30)
        since = datetime.now(UTC)
        inp = DeliverInput(session_id=sid, prompt="once", when_busy="queue", schedule="s")
        first = await deliver(wolf.client, wolf.tenant, inp, update_id="firing-1/1")
        await wait_for(lambda: idle(wolf, sid, 2), timeout=60)
        await wait_for(lambda: _run_other_than(handle, first_run), timeout=30)
        again = await deliver(wolf.client, wolf.tenant, inp, update_id="firing-1/1", since=since)
        assert first.turn_id == again.turn_id == "turn-2"
        status = await wolf.status(sid)
        assert (status.counters.turns, status.queued, status.state) == (2, 0, "idle")
        await wolf.close(sid)


async def _run_other_than(handle: Any, run_id: str) -> bool:
    return (await handle.describe()).run_id != run_id


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
    assert parse_duration("2w") == parse_duration("14d") == parse_duration("P14D")
    assert parse_duration("PT8H").total_seconds() == 8 * 3600
    for bad in ("", "5", "0s", "1h 30m", "-1s", "1y", "P", "PT0S", "7 days"):
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(bad)
