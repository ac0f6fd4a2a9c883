"""Provider quotas on the worker: every request to a limited endpoint takes a lease from the
endpoint's quota workflow (agentwolf/workflows/quotas/) first, so every worker of the namespace
draws from one budget, and a 429 stops them all until its `Retry-After` has passed.

`Quotas.wrap` puts a `QuotaModel` (quotas_model.py) around every model with a provider (a `quotas`
entry of the policy or the manifest says its numbers; with none, they are learnt); the provider
SDK's own retries are turned off for it (they would resend inside a cooldown the others keep). The
rate-limit headers of every response (OpenAI and Anthropic send them on success too) go back to the
quota workflow with the lease, read by a response hook on the SDK's HTTP client (quotas_headers.py).
While a request runs, its worker names its lease to the quota workflow every quarter of
`lease_ttl`, so a request longer than the TTL keeps it. A request waits for its lease inside the
activity, heartbeating, so waiting burns no retry attempt; what it waits for is in the activity's
heartbeat details (`LiveText.waiting`), which `wolf status` and followers read. The wait fails the
turn only after the policy's `rate_wait_max`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.models import Model
from temporalio import activity
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import Priority, WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.config.quotas import (
    DEFAULT_PRIORITY,
    INTERACTIVE,
    PRIORITY_MEMO,
    EndpointQuota,
    QuotaPolicy,
    quota_for,
)
from agentwolf.hosts.quotas_headers import learned, listen, reset_seconds
from agentwolf.hosts.quotas_model import Endpoint, QuotaModel, Wait, Waits, bind
from agentwolf.workflows.quotas import (
    Ask,
    Cooldown,
    Grant,
    Learned,
    News,
    Poll,
    Polled,
    QuotaState,
    QuotaWorkflow,
    Release,
    quota_workflow_id,
)

__all__ = ["Endpoint", "QuotaModel", "Quotas", "Wait", "Waits", "bind", "endpoint_id", "learned"]
"""With the model side (quotas_model.py) and the headers' reading (quotas_headers.py) it uses: the
names the activities and the worker take from here."""

log = logging.getLogger(__name__)

RETRY_AFTER_DEFAULT = 1.0
"""Seconds of cooldown after a 429 that says nothing about when to come back."""
PRIORITIES_KEPT = 10_000
"""Sessions whose priority key a worker remembers (oldest out first)."""
SIGNAL_TRIES = 60.0
"""Seconds a signal to a quota workflow is tried again while the server is busy."""
ATTEMPT_MARGIN = timedelta(seconds=30)
"""A wait that would run past the attempt's start-to-close timeout less this ends the attempt with
`next_retry_delay` instead (a fresh attempt waits on)."""


def endpoint_id(base_url: str, api_key: str, model: str, task_queue: str) -> str:
    """A digest of what a provider budgets by (the key only as its own digest, never itself), per
    task queue: an endpoint's quota workflow runs on the queue of the workers that use it, so one that no
    worker polls any more (workers moved to another queue) never holds their requests."""
    key = hashlib.sha256(api_key.encode()).hexdigest()
    return hashlib.sha256(f"{base_url}\0{key}\0{model}\0{task_queue}".encode()).hexdigest()[:24]


@dataclass
class _Waiting:
    """One request of this worker waiting for a lease."""

    ask: Ask
    grant: asyncio.Future[Grant]
    latest: Grant | None = None
    """The quota workflow's last word on why it waits."""


@dataclass
class _Queue:
    """This worker's requests waiting on one endpoint, and its poll."""

    endpoint: Endpoint
    waiting: dict[str, _Waiting] = field(default_factory=dict)
    poller: asyncio.Task[None] | None = None
    held: set[str] = field(default_factory=set)
    """Leases granted to this worker and not given back (a grant the workflow sends again is no news)."""
    news: News | None = None
    """What the next signal tells the quota workflow (gathered while the last one is in flight)."""
    sender: asyncio.Task[None] | None = None
    """The one signal in flight (several, each about one request, crowd a busy server)."""
    urgent: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Interactive requests announced on their own, past the signal in flight: lease -> its send."""
    renewer: asyncio.Task[None] | None = None
    """Names the `held` leases to the quota workflow while there are any."""
    told: bool = False
    """The headers of a stream as it opened went to the quota workflow (once: after, releases carry them)."""


@dataclass
class Quotas:
    """One worker's access to the fleet's quota workflows."""

    client: Client
    task_queue: str
    policy: QuotaPolicy
    cooldowns: dict[str, datetime] = field(default_factory=dict)
    """Endpoint -> the end of a cooldown this worker saw (a 429 here, or a quota workflow's answer)."""
    worker: str = field(default_factory=lambda: uuid.uuid4().hex)
    """This process, to the quota workflows (its polls collect its grants)."""
    _queues: dict[str, _Queue] = field(default_factory=dict)
    _priorities: dict[str, int] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    """Signals being sent (`close` waits for them)."""

    def wrap(self, model: Model, spec: str, manifest_quotas: list[EndpointQuota], tenant: str) -> Model:
        """`model` under quotas, with the limits of the first `limits` entry matching `spec`
        (none: every number learnt from the provider); in-process models (`local:`) as they are."""
        if model.base_url is None:
            return model
        limits = quota_for(spec, self.policy.models, manifest_quotas)
        client = getattr(model, "client", None)
        if client is not None and hasattr(client, "max_retries"):
            client.max_retries = 0  # the SDK's hidden retries would resend during a shared cooldown
        listen(client)
        base_url = model.base_url
        key = str(getattr(client, "api_key", "") or "")
        endpoint = Endpoint(
            endpoint_id(base_url, key, model.model_name, self.task_queue), f"{spec} @ {base_url}", limits
        )
        return QuotaModel(model, self, endpoint, tenant)

    async def acquire(self, endpoint: Endpoint, ask: Ask, waits: Waits | None = None) -> Grant:
        """A lease, waiting (and saying why in `waits`) as long as it takes, up to the policy's
        `rate_wait_max` since the request was first scheduled."""
        queue = self._queues.setdefault(endpoint.id, _Queue(endpoint))
        ask = ask.model_copy(update={"worker": self.worker})
        try:
            while (cooling := self.cooldowns.get(endpoint.id)) and cooling > datetime.now(UTC):
                self._check_budget(endpoint, Wait("cooldown", cooling), waits)
                await asyncio.sleep(min((cooling - datetime.now(UTC)).total_seconds(), 1.0))
            waiting = _Waiting(ask, asyncio.get_running_loop().create_future())
            queue.waiting[ask.lease_id] = waiting
            if queue.poller is None or queue.poller.done():
                queue.poller = asyncio.create_task(self._poll(queue))
            else:  # a poll is in flight: announce this one now rather than at the next poll
                self._tell(queue, News(worker=self.worker, asks=[ask]), urgent=ask.priority <= INTERACTIVE)
            while True:
                await asyncio.wait({waiting.grant}, timeout=0.5)
                if waiting.grant.done():
                    return waiting.grant.result()
                latest = waiting.latest
                wait = Wait(latest.reason, latest.resumes_at) if latest else Wait("queued", None)
                if latest is not None and latest.reason == "cooldown" and latest.resumes_at is not None:
                    self.cooldowns[endpoint.id] = latest.resumes_at
                self._check_budget(endpoint, wait, waits)
        finally:
            queue.waiting.pop(ask.lease_id, None)
            if waits is not None:
                waits.now = None

    async def close(self) -> None:
        """Stop polling and let the last signals (releases) go out."""
        pollers = [t for q in self._queues.values() for t in (q.poller, q.renewer) if t is not None]
        for poller in pollers:
            poller.cancel()
        await asyncio.gather(*pollers, *self._tasks, return_exceptions=True)

    async def priority(self, info: activity.Info, carried: int | None = None) -> int:
        """The asking session's priority: the activity's Temporal priority key when it has one, else
        the one its session was started with (its memo): carried in the request's input, or (sessions
        since before the `priority-input` patch) one describe per session, remembered."""
        if info.priority and info.priority.priority_key:
            return info.priority.priority_key
        if carried is not None:
            return carried
        wid = info.workflow_id
        if wid is None:
            return DEFAULT_PRIORITY
        if (known := self._priorities.get(wid)) is not None:
            return known
        try:
            described = await self.client.get_workflow_handle(wid).describe()
            key = int(await described.memo_value(PRIORITY_MEMO, DEFAULT_PRIORITY))
        except (RPCError, TypeError, ValueError):
            return DEFAULT_PRIORITY
        if len(self._priorities) >= PRIORITIES_KEPT:
            self._priorities.pop(next(iter(self._priorities)))
        self._priorities[wid] = key
        return key

    def _check_budget(self, endpoint: Endpoint, wait: Wait, waits: Waits | None) -> None:
        """Note the wait; past `rate_wait_max` fail for good, past this attempt's time end it with
        `next_retry_delay` (the next attempt waits on)."""
        if waits is not None:
            waits.now = wait
        if not activity.in_activity():
            return
        info = activity.info()
        now = datetime.now(UTC)
        if now - info.scheduled_time > self.policy.rate_wait_max:
            raise ApplicationError(
                f"waited {self.policy.rate_wait_max} for the provider's limits ({endpoint.label}: "
                f"{wait.reason}); `quotas.rate_wait_max` in the worker policy allows longer waits",
                type="RateWaitExceeded",
                non_retryable=True,
            )
        timeout = info.start_to_close_timeout
        if timeout is not None and now + ATTEMPT_MARGIN > info.started_time + timeout:
            resumes = wait.resumes_at
            delay = (resumes - now) if resumes and resumes > now else timedelta(seconds=1)
            raise ApplicationError(
                f"rate limited ({endpoint.label}: {wait.reason}); waiting on in the next attempt",
                type="RateLimited",
                next_retry_delay=delay,
            )

    async def _poll(self, queue: _Queue) -> None:
        """This worker's one poll in flight for an endpoint, while any of its requests waits; if it
        fails for good, so do they."""
        try:
            await self._polling(queue)
        except Exception as exc:
            for waiting in queue.waiting.values():
                if not waiting.grant.done():
                    waiting.grant.set_exception(exc)
            raise

    async def _polling(self, queue: _Queue) -> None:
        endpoint = queue.endpoint
        state = QuotaState(endpoint=endpoint.id, label=endpoint.label, limits=endpoint.limits)
        backoff, running = 0.1, False
        while queue.waiting:
            # a granted request leaves `waiting` only when its task runs again: not in the next poll
            asks = [w.ask for w in queue.waiting.values() if not w.grant.done()]
            poll = Poll(worker=self.worker, asks=asks, ungranted=True)
            start = WithStartWorkflowOperation(  # one per request: the SDK refuses to reuse one
                QuotaWorkflow.run,
                state,
                id=quota_workflow_id(endpoint.id),
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                # first in the queue: its tasks must not wait behind the sessions it paces
                priority=Priority(priority_key=1),
            )
            try:
                if running:  # a plain update: less work for the server than update-with-start
                    handle = self.client.get_workflow_handle(quota_workflow_id(endpoint.id))
                    update = uuid.uuid4().hex
                    polled: Polled = await handle.execute_update(QuotaWorkflow.poll, poll, id=update)
                else:  # the first poll, or after an error (the quota workflow may have ended when idle)
                    polled = await self.client.execute_update_with_start_workflow(
                        QuotaWorkflow.poll, poll, start_workflow_operation=start, id=uuid.uuid4().hex
                    )
            except (RPCError, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError) as exc:
                # the server busy (too many updates in flight), or the quota workflow moving to a new run
                log.debug("quota workflow %s: %s; polling again", endpoint.label, exc)
                await asyncio.sleep(backoff)
                backoff, running = min(backoff * 2, 2.0), False
                continue
            backoff, running = 0.1, True
            for grant in polled.grants:
                waiting = queue.waiting.get(grant.lease_id)
                if not grant.granted:
                    if waiting is not None:
                        waiting.latest = grant
                elif waiting is not None and not waiting.grant.done():
                    queue.held.add(grant.lease_id)
                    waiting.grant.set_result(grant)
                    if queue.renewer is None or queue.renewer.done():
                        queue.renewer = asyncio.create_task(self._renew(queue))
                elif grant.lease_id not in queue.held:  # granted after its request stopped waiting
                    self.release(endpoint, Release(lease_id=grant.lease_id, sent=False))

    async def _renew(self, queue: _Queue) -> None:
        """While this worker holds leases on the endpoint, name them to the quota workflow every quarter of
        their TTL: each lives on a TTL from then, however long its request runs."""
        every = queue.endpoint.limits.lease_ttl.total_seconds() / 4
        while queue.held:
            await asyncio.sleep(every)
            if queue.held:
                self._tell(queue, News(worker=self.worker, held=sorted(queue.held)))

    def release(self, endpoint: Endpoint, release: Release) -> None:
        """Give a lease back, in the background: it must go out even when the activity is cancelled."""
        queue = self._queues.setdefault(endpoint.id, _Queue(endpoint))
        queue.held.discard(release.lease_id)
        self._tell(queue, News(worker=self.worker, releases=[release]))

    def opened(self, endpoint: Endpoint, heard: list[Mapping[str, str]]) -> None:
        """A stream opened: the first on this endpoint tells the quota workflow at once what its headers say,
        so requests held back while its limits were unknown need not wait for the whole answer."""
        queue = self._queues.setdefault(endpoint.id, _Queue(endpoint))
        if not queue.told:
            queue.told = True
            said = learned(heard[-1]) if heard else None
            self._tell(queue, News(worker=self.worker, learned=said or Learned()), urgent=True)

    def rate_limited(self, endpoint: Endpoint, exc: ModelHTTPError, release: Release) -> None:
        """A 429: stop this worker at once, and every other through the quota workflow; the cooldown reaches
        the quota workflow with the lease coming back (no grant in between)."""
        wait = exc.retry_after if exc.retry_after is not None else reset_seconds(exc.headers or {})
        until = datetime.now(UTC) + timedelta(seconds=wait if wait is not None else RETRY_AFTER_DEFAULT)
        self.cooldowns[endpoint.id] = max(until, self.cooldowns.get(endpoint.id, until))
        cooldown = Cooldown(until=until, reason=f"429 from {endpoint.label}")
        news = News(worker=self.worker, cooldown=cooldown, releases=[release])
        self._tell(self._queues.setdefault(endpoint.id, _Queue(endpoint)), news, urgent=True)

    def _tell(self, queue: _Queue, news: News, urgent: bool = False) -> None:
        """Add `news` to what the next signal to the quota workflow says and send it in the background: one
        signal in flight per endpoint, carrying everything gathered meanwhile. Urgent news (an
        interactive request, a 429) that finds a signal in flight goes at once on its own rather
        than wait behind the jobs' news."""
        if urgent and queue.sender is not None and not queue.sender.done():
            task = self._spawn(self._signal(queue.endpoint, news))
            leases = [a.lease_id for a in news.asks]
            for lease in leases:
                queue.urgent[lease] = task

            def sent(_: asyncio.Task[None]) -> None:
                for lease in leases:
                    queue.urgent.pop(lease, None)

            task.add_done_callback(sent)
            return
        if queue.news is None:
            queue.news = news
        else:
            gathered = queue.news
            gathered.asks += news.asks
            gathered.releases += news.releases
            gathered.held = news.held or gathered.held
            gathered.learned = news.learned or gathered.learned
            if news.cooldown is not None and (
                gathered.cooldown is None or news.cooldown.until > gathered.cooldown.until
            ):
                gathered.cooldown = news.cooldown
        if queue.sender is None or queue.sender.done():
            queue.sender = self._spawn(self._sending(queue))

    async def _sending(self, queue: _Queue) -> None:
        while (news := queue.news) is not None:
            queue.news = None
            # a release after the announcement of its request (it was cancelled at once): else the
            # quota workflow would queue, and later grant, a request nobody waits for
            before = [queue.urgent[r.lease_id] for r in news.releases if r.lease_id in queue.urgent]
            await asyncio.gather(*before, return_exceptions=True)
            await self._signal(queue.endpoint, news)

    async def _signal(self, endpoint: Endpoint, news: News) -> None:
        """Signal the quota workflow, tried again while the server is busy, for up to SIGNAL_TRIES."""
        handle = self.client.get_workflow_handle(quota_workflow_id(endpoint.id))
        deadline, backoff = asyncio.get_running_loop().time() + SIGNAL_TRIES, 0.2
        while True:
            try:
                await handle.signal(QuotaWorkflow.news, news)
                return
            except RPCError as exc:  # "workflow is busy", a deadline, the quota workflow moving
                if exc.status == RPCStatusCode.NOT_FOUND or asyncio.get_running_loop().time() > deadline:
                    log.warning("quota workflow %s: news not sent: %s", endpoint.label, exc)
                    return
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
