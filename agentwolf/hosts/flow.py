"""Provider flow control on the worker: every request to a limited endpoint takes a lease from the
endpoint's limiter workflow (agentwolf/workflows/limiter.py) first, so every worker of the namespace
draws from one budget, and a 429 stops them all until its `Retry-After` has passed.

`Flow.wrap` puts a `FlowModel` around every model with a provider (a `limits` entry of the policy
or the manifest says its numbers; with none, they are learnt); the provider SDK's own retries are
turned off for it (they would resend inside a cooldown the others keep). The rate-limit headers of
every response (OpenAI and Anthropic send them on success too) go back to the limiter with the
lease, read by a response hook on the SDK's HTTP client. While a request runs, its worker names its
lease to the limiter every quarter of `lease_ttl`, so a request longer than the TTL keeps it.
A request waits for its lease inside the activity, heartbeating, so waiting burns no retry attempt;
what it waits for is in the activity's heartbeat details (`LiveText.waiting`), which `wolf status`
and followers read. The wait fails the turn only after the policy's `rate_wait_max`.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Coroutine, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext
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

from agentwolf.config.limits import (
    DEFAULT_PRIORITY,
    INTERACTIVE,
    PRIORITY_MEMO,
    EndpointLimits,
    FlowPolicy,
    limits_for,
)
from agentwolf.workflows.limiter import (
    Ask,
    Cooldown,
    Grant,
    Learned,
    LimiterState,
    LimiterWorkflow,
    News,
    Poll,
    Polled,
    Release,
    limiter_id,
)

log = logging.getLogger(__name__)

RETRY_AFTER_DEFAULT = 1.0
"""Seconds of cooldown after a 429 that says nothing about when to come back."""
PRIORITIES_KEPT = 10_000
"""Sessions whose priority key a worker remembers (oldest out first)."""
SIGNAL_TRIES = 60.0
"""Seconds a signal to a limiter is tried again while the server is busy."""
ATTEMPT_MARGIN = timedelta(seconds=30)
"""A wait that would run past the attempt's start-to-close timeout less this ends the attempt with
`next_retry_delay` instead (a fresh attempt waits on)."""


@dataclass
class Endpoint:
    """One (base URL, API key, model): the unit a limiter budgets."""

    id: str
    label: str
    limits: EndpointLimits


@dataclass
class Wait:
    """What a model request waits for, for heartbeat details."""

    reason: str
    resumes_at: datetime | None


@dataclass
class Waits:
    """One model request's wait, if any (set by `FlowModel`, read by the heartbeat), and its
    session's priority when the request carried it (`bind` hands it to the request's model)."""

    now: Wait | None = None
    priority: int | None = None


HEARD: ContextVar[list[Mapping[str, str]] | None] = ContextVar("wolf_flow_heard", default=None)
"""The headers of the responses to the request `FlowModel` is sending (set around the call)."""


async def _heard(response: Any) -> None:
    """A response hook on the provider SDK's HTTP client (shared by several models, perhaps): the
    headers go to the request being sent in this task, if `FlowModel` sends it."""
    if (heard := HEARD.get()) is not None:
        heard.append(response.headers)


def _listen(client: Any) -> None:
    """Hook `_heard` on the SDK's HTTP client (OpenAI's and Anthropic's SDKs keep it as `_client`,
    an httpx client): the response to a successful request says the limits too."""
    hooks = getattr(getattr(client, "_client", None), "event_hooks", None)
    responses = hooks.get("response") if isinstance(hooks, dict) else None
    if isinstance(responses, list) and _heard not in responses:
        responses.append(_heard)


def endpoint_id(base_url: str, api_key: str, model: str, task_queue: str) -> str:
    """A digest of what a provider budgets by (the key only as its own digest, never itself), per
    task queue: an endpoint's limiter runs on the queue of the workers that use it, so one that no
    worker polls any more (workers moved to another queue) never holds their requests."""
    key = hashlib.sha256(api_key.encode()).hexdigest()
    return hashlib.sha256(f"{base_url}\0{key}\0{model}\0{task_queue}".encode()).hexdigest()[:24]


@dataclass
class _Waiting:
    """One request of this worker waiting for a lease."""

    ask: Ask
    grant: asyncio.Future[Grant]
    latest: Grant | None = None
    """The limiter's last word on why it waits."""


@dataclass
class _Queue:
    """This worker's requests waiting on one endpoint, and its poll."""

    endpoint: Endpoint
    waiting: dict[str, _Waiting] = field(default_factory=dict)
    poller: asyncio.Task[None] | None = None
    held: set[str] = field(default_factory=set)
    """Leases granted to this worker and not given back (a grant the limiter sends again is no news)."""
    news: News | None = None
    """What the next signal tells the limiter (gathered while the last one is in flight)."""
    sender: asyncio.Task[None] | None = None
    """The one signal in flight (several, each about one request, crowd a busy server)."""
    urgent: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Interactive requests announced on their own, past the signal in flight: lease -> its send."""
    renewer: asyncio.Task[None] | None = None
    """Names the `held` leases to the limiter while there are any."""
    told: bool = False
    """The headers of a stream as it opened went to the limiter (once: after, releases carry them)."""


@dataclass
class Flow:
    """One worker's access to the fleet's limiters."""

    client: Client
    task_queue: str
    policy: FlowPolicy
    cooldowns: dict[str, datetime] = field(default_factory=dict)
    """Endpoint -> the end of a cooldown this worker saw (a 429 here, or a limiter's answer)."""
    worker: str = field(default_factory=lambda: uuid.uuid4().hex)
    """This process, to the limiters (its polls collect its grants)."""
    _queues: dict[str, _Queue] = field(default_factory=dict)
    _priorities: dict[str, int] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    """Signals being sent (`close` waits for them)."""

    def wrap(self, model: Model, spec: str, manifest_limits: list[EndpointLimits], tenant: str) -> Model:
        """`model` under flow control, with the limits of the first `limits` entry matching `spec`
        (none: every number learnt from the provider); in-process models (`local:`) as they are."""
        if model.base_url is None:
            return model
        limits = limits_for(spec, self.policy.limits, manifest_limits)
        client = getattr(model, "client", None)
        if client is not None and hasattr(client, "max_retries"):
            client.max_retries = 0  # the SDK's hidden retries would resend during a shared cooldown
        _listen(client)
        base_url = model.base_url
        key = str(getattr(client, "api_key", "") or "")
        endpoint = Endpoint(
            endpoint_id(base_url, key, model.model_name, self.task_queue), f"{spec} @ {base_url}", limits
        )
        return FlowModel(model, self, endpoint, tenant)

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
                f"{wait.reason}); `flow.rate_wait_max` in the worker policy allows longer waits",
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
        state = LimiterState(endpoint=endpoint.id, label=endpoint.label, limits=endpoint.limits)
        backoff, running = 0.1, False
        while queue.waiting:
            # a granted request leaves `waiting` only when its task runs again: not in the next poll
            asks = [w.ask for w in queue.waiting.values() if not w.grant.done()]
            poll = Poll(worker=self.worker, asks=asks, ungranted=True)
            start = WithStartWorkflowOperation(  # one per request: the SDK refuses to reuse one
                LimiterWorkflow.run,
                state,
                id=limiter_id(endpoint.id),
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                # first in the queue: its tasks must not wait behind the sessions it paces
                priority=Priority(priority_key=1),
            )
            try:
                if running:  # a plain update: less work for the server than update-with-start
                    handle = self.client.get_workflow_handle(limiter_id(endpoint.id))
                    update = uuid.uuid4().hex
                    polled: Polled = await handle.execute_update(LimiterWorkflow.poll, poll, id=update)
                else:  # the first poll, or after an error (the limiter may have ended when idle)
                    polled = await self.client.execute_update_with_start_workflow(
                        LimiterWorkflow.poll, poll, start_workflow_operation=start, id=uuid.uuid4().hex
                    )
            except (RPCError, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError) as exc:
                # the server busy (too many updates in flight), or the limiter moving to a new run
                log.debug("limiter %s: %s; polling again", endpoint.label, exc)
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
        """While this worker holds leases on the endpoint, name them to the limiter every quarter of
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
        """A stream opened: the first on this endpoint tells the limiter at once what its headers say,
        so requests held back while its limits were unknown need not wait for the whole answer."""
        queue = self._queues.setdefault(endpoint.id, _Queue(endpoint))
        if not queue.told:
            queue.told = True
            said = learned(heard[-1]) if heard else None
            self._tell(queue, News(worker=self.worker, learned=said or Learned()), urgent=True)

    def rate_limited(self, endpoint: Endpoint, exc: ModelHTTPError, release: Release) -> None:
        """A 429: stop this worker at once, and every other through the limiter; the cooldown reaches
        the limiter with the lease coming back (no grant in between)."""
        wait = exc.retry_after if exc.retry_after is not None else _reset_seconds(exc.headers or {})
        until = datetime.now(UTC) + timedelta(seconds=wait if wait is not None else RETRY_AFTER_DEFAULT)
        self.cooldowns[endpoint.id] = max(until, self.cooldowns.get(endpoint.id, until))
        cooldown = Cooldown(until=until, reason=f"429 from {endpoint.label}")
        news = News(worker=self.worker, cooldown=cooldown, releases=[release])
        self._tell(self._queues.setdefault(endpoint.id, _Queue(endpoint)), news, urgent=True)

    def _tell(self, queue: _Queue, news: News, urgent: bool = False) -> None:
        """Add `news` to what the next signal to the limiter says and send it in the background: one
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
            # limiter would queue, and later grant, a request nobody waits for
            before = [queue.urgent[r.lease_id] for r in news.releases if r.lease_id in queue.urgent]
            await asyncio.gather(*before, return_exceptions=True)
            await self._signal(queue.endpoint, news)

    async def _signal(self, endpoint: Endpoint, news: News) -> None:
        """Signal the limiter, tried again while the server is busy, for up to SIGNAL_TRIES."""
        handle = self.client.get_workflow_handle(limiter_id(endpoint.id))
        deadline, backoff = asyncio.get_running_loop().time() + SIGNAL_TRIES, 0.2
        while True:
            try:
                await handle.signal(LimiterWorkflow.news, news)
                return
            except RPCError as exc:  # "workflow is busy", a deadline, the limiter moving
                if exc.status == RPCStatusCode.NOT_FOUND or asyncio.get_running_loop().time() > deadline:
                    log.warning("limiter %s: news not sent: %s", endpoint.label, exc)
                    return
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _reset_seconds(headers: Mapping[str, str]) -> float | None:
    """`x-ratelimit-reset-requests` / `-tokens` (`1s`, `6m0s`, `250ms`): the longest."""
    found = [
        _duration(headers[k])
        for k in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
        if k in headers
    ]
    values = [v for v in found if v is not None]
    return max(values) if values else None


def _duration(text: str) -> float | None:
    total, number = 0.0, ""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in units or not number:
            return None
        total += float(number) * units[unit]
        number = ""
        i += len(unit)
    if number:
        total += float(number)
    return total


def learned(headers: Mapping[str, str]) -> Learned | None:
    """Limits from `x-ratelimit-limit-*` headers (OpenAI's tokens limit counts input; `-1` and other
    nonsense, as Azure sends, is ignored), and the window from `RateLimit-Policy` (the IETF draft's
    `20;w=60` or `"default";q=20;w=60`: its first policy) when a provider states one."""

    def number(name: str) -> int | None:
        try:
            value = int(headers.get(name, ""))
        except ValueError:
            return None
        return value if value > 0 else None

    found = Learned(
        rpm=number("x-ratelimit-limit-requests") or number("anthropic-ratelimit-requests-limit"),
        input_tpm=number("x-ratelimit-limit-tokens") or number("anthropic-ratelimit-input-tokens-limit"),
        output_tpm=number("anthropic-ratelimit-output-tokens-limit"),
        window=_policy_window(headers.get("ratelimit-policy", "")),
    )
    return found if found != Learned() else None


def _policy_window(policy: str) -> timedelta | None:
    for param in policy.split(",")[0].split(";")[1:]:
        name, _, seconds = param.strip().partition("=")
        if name == "w" and seconds.isdigit() and int(seconds) > 0:
            return timedelta(seconds=int(seconds))
    return None


def _estimate(messages: list[ModelMessage], parameters: ModelRequestParameters) -> int:
    """Input tokens, about: a token per four bytes of the request's JSON (reconciled afterwards)."""
    size = len(ModelMessagesTypeAdapter.dump_json(messages))
    size += sum(
        len(str(t.parameters_json_schema)) + len(t.description or "") for t in parameters.tool_defs.values()
    )
    return size // 4 + 1


class FlowModel(WrapperModel):
    """A model whose requests take a lease from their endpoint's limiter first."""

    def __init__(
        self, wrapped: Model, flow: Flow, endpoint: Endpoint, tenant: str, waits: Waits | None = None
    ) -> None:
        super().__init__(wrapped)
        self.flow = flow
        self.endpoint = endpoint
        self.tenant = tenant
        self.waits = waits
        """The request's own (`bind`); None on the host's shared model."""

    async def _ask(
        self,
        messages: list[ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
        since: datetime,
        lease_id: str,
    ) -> Ask:
        info = activity.info() if activity.in_activity() else None
        carried = self.waits.priority if self.waits is not None else None
        priority = await self.flow.priority(info, carried) if info else carried or DEFAULT_PRIORITY
        max_tokens = (settings or {}).get("max_tokens")
        return Ask(
            lease_id=lease_id,
            session=info.workflow_id or "" if info else "",
            tenant=self.tenant,
            weight=self.flow.policy.weight(self.tenant),
            priority=priority,
            input_tokens=_estimate(messages, params),
            output_tokens=max_tokens or self.endpoint.limits.output_reserve,
            since=since,
            limits=self.endpoint.limits,
        )

    async def _lease(
        self,
        messages: list[ModelMessage],
        settings: ModelSettings | None,
        params: ModelRequestParameters,
        since: datetime,
    ) -> Ask:
        ask = await self._ask(messages, settings, params, since, uuid.uuid4().hex)
        try:
            await self.flow.acquire(self.endpoint, ask, self.waits)
        except BaseException:
            self.flow.release(self.endpoint, Release(lease_id=ask.lease_id, sent=False))
            raise
        return ask

    def _done(self, ask: Ask, response: ModelResponse | None, heard: list[Mapping[str, str]]) -> None:
        usage = response.usage if response is not None else None
        self.flow.release(
            self.endpoint,
            Release(
                lease_id=ask.lease_id,
                ended_at=datetime.now(UTC),
                input_tokens=(usage.input_tokens if usage else 0) or ask.input_tokens,
                output_tokens=(usage.output_tokens if usage else 0)
                or (0 if response is None else ask.output_tokens),
                learned=learned(heard[-1]) if heard else None,
            ),
        )

    def _refused(self, ask: Ask, exc: ModelHTTPError) -> None:
        """A 429: the cooldown for everyone, the lease back (the request reached the provider)."""
        learnt = learned(exc.headers or {})
        release = Release(
            lease_id=ask.lease_id, input_tokens=ask.input_tokens, learned=learnt, ended_at=datetime.now(UTC)
        )
        self.flow.rate_limited(self.endpoint, exc, release)

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        since = datetime.now(UTC)
        while True:
            ask = await self._lease(messages, model_settings, model_request_parameters, since)
            heard: list[Mapping[str, str]] = []
            listening = HEARD.set(heard)
            try:
                response = await self.wrapped.request(messages, model_settings, model_request_parameters)
            except ModelHTTPError as exc:
                if exc.status_code == 429:
                    self._refused(ask, exc)
                    continue
                self._done(ask, None, heard)
                raise
            except BaseException:
                self._done(ask, None, heard)
                raise
            finally:
                HEARD.reset(listening)
            self._done(ask, response, heard)
            return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        since = datetime.now(UTC)
        while True:
            ask = await self._lease(messages, model_settings, model_request_parameters, since)
            stack = AsyncExitStack()
            heard: list[Mapping[str, str]] = []
            listening = HEARD.set(heard)  # the response's headers come as the stream opens
            try:
                stream = await stack.enter_async_context(
                    self.wrapped.request_stream(
                        messages, model_settings, model_request_parameters, run_context
                    )
                )
            except ModelHTTPError as exc:
                await stack.aclose()
                if exc.status_code == 429:
                    self._refused(ask, exc)
                    continue
                self._done(ask, None, heard)
                raise
            except BaseException:
                await stack.aclose()
                self._done(ask, None, heard)
                raise
            finally:
                HEARD.reset(listening)
            self.flow.opened(self.endpoint, heard)
            break
        try:
            async with stack:
                yield stream
        except ModelHTTPError as exc:
            if exc.status_code == 429:  # refused mid-stream: cool down; the activity's retry sends again
                self._refused(ask, exc)
            else:
                self._done(ask, None, heard)
            raise
        except BaseException:
            self._done(ask, None, heard)
            raise
        self._done(ask, stream.get(), heard)


def bind(model: Model, waits: Waits) -> Model:
    """`model` for one request: its flow-controlled members ask with the priority in `waits` and note
    their waits there. Shallow copies: the host's model is shared by concurrent requests."""
    if isinstance(model, FlowModel):
        bound = copy.copy(model)
        bound.waits = waits
        return bound
    if isinstance(model, FallbackModel):
        chain = copy.copy(model)
        chain.models = [bind(member, waits) for member in model.models]
        return chain
    return model
