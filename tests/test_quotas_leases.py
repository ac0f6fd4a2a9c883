"""Limiter leases (agentwolf/workflows/quotas/, `limiter-leases`) on a real dev server: a request
that runs longer than `lease_ttl` keeps its lease while its worker lives; a release that comes after
its lease left the ledger still counts; a worker's clock behind the quota workflow's never ends a lease
before its grant."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentwolf.config.quotas import EndpointQuota, QuotaPolicy
from agentwolf.hosts.quotas import Endpoint, Quotas, endpoint_id
from agentwolf.workflows.quotas import Ask, News, QuotaStatus, QuotaWorkflow, Release, quota_workflow_id
from tests.conftest import record_history, wait_for
from tests.support.openai_server import Reply, ScriptedOpenAI
from tests.test_quotas import limited_manifest


@pytest.fixture(autouse=True)
def _collected() -> Iterator[None]:
    """Finalizers of the test's clients and tasks run here (see tests/test_quotas.py)."""
    yield
    gc.collect()


async def test_a_request_longer_than_the_lease_ttl_keeps_its_lease(wolf, client, run_worker, task_queue):
    """Concurrency 1 and a 2 s TTL; the first request takes 6 s. Its worker names the lease to the
    quota workflow while it runs, so the second session's request waits for it (before: the lease ended at
    its TTL and the second request went to the provider beside it)."""
    lock, running, peak = threading.Lock(), 0, 0
    calls = 0

    def reply(request: dict[str, Any]) -> Reply:
        nonlocal running, peak, calls
        with lock:
            calls += 1
            first = calls == 1
            running += 1
            peak = max(peak, running)
        time.sleep(6 if first else 0)
        with lock:
            running -= 1
        return Reply(text="ok")

    with ScriptedOpenAI(reply) as server:
        manifest = limited_manifest(server.base_url, concurrency=1, lease_ttl=2)
        endpoint = endpoint_id(server.base_url.rstrip("/") + "/", "k", "gpt-4o-mini", task_queue)
        async with run_worker():
            first = await wolf.submit("long", "a", manifest)
            await wait_for(lambda: calls == 1, timeout=90)
            second = await wolf.submit("short", "a", manifest)
            results = [await wolf.result(first), await wolf.result(second)]
            handle = client.get_workflow_handle(quota_workflow_id(endpoint))
            await record_history(client, handle.id, "limiter_leases")
            await handle.terminate()
    assert [r.outcome for r in results] == ["completed", "completed"]
    assert peak == 1, "a request went to the provider beside one whose lease had outlived its TTL"


def _ask(name: str, limits: EndpointQuota) -> Ask:
    return Ask(lease_id=name, session=name, tenant="t", since=datetime.now(UTC), limits=limits)


async def _status(client: Any, wid: str) -> QuotaStatus:
    return await client.get_workflow_handle(wid).query(QuotaWorkflow.status)


async def test_a_release_after_its_lease_left_the_ledger_still_counts(client, run_worker, task_queue):
    """A lease nobody renewed leaves the ledger a window after its TTL; its release, carrying the
    request's real usage, then counts as an ended lease (before: it matched nothing and was dropped,
    and the provider's count of that request was forgotten)."""
    limits = EndpointQuota(lease_ttl=timedelta(seconds=1), window=timedelta(seconds=3), reserve=0)
    endpoint = Endpoint(f"test-late-{task_queue}", "test", limits)
    wid = quota_workflow_id(endpoint.id)
    quotas = Quotas(client, task_queue, QuotaPolicy())
    async with run_worker():
        await quotas.acquire(endpoint, _ask("long", limits))
        await quotas.close()  # the worker stops naming its lease (as a worker too busy to)
        await wait_for(lambda: _counted(client, wid, 0), timeout=60, interval=0.5)
        handle = client.get_workflow_handle(wid)
        release = Release(lease_id="long", input_tokens=500, output_tokens=70, ended_at=datetime.now(UTC))
        await handle.signal(QuotaWorkflow.news, News(worker="w", releases=[release]))
        counted = await wait_for(lambda: _counted(client, wid, 1), timeout=30)
        await handle.terminate()
    assert counted.use.requests == 1 and counted.use.input_tokens == 500 and counted.use.output_tokens == 70


async def _counted(client: Any, wid: str, requests: int) -> QuotaStatus | None:
    """The status once `requests` count in the window (0: the lease left the ledger: the quota workflow's
    last wake was past its TTL and window, and every wake prunes)."""
    status = await _status(client, wid)
    return status if status.use.requests == requests else None


async def test_a_release_by_a_clock_behind_never_ends_a_lease_before_its_grant(
    client, run_worker, task_queue
):
    """A worker whose clock is a minute behind releases a lease: the lease counts in the window from
    its grant (before: it ended a minute before its grant and left the window at once)."""
    limits = EndpointQuota(window=timedelta(seconds=20), reserve=0)
    endpoint = Endpoint(f"test-skew-{task_queue}", "test", limits)
    wid = quota_workflow_id(endpoint.id)
    quotas = Quotas(client, task_queue, QuotaPolicy())
    async with run_worker():
        await quotas.acquire(endpoint, _ask("behind", limits))
        await quotas.close()
        handle = client.get_workflow_handle(wid)
        behind = datetime.now(UTC) - timedelta(minutes=1)
        release = Release(lease_id="behind", ended_at=behind)
        await handle.signal(QuotaWorkflow.news, News(worker="w", releases=[release]))
        status = await wait_for(lambda: _released(client, wid), timeout=30)
        await record_history(client, wid, "limiter_clock_behind")
        await handle.terminate()
    assert status.use.requests == 1


async def _released(client: Any, wid: str) -> QuotaStatus | None:
    status = await _status(client, wid)
    return status if status.use.active == 0 else None


async def test_an_endpoint_with_unknown_limits_sends_its_first_request_alone(client, run_worker, task_queue):
    """No limit configured or learnt: of three requests the first is granted alone; its answer (the
    provider said nothing of its limits) lets the other two go (before: all three at once, a burst
    into a budget nobody knew)."""
    limits = EndpointQuota()
    endpoint = Endpoint(f"test-probe-{task_queue}", "test", limits)
    wid = quota_workflow_id(endpoint.id)
    quotas = Quotas(client, task_queue, QuotaPolicy())
    async with run_worker():
        first = await quotas.acquire(endpoint, _ask("first", limits))
        rest = [asyncio.create_task(quotas.acquire(endpoint, _ask(f"r{i}", limits))) for i in range(2)]
        alone = await wait_for(lambda: _seen(client, wid, 3), timeout=60)
        quotas.release(endpoint, Release(lease_id="first", ended_at=datetime.now(UTC)))
        granted = await asyncio.wait_for(asyncio.gather(*rest), timeout=60)
        await record_history(client, wid, "limiter_probe")
        await client.get_workflow_handle(wid).terminate()
        await quotas.close()
    assert first.granted and alone.requests == 1 and len(alone.waiting) == 2
    assert all(g.granted for g in granted)


async def _seen(client: Any, wid: str, asks: int) -> QuotaStatus | None:
    status = await _status(client, wid)
    return status if status.requests + len(status.waiting) == asks else None


async def test_a_first_request_slow_to_answer_holds_the_others_back_for_a_while_only(
    client, run_worker, task_queue
):
    """Limits unknown and the first request's answer not in (slow, or its worker gone): the others
    go once PROBE_WAIT has passed since its grant (before: they waited for its answer, however long
    it took)."""
    limits = EndpointQuota()
    endpoint = Endpoint(f"test-slow-probe-{task_queue}", "test", limits)
    wid = quota_workflow_id(endpoint.id)
    quotas = Quotas(client, task_queue, QuotaPolicy())
    async with run_worker():
        await quotas.acquire(endpoint, _ask("slow", limits))
        rest = [quotas.acquire(endpoint, _ask(f"r{i}", limits)) for i in range(2)]
        granted = await asyncio.wait_for(asyncio.gather(*rest), timeout=60)
        status = await _status(client, wid)
        await record_history(client, wid, "limiter_probe_wait")
        await client.get_workflow_handle(wid).terminate()
        await quotas.close()
    assert all(g.granted for g in granted) and status.use.active == 3
