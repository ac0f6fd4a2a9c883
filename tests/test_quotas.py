"""Provider quotas (agentwolf/hosts/quotas.py, agentwolf/workflows/quotas/) on a real dev
server, against the scripted provider enforcing its own limits (tests/support/rate_limit.py), with
two worker processes sharing one budget."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.service import RPCError

from agentwolf.client.quotas import endpoints
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.config.policy import WorkerPolicy
from agentwolf.config.quotas import EndpointQuota, QuotaPolicy
from agentwolf.defaults import TASK_QUEUE
from agentwolf.hosts.quotas import Endpoint, Quotas, endpoint_id
from agentwolf.workflows.quotas import (
    Ask,
    Poll,
    QuotaState,
    QuotaStatus,
    QuotaWorkflow,
    Release,
    quota_workflow_id,
)
from agentwolf.workflows.quotas.messages import BURST
from agentwolf.workflows.types import workflow_id
from tests.conftest import record_history, wait_for, worker_process
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.support.rate_limit import RateLimit

WOLF = str(Path(sys.executable).parent / "wolf")


@pytest.fixture(autouse=True)
def _collected() -> Iterator[None]:
    """Collect each test's garbage before the next (finalizers of its clients and tasks run here, not
    in the middle of pytest parsing a module at the end of the session: CPython 3.11's AST depth
    check fails when a traceback is formatted from a finalizer meanwhile)."""
    yield
    gc.collect()


def limited_manifest(base_url: str, **limits: Any) -> Manifest:
    """Agent `a` on the `openai:` provider at `base_url`, under `host.models.quotas`."""
    return Manifest.model_validate(
        {
            "host": {
                "models": {
                    "providers": {"openai": {"api_key": "k", "base_url": base_url}},
                    "quotas": [{"match": "openai:*", **limits}],
                }
            },
            "agents": {"a": {"model": "openai:gpt-4o-mini", "stream": False}},
        }
    )


@pytest.fixture
def two_workers(env, task_queue, process_mark) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two worker processes on this test's queue."""
    procs = [worker_process(env, task_queue, process_mark) for _ in range(2)]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


async def _polling(client: Client, task_queue: str, procs: list[subprocess.Popen[bytes]]) -> None:
    """Until every worker process polls the queue for activities."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    )

    async def all_poll() -> bool:
        described = await client.workflow_service.describe_task_queue(request)
        pids = {poller.identity.split("@")[0] for poller in described.pollers}
        return {str(p.pid) for p in procs} <= pids

    await wait_for(all_poll, timeout=90, interval=0.5)


async def _limiter(client: Client, base_url: str) -> QuotaStatus:
    (found,) = [s for s in await endpoints(client, None) if base_url in s.label]
    return found


async def _workers_that_ran_model_requests(client: Client, sids: list[str]) -> set[str]:
    identities = set()
    for sid in sids:
        history = await client.get_workflow_handle(workflow_id("default", sid)).fetch_history()
        scheduled = {
            e.event_id
            for e in history.events
            if e.HasField("activity_task_scheduled_event_attributes")
            and e.activity_task_scheduled_event_attributes.activity_type.name == "wolf.model_request"
        }
        identities |= {
            e.activity_task_started_event_attributes.identity
            for e in history.events
            if e.HasField("activity_task_started_event_attributes")
            and e.activity_task_started_event_attributes.scheduled_event_id in scheduled
        }
    return identities


async def test_two_worker_processes_share_one_budget(wolf, client, task_queue, two_workers):
    await _polling(client, task_queue, two_workers)
    limit = RateLimit(rpm=3, window=4.0)
    with ScriptedOpenAI(lambda r: Reply(text="ok"), limit=limit) as server:
        manifest = limited_manifest(server.base_url, rpm=3, window=4.0)
        sids = [await wolf.submit(f"hi {i}", "a", manifest) for i in range(10)]
        results = await asyncio.gather(*(wolf.result(s) for s in sids))
        status = await _limiter(client, server.base_url)
    assert [r.outcome for r in results] == ["completed"] * 10
    assert len(limit.accepted()) == 10 and limit.refusals() == []  # paced, never refused
    assert status.requests >= 10 and status.rpm == 3  # grants (a retried attempt gives one back unused)
    assert set(status.wait_p95) == {3}  # `wolf submit` sessions are background work (priority 3)
    assert len(await _workers_that_ran_model_requests(client, sids)) == 2


async def test_a_429_cooldown_stops_every_worker(wolf, client, task_queue, two_workers):
    await _polling(client, task_queue, two_workers)
    limit = RateLimit(blocked_for=4)  # the provider refuses everything at first
    with ScriptedOpenAI(lambda r: Reply(text="ok"), limit=limit) as server:
        manifest = limited_manifest(server.base_url, concurrency=1)
        sids = [await wolf.submit(f"hi {i}", "a", manifest) for i in range(6)]
        results = await asyncio.gather(*(wolf.result(s) for s in sids))
    assert [r.outcome for r in results] == ["completed"] * 6
    assert limit.refusals(), "the provider should have refused the first request"
    assert limit.sent_in_cooldowns() == []  # nobody sent while a Retry-After said to wait
    assert len(await _workers_that_ran_model_requests(client, sids)) == 2


async def test_a_worker_killed_holding_a_lease_does_not_leak_it(env, wolf, client, task_queue, process_mark):
    calls = 0

    def reply(request: dict[str, Any]) -> Reply:
        nonlocal calls
        calls += 1
        return Reply(text="ok", delay=30 if calls == 1 else 0)  # the first one hangs until its worker dies

    with ScriptedOpenAI(reply) as server:
        manifest = limited_manifest(server.base_url, concurrency=1, lease_ttl=3, window=1)
        first = worker_process(env, task_queue, process_mark)
        try:
            sid = await wolf.submit("hi", "a", manifest)
            await wait_for(lambda: len(server.requests) == 1, timeout=90)
            held = await _limiter(client, server.base_url)
            assert held.use.active == 1
            first.send_signal(signal.SIGKILL)
            first.wait()
        finally:
            first.kill()
        second = worker_process(env, task_queue, process_mark)
        try:
            other = await wolf.submit("hello", "a", manifest)
            results = [await wolf.result(sid), await wolf.result(other)]
            freed = await _limiter(client, server.base_url)
        finally:
            second.kill()
            second.wait()
    assert [r.outcome for r in results] == ["completed", "completed"]
    assert freed.use.active == 0  # the dead worker's lease expired; nothing holds the budget


async def test_a_turn_waits_out_a_long_refusal_and_status_shows_it(wolf, client, run_worker):
    """The provider refuses for longer than the old retry schedule (6 attempts, ~31 s of backoff),
    saying to come back in at most 5 s each time: the turn waits and completes."""

    class Capped(RateLimit):
        def admit(self, body: dict[str, Any], key: str) -> tuple[int, dict[str, str], bool]:
            tokens, headers, refused = super().admit(body, key)
            if refused:
                headers["retry-after"] = str(min(5, int(headers["retry-after"])))
                self.cooldowns[-1] = (self.cooldowns[-1][0], float(headers["retry-after"]))
            return tokens, headers, refused

    limit = Capped(blocked_for=45)
    address = client.service_client.config.target_host
    with ScriptedOpenAI(lambda r: Reply(text="finally"), limit=limit) as server:
        manifest = limited_manifest(server.base_url)
        async with run_worker(task_queue=TASK_QUEUE):
            from agentwolf.client.wolf_client import WolfClient

            wolf = WolfClient(client, task_queue=TASK_QUEUE)
            sid = await wolf.submit("hi", "a", manifest)
            follower = asyncio.create_task(_events(wolf, sid))
            # a request that has just asked waits `queued` until the quota workflow's first word: wait
            # for the cooldown's, which says when
            wait = await wait_for(lambda: _timed_wait(wolf, sid), timeout=60)
            assert wait.waiting.startswith("rate_limited") and wait.resumes_in() is not None
            shown = await wait_for(lambda: _shows_resuming(address, sid), timeout=90, interval=0.5)
            assert "waiting: rate_limited, resumes in" in shown.stdout, shown.stderr
            listed = json.loads((await _wolf(address, "limits", "--json")).stdout)
            (mine,) = [e for e in listed if server.base_url in e["label"]]
            assert mine["cooldown_until"] is not None
            result = await wolf.result(sid)
            kinds = [e.kind for e in await follower]
    assert result.outcome == "completed" and result.output == "finally"
    assert "rate_limited" in kinds  # followers see the wait too
    assert len(limit.refusals()) > 6  # more refusals than the old policy had attempts
    assert limit.sent_in_cooldowns() == []


async def test_a_wait_past_rate_wait_max_fails_the_turn_saying_why(wolf, run_worker):
    limit = RateLimit(blocked_for=600)
    policy = WorkerPolicy(quotas=QuotaPolicy(rate_wait_max=timedelta(seconds=3)))
    with ScriptedOpenAI(lambda r: Reply(text="never"), limit=limit) as server:
        async with run_worker(policy=policy):
            sid = await wolf.submit("hi", "a", limited_manifest(server.base_url))
            with pytest.raises(WorkflowFailureError) as failure:
                await wolf.result(sid)
    assert "rate_wait_max" in str(failure.value.cause)
    assert len(limit.log) <= 2  # it waited out the cooldown instead of resending


async def _timed_wait(wolf: Any, sid: str) -> Any:
    wait = await wolf.waiting(sid)
    return wait if wait is not None and wait.resumes_in() is not None else None


async def _shows_resuming(address: str, sid: str) -> subprocess.CompletedProcess[str] | None:
    shown = await _wolf(address, "status", sid)
    return shown if "waiting: rate_limited, resumes in" in shown.stdout else None


async def _events(wolf: Any, sid: str) -> list[Any]:
    return [event async for _, event in wolf.events(sid)]


async def _wolf(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "NO_COLOR": "1", "TEMPORAL_ADDRESS": address}
    return await asyncio.to_thread(
        subprocess.run, [WOLF, *args], capture_output=True, text=True, env=environ, timeout=120
    )


async def test_leases_go_by_priority_then_by_tenant_weight(client, run_worker, task_queue):
    """One request at a time: a held lease, then waiters of three priorities and two tenants
    (weights 1 and 2); each granted lease is released at once. Interactive goes first, background
    last, and among jobs tenant `b` gets two grants for each of `a`'s."""
    limits = EndpointQuota(concurrency=1)
    endpoint = Endpoint(f"test-{task_queue}", "test", limits)
    wid = quota_workflow_id(endpoint.id)
    quotas = Quotas(client, task_queue, QuotaPolicy())
    now = datetime.now(UTC)
    order: list[str] = []

    def ask(name: str, tenant: str, priority: int, weight: float = 1.0, offset: float = 0.0) -> Ask:
        return _ask(name, tenant, priority, weight, now + timedelta(seconds=offset), limits)

    async def take(a: Ask) -> None:
        await quotas.acquire(endpoint, a)
        order.append(a.lease_id)
        await client.get_workflow_handle(wid).signal(QuotaWorkflow.release, Release(lease_id=a.lease_id))

    async with run_worker():
        await quotas.acquire(endpoint, ask("held", "a", 2))
        waiters = [ask("background", "a", 3)]
        waiters += [ask(f"a{i}", "a", 2, 1.0, i) for i in range(4)]
        waiters += [ask(f"b{i}", "b", 2, 2.0, i) for i in range(4)]
        waiters += [ask("interactive", "b", 1, 2.0, 10)]
        tasks = [asyncio.create_task(take(w)) for w in waiters]
        handle = client.get_workflow_handle(wid)
        await wait_for(lambda: _waiting(handle, len(waiters)))
        await handle.signal(QuotaWorkflow.release, Release(lease_id="held"))
        await asyncio.gather(*tasks)
        await record_history(client, wid, "limiter_priority_weights")
        await handle.terminate()  # no run left for the worker to finish after the test
        await quotas.close()
    assert order[0] == "interactive" and order[-1] == "background"
    jobs = order[1:-1]
    assert jobs[:3].count("b0") + jobs[:3].count("b1") == 2 and "a0" in jobs[:3]  # 2:1 for weight 2:1
    assert [j for j in jobs if j.startswith("a")] == ["a0", "a1", "a2", "a3"]  # in arrival order


def _ask(name: str, tenant: str, priority: int, weight: float, since: datetime, limits: EndpointQuota) -> Ask:
    """A request `name` (its lease and session) waiting since `since`."""
    ids = {"lease_id": name, "session": name}
    return Ask(**ids, tenant=tenant, weight=weight, priority=priority, since=since, limits=limits)


async def _waiting(handle: Any, n: int) -> bool:
    return len((await handle.query(QuotaWorkflow.status)).waiting) == n


async def test_the_limiter_continues_as_new_keeping_its_ledger(client, run_worker, task_queue):
    """Past its history bound the quota workflow moves to a new run mid-stream of asks; the leases granted
    before still count (rpm 40 in a long window, none of it reserved: all 40 are in it)."""
    limits = EndpointQuota(rpm=40, window=timedelta(minutes=10), reserve=0)  # jobs may use it all
    endpoint = Endpoint(f"test-can-{task_queue}", "test", limits)
    wid = quota_workflow_id(endpoint.id)
    quotas = Quotas(client, task_queue, QuotaPolicy())
    state = QuotaState(endpoint=endpoint.id, label="test", limits=limits, history_events=60)
    async with run_worker():
        await client.start_workflow(QuotaWorkflow.run, state, id=wid, task_queue=task_queue)
        for i in range(40):
            ask = Ask(lease_id=f"l{i}", session="s", tenant="t", since=datetime.now(UTC), limits=limits)
            await quotas.acquire(endpoint, ask)
            await client.get_workflow_handle(wid).signal(QuotaWorkflow.release, Release(lease_id=f"l{i}"))
        handle = client.get_workflow_handle(wid)
        status = await handle.query(QuotaWorkflow.status)
        runs = [e async for e in client.list_workflows(f"WorkflowId = '{wid}'")]
        await record_history(client, wid, "limiter_continue_as_new", run_id=runs[-1].run_id)
        await handle.terminate()
        await quotas.close()
    assert status.use.requests == 40 and status.requests == 40
    assert len(runs) > 1


async def test_waiting_requests_are_paced_and_shared_by_weight(client, run_worker, task_queue):
    """Everything waits behind a held lease (concurrency 1, 8 requests per 2 s window), then each
    grant is released at once. Interactive requests go first; the grants after them keep to the
    budget's rate (an interval, 2 s / 8, each: a late one is caught up, at most BURST intervals at
    once), however fast releases come back; and tenant `c`
    (weight 2) gets twice `a`'s grants, `a`'s interactive ones counted in its share."""
    limits = EndpointQuota(rpm=8, window=timedelta(seconds=2), concurrency=1)
    endpoint = Endpoint(f"test-paced-{task_queue}", "test", limits)
    wid = quota_workflow_id(endpoint.id)
    quotas = Quotas(client, task_queue, QuotaPolicy())
    now = datetime.now(UTC)
    granted: list[tuple[str, datetime]] = []

    def ask(name: str, tenant: str, priority: int, weight: float, offset: float) -> Ask:
        return _ask(name, tenant, priority, weight, now + timedelta(seconds=offset), limits)

    async def take(a: Ask) -> None:
        grant = await quotas.acquire(endpoint, a)
        assert grant.expires_at is not None
        granted.append((a.lease_id, grant.expires_at - limits.lease_ttl))
        await client.get_workflow_handle(wid).signal(QuotaWorkflow.release, Release(lease_id=a.lease_id))

    async with run_worker():
        await quotas.acquire(endpoint, ask("held", "h", 2, 1.0, 0))
        waiters = [ask(f"a{i}", "a", 2, 1.0, i) for i in range(8)]
        waiters += [ask(f"c{i}", "c", 2, 2.0, i) for i in range(8)]
        waiters += [ask(f"ai{i}", "a", 1, 1.0, 10 + i) for i in range(2)]
        tasks = [asyncio.create_task(take(w)) for w in waiters]
        handle = client.get_workflow_handle(wid)
        await wait_for(lambda: _waiting(handle, len(waiters)))
        await handle.signal(QuotaWorkflow.release, Release(lease_id="held"))
        await asyncio.gather(*tasks)
        await record_history(client, wid, "limiter_paced")
        await handle.terminate()
        await quotas.close()
    granted.sort(key=lambda g: g[1])
    order = [name for name, _ in granted]
    assert sorted(order[:2]) == ["ai0", "ai1"], order
    first = [name[0] for name in order[:11]]  # 11 grants: a's fair share is 11/3, c's 22/3
    assert abs(first.count("c") - 2 * first.count("a")) <= 2, order
    times = [at for _, at in granted]
    for i, j in itertools.combinations(range(len(times)), 2):
        assert (times[j] - times[i]).total_seconds() >= 0.75 * 2 / 8 * (j - i - BURST), times


async def test_a_grant_whose_answer_was_lost_is_sent_again(client, run_worker, task_queue):
    """A worker's poll answered with a grant it never got (its call timed out on a busy server) asks
    again for the same request: the quota workflow sends the same grant, counted once."""
    limits = EndpointQuota(rpm=5)
    state = QuotaState(endpoint=f"test-lost-{task_queue}", label="test", limits=limits)
    wid = quota_workflow_id(state.endpoint)
    poll = Poll(worker="w", asks=[_ask("x", "t", 2, 1.0, datetime.now(UTC), limits)], ungranted=True)
    async with run_worker():
        handle = await client.start_workflow(QuotaWorkflow.run, state, id=wid, task_queue=task_queue)
        first = await handle.execute_update(QuotaWorkflow.poll, poll)
        again = await handle.execute_update(QuotaWorkflow.poll, poll)
        status = await handle.query(QuotaWorkflow.status)
        await handle.terminate()
    assert [g.granted for g in first.grants] == [True] and again.grants == first.grants
    assert status.requests == 1 and status.use.active == 1


async def test_an_interactive_session_goes_ahead_of_its_workers_queued_jobs(client, run_worker, task_queue):
    """Forty job requests of one worker wait behind a held lease (concurrency 1), then a session a
    person talks to asks through the same worker. The worker tells the quota workflow about the jobs in a
    few signals (one in flight at a time, not one each); the interactive request goes past them, its
    priority carried in the model request, and is granted first: the session answers while the jobs
    still wait (a job granted first would hold the only slot: none gives it back)."""
    tenant = f"t-{task_queue}"
    with ScriptedOpenAI(lambda r: Reply(text="first")) as server:
        manifest = limited_manifest(server.base_url, concurrency=1)
        limits = manifest.host.models.quotas[0]
        base_url = server.base_url.rstrip("/") + "/"  # as the openai client holds it
        endpoint = Endpoint(endpoint_id(base_url, "k", "gpt-4o-mini", task_queue), "test", limits)
        handle = client.get_workflow_handle(quota_workflow_id(endpoint.id))
        async with run_worker() as hosts:
            quotas = hosts.quotas
            assert quotas is not None
            now = datetime.now(UTC)
            await quotas.acquire(endpoint, _ask("held", tenant, 2, 1.0, now, limits))
            asks = [_ask(f"j{i}", tenant, 2, 1.0, now, limits) for i in range(40)]
            jobs = [asyncio.create_task(quotas.acquire(endpoint, a)) for a in asks]
            wolf = WolfClient(client, tenant=tenant, task_queue=task_queue)
            sid = await wolf.start_session("a", manifest, prompt="hi")
            try:
                await wait_for(lambda: _waiting(handle, 41), timeout=90)
                await handle.signal(QuotaWorkflow.release, Release(lease_id="held"))
                finished = await asyncio.wait_for(_turn_finished(wolf, sid), timeout=90)
                status = await handle.query(QuotaWorkflow.status)
                await record_history(client, workflow_id(tenant, sid), "flow_interactive_first")
                await record_history(client, handle.id, "limiter_news")
                signals = [
                    e.workflow_execution_signaled_event_attributes.signal_name
                    async for e in handle.fetch_history_events()
                    if e.HasField("workflow_execution_signaled_event_attributes")
                ]
            finally:  # nothing left waiting for the worker's shutdown to wait on
                for job in jobs:
                    job.cancel()
                await asyncio.gather(*jobs, return_exceptions=True)
                await handle.terminate()
                with contextlib.suppress(RPCError):
                    await client.get_workflow_handle(workflow_id(tenant, sid)).terminate()
    # the slot went to the session, then (released) to one job at most: the rest never had it
    assert finished.outcome == "completed" and sum(not job.cancelled() for job in jobs) <= 1
    assert {w.priority for w in status.waiting} == {2} and len(status.waiting) >= 39 and 1 in status.wait_p95
    assert "enqueue" not in signals and signals.count("news") <= 6, signals


async def _turn_finished(wolf: Any, sid: str) -> Any:
    async for _, event in wolf.events(sid, live=False):
        if event.kind == "turn_finished":
            return event
    raise AssertionError("the session ended without finishing its turn")
