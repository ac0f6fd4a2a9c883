"""What the session activities share: awaiting work while heartbeating, querying the calling
session for what this worker lacks, and telling a retry after a lost worker from one after an error."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio import activity
from temporalio.service import RPCError

from agentwolf.workflows.contracts import HostRef

T = TypeVar("T")


async def query(ref: HostRef, name: str, result_type: type[T]) -> T:
    handle = activity.client().get_workflow_handle(ref.workflow_id)
    return await handle.query(name, result_type=result_type)


async def heartbeating(
    work: Awaitable[T], interval: float = 0.1, details: Callable[[], tuple[object, ...]] = tuple
) -> T:
    """Await `work` while heartbeating, so a cancel (interrupt) reaches this activity promptly.

    Each heartbeat carries `details()`: a heartbeat replaces the last one's details, and followers
    read live output from them."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            if not activity.info().is_local:
                activity.heartbeat(*details())
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def after_lost_attempt() -> bool:
    """Whether this attempt retries one that was cut short: it timed out (its worker died or hung)
    rather than ending in an error it raised, so whatever it was doing may or may not have happened.

    Only the server knows how the last attempt ended (`last_failure` of the pending activity); when
    it cannot be asked, the answer is yes, the safe side for a call with side effects."""
    info = activity.info()
    if info.attempt <= 1 or info.is_local or info.workflow_id is None:
        return False
    handle = activity.client().get_workflow_handle(info.workflow_id, run_id=info.workflow_run_id)
    try:
        described = await heartbeating(handle.describe())
    except RPCError:
        return True
    for pending in described.raw_description.pending_activities:
        if pending.activity_id == info.activity_id:
            return pending.last_failure.HasField("timeout_failure_info")
    return True
