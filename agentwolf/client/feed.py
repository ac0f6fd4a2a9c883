"""One reader of a session's events per process, shared by every follower of that session.

Followers used to read on their own: each one long-polled the session's Workflow Stream with updates
(every answered update is recorded in history with the events it carries: a followed turn's history
grew by almost three times its answer) and described the workflow 20 times a second while a turn ran,
whether or not its client read anything (200 idle streams made 4,000 RPCs a second).

A Feed reads for all of them:
- durable events by the stream's query (no history); when there is nothing new, ONE waiting poll
  (the stream's long-poll update, for a topic nothing is published to, so its answer carries no
  events: it only says that something is past an offset) wakes it;
- live output (the running activities' heartbeat details) by ONE `describe` every POLL_EVERY while
  a turn runs, and only while some follower asks for more: followers whose clients stall cost
  nothing, and a stalled follower holds no queue (it pulls the newest snapshot when it reads again).
The newest KEEP durable events stay in memory for followers that trail; one that falls further
behind reads its own way back by query.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.contrib.workflow_streams import PollInput, PollResult
from temporalio.contrib.workflow_streams._types import (
    STREAM_DRAINING_ERROR_TYPE,
    TRUNCATED_OFFSET_ERROR_TYPE,
    _decode_payload,  # pyright: ignore[reportPrivateUsage]
)
from temporalio.service import RPCError

from agentwolf.client.transient import transient
from agentwolf.workflows.contracts import LiveText, LiveTool
from agentwolf.workflows.types import EVENTS_TOPIC, STATE_ATTR, Event

POLL = "__temporal_workflow_stream_poll"
"""The stream's poll: an update that waits for events, and a query that reads them at once."""
WAKE_TOPIC = "wolf.wake"
"""A topic nothing is published to: a poll for it answers when any event lands, carrying none."""
POLL_EVERY = 0.05
"""Seconds between reads of the running activities while a turn runs and a follower waits."""
IDLE_CHECK = 5.0
"""While idle, a read every this many seconds at most (a durable event wakes the reader at once)."""
STALLED = 1.0
"""Seconds after which a follower that has not asked for more counts as stalled."""
RETRY = 0.5
"""Seconds before reading again after Temporal did not answer (followers do not die of a hiccup)."""
ENDED_TRIES = 5
"""Reads of a closed session that may fail before a follower gives up."""
KEEP = 256
"""Durable events a feed keeps for followers that trail behind it."""
RUNNING = (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.CONTINUED_AS_NEW)


@dataclass(frozen=True)
class Live:
    """What one running activity reported: decoded heartbeat details and when its attempt started."""

    details: LiveText | LiveTool
    attempt: int
    started: datetime


@dataclass
class Snapshot:
    """The running activities at one describe; `version` grows with each."""

    version: int
    at: datetime
    activities: list[Live]


@dataclass
class Feed:
    """One session's events for every follower of it in this process (see the module docstring)."""

    client: Client
    workflow_id: str
    start: int
    """Every durable event from this offset to `end` is in `kept`."""
    end: int = -1
    """The offset the next durable event will have, as far as the feed has read (-1: not read yet)."""
    kept: deque[tuple[int, Event]] = field(default_factory=lambda: deque(maxlen=KEEP))
    live: Snapshot | None = None
    """The newest running activities (each follower takes it when it reads: never a backlog)."""
    ended: bool = False
    failure: BaseException | None = None
    followers: int = 0
    hungry: int = 0
    """Followers that want live output and wait for news now."""
    fed_at: float = float("-inf")
    """When a follower that wants live output last waited for news (loop time): live output is read
    while one does, or did within STALLED seconds (a follower whose consumer is busy for a moment
    keeps its pace), and no longer for followers whose consumers stopped reading."""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _demand: asyncio.Event = field(default_factory=asyncio.Event)
    _terminal: bool = False
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.handle = self.client.get_workflow_handle(self.workflow_id)
        self._tasks = [asyncio.create_task(self._read_durable()), asyncio.create_task(self._read_live())]

    # what followers use ---------------------------------------------------------------------------

    def changed(self) -> asyncio.Event:
        """Set at the next change (take it before reading the state it guards)."""
        return self._changed

    async def wait(self, changed: asyncio.Event, live: bool) -> None:
        """Wait for `changed`; a follower that wants live output makes the feed read it meanwhile."""
        self.hungry += live
        if live:
            self.fed_at = asyncio.get_running_loop().time()
            self._demand.set()
        try:
            await changed.wait()
        finally:
            self.hungry -= live

    async def read(self, offset: int) -> list[tuple[int, Event]]:
        """The durable events at or after `offset` that are known now (by query if the feed has let
        them go, or has not read that far back)."""
        if offset >= self.start:
            return [item for item in self.kept if item[0] >= offset]
        return (await self._query(offset))[0]

    async def caught_up(self) -> int:
        """Where the stream ended when the feed first read it, or now (live output waits until the
        events before it were read). Not a query of its own: a second query of the workflow while
        one is under way waits about a second on the server."""
        while self.end < 0 and self.failure is None and not self.ended:
            await self._changed.wait()
        return self.end

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()

    # the readers ------------------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _read_durable(self) -> None:
        try:
            offset = self.start
            while True:
                items, offset, more = await self._query(offset)
                for item in items:
                    if len(self.kept) == KEEP:
                        self.start = self.kept[0][0] + 1
                    self.kept.append(item)
                self.end = offset
                self._notify()
                if more:
                    continue
                if self._terminal:
                    self.ended = True
                    return
                await self._wait_past(offset)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - every follower of the feed raises it
            self.failure = exc
        finally:
            _forget(self)
            self._notify()

    async def _query(self, offset: int) -> tuple[list[tuple[int, Event]], int, bool]:
        """The events from `offset` on that the stream holds now (its query: nothing recorded)."""
        for attempt in itertools.count(1):
            try:
                result = await self.handle.query(
                    POLL, PollInput(topics=[EVENTS_TOPIC], from_offset=offset), result_type=PollResult
                )
                break
            except (RPCError, WorkflowQueryFailedError) as exc:
                if isinstance(exc, WorkflowQueryFailedError) and not transient(exc):
                    raise
                # A closed session's last events need a worker to replay it: a few more tries.
                if attempt >= ENDED_TRIES and not await self._runs():
                    raise
                await asyncio.sleep(RETRY)
        converter = self.client.data_converter.payload_converter
        items = [
            (item.offset, converter.from_payload(_decode_payload(item.data), Event)) for item in result.items
        ]
        return items, result.next_offset, result.more_ready

    async def _wait_past(self, offset: int) -> None:
        """Until the stream has an event at or past `offset` (or the workflow ended or continued as
        new): one waiting poll whose answer carries no events."""
        while True:
            try:
                update = await self.handle.start_update(
                    POLL,
                    PollInput(topics=[WAKE_TOPIC], from_offset=offset),
                    wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                    result_type=PollResult,
                )
                await update.result()
                return
            except WorkflowUpdateFailedError as exc:
                cause = getattr(exc.cause, "type", None)
                if cause == TRUNCATED_OFFSET_ERROR_TYPE:
                    return  # the query reads from what the stream kept
                if cause != STREAM_DRAINING_ERROR_TYPE:
                    raise
                await asyncio.sleep(0.1)  # the session's waiting polls are full, or it continues as new
            except (WorkflowUpdateRPCTimeoutOrCancelledError, RPCError) as exc:
                if isinstance(exc.__cause__, asyncio.CancelledError):
                    raise exc.__cause__ from None
                if not await self._runs():
                    self._terminal = True  # one more query reads what the last run left
                return

    async def _runs(self) -> bool:
        """Whether the session's latest run still runs (a run that continued as new has a successor)."""
        return (await self.handle.describe()).status in RUNNING

    async def _read_live(self) -> None:
        loop = asyncio.get_running_loop()
        version = 0
        while not self.ended:
            while not self.hungry and loop.time() - self.fed_at > STALLED:
                self._demand.clear()
                await self._demand.wait()
            try:
                described = await self.handle.describe()
            except RPCError:
                await asyncio.sleep(RETRY)
                continue
            if described.status not in RUNNING:
                return
            pending = list(described.raw_description.pending_activities)
            if pending or self.live is not None:
                version += 1
                self.live = Snapshot(version, datetime.now(UTC), await self._decode(pending))
                self._notify()
            if pending or described.typed_search_attributes.get(STATE_ATTR) == "running":
                await asyncio.sleep(POLL_EVERY)  # after the answer: a slow server is asked less often
            else:
                end, changed = self.end, self._changed
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(IDLE_CHECK):
                        while self.end == end:
                            await changed.wait()
                            changed = self._changed

    async def _decode(self, pending: list[Any]) -> list[Live]:
        now = datetime.now(UTC)
        out: list[Live] = []
        for activity in pending:
            name, beat = activity.activity_type.name, activity.heartbeat_details.payloads
            if name not in ("wolf.model_request", "wolf.call_tool", "wolf.acp_turn") or not beat:
                continue
            details_type = LiveTool if name == "wolf.call_tool" else LiveText
            try:  # an ACP turn's second detail is for its next attempt, not for followers
                (details,) = await self.client.data_converter.decode(beat[:1], [details_type])
            except Exception:  # noqa: BLE001, S112 - details of another version's shape: nothing to show
                continue
            started = (
                activity.last_started_time.ToDatetime(UTC) if activity.HasField("last_started_time") else now
            )
            out.append(Live(details, activity.attempt, started))
        return out


_FEEDS: dict[tuple[int, str], Feed] = {}


@contextlib.asynccontextmanager
async def attached(client: Client, workflow_id: str, from_offset: int) -> Any:
    """The session's feed in this process (started for the first follower, stopped after the last)."""
    key = (id(client), workflow_id)
    feed = _FEEDS.get(key)
    if feed is None:
        feed = _FEEDS[key] = Feed(client, workflow_id, max(0, from_offset))
    feed.followers += 1
    try:
        yield feed
    finally:
        feed.followers -= 1
        if feed.followers == 0:
            _forget(feed)
            feed.close()


def _forget(feed: Feed) -> None:
    """New followers start a feed of their own (this one ended, failed or has no followers left)."""
    key = (id(feed.client), feed.workflow_id)
    if _FEEDS.get(key) is feed:
        del _FEEDS[key]


def followers(client: Client, workflow_id: str) -> int | None:
    """How many followers this process has of the session (None: it does not read it now)."""
    feed = _FEEDS.get((id(client), workflow_id))
    return None if feed is None else feed.followers
