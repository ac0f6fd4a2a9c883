"""The quota workflow's reserve for interactive requests (agentwolf/workflows/quotas/, `limits.reserve`)
on a real dev server: jobs that saturate an endpoint leave room for a person's request, which is
granted at once instead of a window later; once no person has asked for a window, jobs use it too."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.service import RPCError

from agentwolf.config.quotas import EndpointQuota, QuotaPolicy
from agentwolf.hosts.quotas import Endpoint, Quotas
from agentwolf.workflows.quotas import Ask, QuotaStatus, QuotaWorkflow, quota_workflow_id
from tests.conftest import record_history, wait_for


@pytest.fixture(autouse=True)
def _collected() -> Iterator[None]:
    """Finalizers of the test's clients and tasks run here (see tests/test_quotas.py)."""
    yield
    gc.collect()


def _ask(name: str, priority: int, limits: EndpointQuota) -> Ask:
    return Ask(
        lease_id=name, session=name, tenant="t", priority=priority, since=datetime.now(UTC), limits=limits
    )


async def _status(quotas: Quotas, endpoint: Endpoint) -> QuotaStatus | None:
    """The quota workflow's status, None before the first poll has started it."""
    handle = quotas.client.get_workflow_handle(quota_workflow_id(endpoint.id))
    with contextlib.suppress(RPCError):
        return await handle.query(QuotaWorkflow.status)
    return None


async def _settled(quotas: Quotas, endpoint: Endpoint, asks: int) -> QuotaStatus | None:
    """The quota workflow's status once it has seen all `asks` (granted or waiting)."""
    status = await _status(quotas, endpoint)
    return status if status and status.requests + len(status.waiting) == asks else None


async def test_jobs_saturating_an_endpoint_leave_room_for_an_interactive_request(
    client, run_worker, task_queue
):
    """Twelve job requests on a 10-request window that nothing leaves (never released, a 10-minute
    window): they take 9 (15 % of 10 is kept: one request) and wait; a person's request then gets
    the 10th at once, unpaced, where before it waited for a job's lease to leave the window. On a
    second endpoint with a 2 s window and no person, jobs take the 10th once a window has passed."""
    held = EndpointQuota(rpm=10, window=timedelta(minutes=10))
    brief = EndpointQuota(rpm=10, window=timedelta(seconds=2))
    quotas = Quotas(client, task_queue, QuotaPolicy())
    people = Endpoint(f"test-reserve-{task_queue}", "test", held)
    jobs_only = Endpoint(f"test-borrow-{task_queue}", "test", brief)
    waiting: list[asyncio.Task[object]] = []
    async with run_worker():
        try:
            waiting += [
                asyncio.create_task(quotas.acquire(people, _ask(f"j{i}", 2, held))) for i in range(12)
            ]
            saturated = await wait_for(lambda: _settled(quotas, people, 12), timeout=90)
            person = asyncio.create_task(quotas.acquire(people, _ask("person", 1, held)))
            waiting.append(person)

            async def answered() -> bool:  # granted, or shown waiting by the quota workflow
                status = await _status(quotas, people)
                return person.done() or status is not None and "person" in {w.session for w in status.waiting}

            await wait_for(answered, timeout=90)
            after = await _status(quotas, people)
            assert after is not None
            await record_history(client, quota_workflow_id(people.id), "limiter_reserve")

            waiting += [
                asyncio.create_task(quotas.acquire(jobs_only, _ask(f"b{i}", 2, brief))) for i in range(12)
            ]
            # the reserve is held 2 s from the quota workflow's start, then jobs borrow it
            borrowed = await wait_for(lambda: _full(quotas, jobs_only), timeout=90)
        finally:
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            for endpoint in (people, jobs_only):
                with contextlib.suppress(RPCError):  # a quota workflow not started (the test failed before)
                    await client.get_workflow_handle(quota_workflow_id(endpoint.id)).terminate()
            await quotas.close()
    assert saturated.requests == 9 and {w.priority for w in saturated.waiting} == {2}
    assert person.done() and not person.cancelled() and person.result().granted
    assert after.use.requests == 10 and 1 in after.wait_p95 and len(after.waiting) == 3
    assert borrowed.use.requests == 10 and {w.priority for w in borrowed.waiting} == {2}


async def _full(quotas: Quotas, endpoint: Endpoint) -> QuotaStatus | None:
    status = await _status(quotas, endpoint)
    return status if status and status.use.requests == 10 else None
