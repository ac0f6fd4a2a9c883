"""Query failures a retry clears, for every client path that queries a session."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

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
