"""The session's event stream: a Workflow Stream whose waiting polls cannot crowd out prompts.

Followers long-poll the stream with updates, and the server admits at most 10 updates in flight per
workflow (`history.maxInFlightUpdates`), prompts included. Nothing tells a workflow that a poll's
caller has gone (a Ctrl-C'd or killed `wolf follow`), so its poll waits for the next event: ten of
them in an idle session refused every prompt. temporalio's WorkflowStream has no option that bounds
its polls, so this subclass caps how many may wait at once.

A cap rather than a poll timeout: every answered poll is one of the 2000 updates a run may take
(`history.maxTotalUpdates`) plus about five history events, and a session continues as new only after
a turn, so timed-out polls would let idle followers use up an idle session's updates and lock it
again. Waiting polls cost nothing; only more live followers than the cap cost anything.

It reads WorkflowStream internals (`_on_offset`, `_base_offset`, `_collect_batch`) and keeps the base
class's `_log` serialized (`CompactLog`, about 1.3 KB less per event held): temporalio is pinned, and
the library's own poll handler is replaced, not wrapped, so that an answered poll completes at the
same point of the workflow task as before (histories recorded earlier replay).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStream, WorkflowStreamState
from temporalio.contrib.workflow_streams._types import STREAM_DRAINING_ERROR_TYPE, TRUNCATED_OFFSET_ERROR_TYPE
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agentwolf.workflows.session.turn import CompactLog

MAX_WAITING_POLLS = 5
"""Polls that may wait at once; the rest of the server's 10 in-flight updates stay free for prompts."""

EVICT_AFTER = timedelta(seconds=60)
"""A poll that has waited this long gives its place to a newer one and is answered empty (its
follower, if still there, polls again). Until then a newcomer that would wait is refused instead:
the client retries it quietly every 100 ms, a refusal adds no history, and a poll with something to
read is never refused, so a refused follower still sees every event. Evicting only old polls keeps
more live followers than the cap from evicting each other in a loop: they take turns, which spends
at most MAX_WAITING_POLLS of the run's updates per interval."""

CAP_PATCH = "follower-poll-cap"
"""Patch: runs recorded before the cap never answered a poll early."""


class SessionStream(WorkflowStream):
    """WorkflowStream with at most MAX_WAITING_POLLS polls waiting for events."""

    def __init__(self, prior_state: WorkflowStreamState | None = None) -> None:
        super().__init__(prior_state)
        self._log = CompactLog(self._log)  # type: ignore[assignment]  # list-like: what the base class uses
        self._polls = 0
        self._detached = False
        self._waiting: dict[int, datetime] = {}
        """Waiting polls (by number) and when they started waiting, oldest first."""

    def detach_pollers(self) -> None:
        """Release every waiting poll (continue-as-new): they answer empty and follow the new run."""
        super().detach_pollers()
        self._detached = True
        self._waiting.clear()

    def _has_news(self, poll: PollInput) -> bool:
        """Something at or after the poll's offset (or its offset was truncated): it answers now."""
        return poll.from_offset < self._on_offset()

    def _validate_poll(self, payload: PollInput) -> None:
        """Refuse a poll that would wait while the cap is full of polls too young to evict."""
        super()._validate_poll(payload)
        if self._has_news(payload) or len(self._waiting) < MAX_WAITING_POLLS:
            return
        if workflow.now() - next(iter(self._waiting.values())) < EVICT_AFTER:
            raise ApplicationError(
                f"{MAX_WAITING_POLLS} followers already wait for events; retry",
                type=STREAM_DRAINING_ERROR_TYPE,
            )

    async def _on_poll(self, payload: PollInput) -> PollResult:
        """Wait for an event, or until a newer poll takes this one's place."""
        self._polls += 1
        number = self._polls
        if not self._has_news(payload) and not self._detached:
            self._waiting[number] = workflow.now()
            if len(self._waiting) > MAX_WAITING_POLLS and workflow.patched(CAP_PATCH):
                del self._waiting[next(iter(self._waiting))]
        await workflow.wait_condition(lambda: number not in self._waiting or self._has_news(payload))
        self._waiting.pop(number, None)
        if not self._has_news(payload):  # evicted, or detached for continue-as-new
            return PollResult(next_offset=payload.from_offset)
        if payload.from_offset != 0 and payload.from_offset < self._base_offset:
            raise ApplicationError(
                f"Requested offset {payload.from_offset} has been truncated. "
                f"Current base offset is {self._base_offset}.",
                type=TRUNCATED_OFFSET_ERROR_TYPE,
            )
        return self._collect_batch(payload)
