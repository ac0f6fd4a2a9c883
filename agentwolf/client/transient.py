"""Query failures a retry clears, for every client path that queries a session."""

from __future__ import annotations

TRANSIENT_QUERY_ERRORS = ("no poller seen", "TMPRL1101", "handed over to the next run")
"""No worker has polled lately (a worker that has just started), the SDK's "potential deadlock"
(an activation that did not yield within 2 s, which a starved CPU, a long garbage collection or a
first pydantic schema build causes too: the worker evicts the run and replays it for the next try),
and a run that has just continued as new and let its transcript go (workflows/session.py's
HANDED_OVER: the next try reaches the next run, or this one replayed)."""


def transient(exc: Exception) -> bool:
    """Whether a failed query (RPCError or WorkflowQueryFailedError) is worth asking again."""
    message = getattr(exc, "message", None) or str(exc)
    return any(mark in message for mark in TRANSIENT_QUERY_ERRORS)
