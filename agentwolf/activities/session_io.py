"""What the session activities share: awaiting work while heartbeating, and querying the calling
session for what this worker lacks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio import activity

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
