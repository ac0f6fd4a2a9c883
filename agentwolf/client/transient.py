"""Query and update failures a retry clears, for every client path that asks a session."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.client import WorkflowQueryFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

T = TypeVar("T")

NO_POLLER = "no poller seen"
"""Temporal's refusal of a query while no worker polls the session's task queue."""
TRANSIENT_QUERY_ERRORS = (NO_POLLER, "TMPRL1101", "handed over to the next run")
"""No worker has polled lately (a worker that has just started), the SDK's "potential deadlock"
(an activation that did not yield within 2 s, which a starved CPU, a long garbage collection or a
first pydantic schema build causes too: the worker evicts the run and replays it for the next try),
and a run that has just continued as new and let its transcript go (workflows/session/workflow.py's
HANDED_OVER: the next try reaches the next run, or this one replayed)."""


def transient(exc: Exception) -> bool:
    """Whether a failed query (RPCError or WorkflowQueryFailedError) is worth asking again."""
    message = getattr(exc, "message", None) or str(exc)
    return any(mark in message for mark in TRANSIENT_QUERY_ERRORS)


NO_POLLER_WAIT = 5.0
"""How long a query waits out "no poller seen": a worker that has just (re)started has not polled
every partition of the task queue yet."""


async def patiently(query: Callable[[], Awaitable[T]]) -> T:
    """Run `query`, retrying for NO_POLLER_WAIT while it fails in a way a retry clears
    (TRANSIENT_QUERY_ERRORS); any other error, or the same one after that, is raised."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + NO_POLLER_WAIT
    while True:
        try:
            return await query()
        except (RPCError, WorkflowQueryFailedError) as exc:
            if not transient(exc) or loop.time() > deadline:
                raise
        await asyncio.sleep(0.2)


CUT_CALL_MARKS = ("context canceled", "context deadline exceeded")
"""A server busy enough to drop a call's context answers it with one of these (any status code)."""
CUT_CALL_STATUSES = (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.UNAVAILABLE)
RESEND_FOR = 60.0
"""How long an update whose call was cut is sent again before the failure is raised."""


def cut(exc: BaseException) -> bool:
    """Whether an update call was cut on its way (the update may or may not have been taken)."""
    if isinstance(exc, WorkflowUpdateRPCTimeoutOrCancelledError):
        return True
    return isinstance(exc, RPCError) and (
        exc.status in CUT_CALL_STATUSES or any(mark in exc.message for mark in CUT_CALL_MARKS)
    )


async def resent(update: Callable[[], Awaitable[T]]) -> T:
    """Run `update` (which must send the same update id every time: Temporal answers a repeated id
    with the first one's outcome, so a prompt is taken once) again while its call is cut, for
    RESEND_FOR. A cancelled caller (Ctrl-C: the SDK says that as a cut call too) is not resent."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + RESEND_FOR
    backoff = 0.2
    while True:
        try:
            return await update()
        except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError) as exc:
            task = asyncio.current_task()
            if not cut(exc) or loop.time() > deadline or (task is not None and task.cancelling()):
                raise
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 2.0)
