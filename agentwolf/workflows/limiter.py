"""Limiter: one provider endpoint's budgets (requests, input and output tokens per window,
concurrent requests), shared by every worker of the namespace, as a long-lived workflow.

Workflow id `wolf-limiter/<endpoint>` (a digest of base URL, API key and model: never the key).
Workers take a lease through the `acquire` update before each model request and give it back with
the `release` signal, carrying the real usage (reserve, then reconcile). A lease counts in the
window from its grant until a window after its release, so the provider, which saw the request
somewhere in between, never counts more than the limiter did. A lease never released (its worker
was SIGKILLed) ends at its TTL. A 429 posts a `cooldown` that holds every grant back until it
passes.

Waiters are served by priority (Temporal priority key: interactive 1, jobs 2, background 3), then by
tenant share (start-time fair queuing: each grant advances the tenant's virtual time by its cost
over its weight, and the waiter with the smallest start goes next), then in arrival order. An
`acquire` answers within POLL, granted or not, and the worker asks again keeping its place (its
`since`); the limiter holds no caller for long and continues as new when its history grows.
Deterministic code only.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentwolf.config.limits import EndpointLimits

LIMITER_WORKFLOW = "Limiter"
POLL = timedelta(seconds=10)
"""An `acquire` not granted by then answers `granted=False`; the worker asks again."""
IDLE_END = timedelta(hours=1)
"""A limiter with no lease in its window and no waiter for this long ends (the next acquire starts it
again, with what the workers configure)."""


def limiter_id(endpoint: str) -> str:
    return f"wolf-limiter/{endpoint}"


class Learned(BaseModel):
    """Limits a provider's `x-ratelimit-limit-*` headers reported (they fill unset ones)."""

    rpm: int | None = None
    input_tpm: int | None = None
    output_tpm: int | None = None


class Ask(BaseModel):
    lease_id: str
    session: str
    """The asking session's workflow id (shown by `wolf limits` while it waits)."""
    tenant: str
    weight: float = 1.0
    priority: int = 2
    input_tokens: int = 0
    output_tokens: int = 0
    since: datetime
    """When this request first asked: its place in the queue across re-asks."""
    limits: EndpointLimits
    """The asking worker's configured limits (the latest asker's apply)."""


class Grant(BaseModel):
    lease_id: str
    granted: bool
    expires_at: datetime | None = None
    resumes_at: datetime | None = None
    """Not granted: the earliest time it could be (an estimate past a cooldown or a window)."""
    reason: str = ""
    """Not granted: `cooldown`, `rpm`, `input_tpm`, `output_tpm`, `concurrency`, `queued`, `moving`."""


class Release(BaseModel):
    lease_id: str
    sent: bool = True
    """False: no request reached the provider (cancelled before it was sent)."""
    input_tokens: int = 0
    output_tokens: int = 0
    learned: Learned | None = None


class Cooldown(BaseModel):
    until: datetime
    reason: str = ""


class Lease(BaseModel):
    lease_id: str
    session: str
    tenant: str
    priority: int
    granted_at: datetime
    expires_at: datetime
    ended_at: datetime | None = None
    sent: bool = True
    input_tokens: int = 0
    output_tokens: int = 0

    def end(self) -> datetime:
        return self.ended_at or self.expires_at


class LimiterState(BaseModel):
    """The limiter's input and its continue-as-new snapshot."""

    endpoint: str
    label: str
    """Provider, base URL and model, for `wolf limits` (never the key)."""
    limits: EndpointLimits
    learned: Learned = Learned()
    leases: list[Lease] = []
    cooldown_until: datetime | None = None
    cooldown_reason: str = ""
    virtual: dict[str, float] = {}
    """Tenant -> virtual finish time of its last grant (fair queuing)."""
    clock: float = 0.0
    """The start tag of the last grant (the system's virtual time)."""
    requests: int = 0
    cooldowns: int = 0
    last_active: datetime | None = None
    history_events: int = 5000
    """Continue as new past this many events (or when Temporal suggests it)."""


class Usage(BaseModel):
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    active: int = 0


class Waiting(BaseModel):
    session: str
    tenant: str
    priority: int
    since: datetime


class LimiterStatus(BaseModel):
    """What `wolf limits` shows of one endpoint."""

    endpoint: str
    label: str
    rpm: int | None
    input_tpm: int | None
    output_tpm: int | None
    concurrency: int | None
    window_s: float
    use: Usage
    cooldown_until: datetime | None
    cooldown_reason: str
    waiting: list[Waiting]
    requests: int
    cooldowns: int


@dataclass
class _Waiter:
    ask: Ask
    deadline: datetime
    grant: Grant | None = None


@workflow.defn(name=LIMITER_WORKFLOW)
class LimiterWorkflow:
    @workflow.init
    def __init__(self, state: LimiterState) -> None:
        self.state = state
        self.waiters: dict[str, _Waiter] = {}
        self.changed = False
        self.moving = False

    @workflow.run
    async def run(self, state: LimiterState) -> None:
        self.state.last_active = self.state.last_active or workflow.now()
        while True:
            now = workflow.now()
            self._serve(now)
            if self._should_move():
                self.moving = True
                for waiter in list(self.waiters.values()):
                    self._answer(waiter, Grant(lease_id=waiter.ask.lease_id, granted=False, reason="moving"))
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self.state)
            if self._idle(now) and workflow.all_handlers_finished():
                return
            wake = self._next_wake(now)
            self.changed = False
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self.changed, timeout=wake)

    @workflow.update
    async def acquire(self, ask: Ask) -> Grant:
        """A lease for one request, or `granted=False` within POLL (ask again with the same `since`)."""
        known = next((lease for lease in self.state.leases if lease.lease_id == ask.lease_id), None)
        if known is not None:  # the grant's answer was lost: the same lease again
            return Grant(lease_id=ask.lease_id, granted=True, expires_at=known.expires_at)
        if self.moving:
            return Grant(lease_id=ask.lease_id, granted=False, reason="moving")
        if (old := self.waiters.get(ask.lease_id)) is not None:
            self._answer(old, Grant(lease_id=ask.lease_id, granted=False, reason="queued"))
        self.state.limits = ask.limits
        waiter = _Waiter(ask, workflow.now() + POLL)
        self.waiters[ask.lease_id] = waiter
        self.changed = True
        await workflow.wait_condition(lambda: waiter.grant is not None)
        assert waiter.grant is not None
        return waiter.grant

    @workflow.signal
    def release(self, release: Release) -> None:
        """A lease's request is done (or was never sent): reconcile its tokens with the real usage."""
        if (waiter := self.waiters.get(release.lease_id)) is not None:  # cancelled while it waited
            self._answer(waiter, Grant(lease_id=release.lease_id, granted=False, reason="released"))
        for lease in self.state.leases:
            if lease.lease_id == release.lease_id and lease.ended_at is None:
                lease.ended_at = workflow.now()
                lease.sent = release.sent
                lease.input_tokens = release.input_tokens if release.sent else 0
                lease.output_tokens = release.output_tokens if release.sent else 0
        if release.learned is not None:
            self.state.learned = release.learned
        self.changed = True

    @workflow.signal
    def cooldown(self, cooldown: Cooldown) -> None:
        """The provider refused a request (429): no grant until `until`."""
        if self.state.cooldown_until is None or cooldown.until > self.state.cooldown_until:
            self.state.cooldown_until = cooldown.until
            self.state.cooldown_reason = cooldown.reason
        self.state.cooldowns += 1
        self.changed = True

    @workflow.query
    def status(self) -> LimiterStatus:
        now = workflow.now()
        s = self.state
        rpm, itpm, otpm = self._limits()
        cooling = s.cooldown_until if s.cooldown_until and s.cooldown_until > now else None
        return LimiterStatus(
            endpoint=s.endpoint,
            label=s.label,
            rpm=rpm,
            input_tpm=itpm,
            output_tpm=otpm,
            concurrency=s.limits.concurrency,
            window_s=s.limits.window.total_seconds(),
            use=self._use(now),
            cooldown_until=cooling,
            cooldown_reason=s.cooldown_reason if cooling else "",
            waiting=[
                Waiting(
                    session=w.ask.session, tenant=w.ask.tenant, priority=w.ask.priority, since=w.ask.since
                )
                for w in self._queue()
            ],
            requests=s.requests,
            cooldowns=s.cooldowns,
        )

    # -- the ledger --------------------------------------------------------------------------------

    def _limits(self) -> tuple[int | None, int | None, int | None]:
        """Configured limits, else learnt ones."""
        limits, learned = self.state.limits, self.state.learned
        return (
            limits.rpm or learned.rpm,
            limits.input_tpm or learned.input_tpm,
            limits.output_tpm or learned.output_tpm,
        )

    def _use(self, now: datetime) -> Usage:
        window = self.state.limits.window
        use = Usage()
        for lease in self.state.leases:
            if lease.end() + window <= now:
                continue
            if lease.ended_at is None and lease.expires_at > now:
                use.active += 1
            if lease.sent:
                use.requests += 1
                use.input_tokens += lease.input_tokens
                use.output_tokens += lease.output_tokens
        return use

    def _refusal(self, ask: Ask, now: datetime) -> str:
        """Why `ask` cannot be granted now ('' if it can). A request larger than a whole budget goes
        alone (into an empty window)."""
        s = self.state
        if s.cooldown_until is not None and s.cooldown_until > now:
            return "cooldown"
        rpm, itpm, otpm = self._limits()
        use = self._use(now)
        if rpm is not None and use.requests + 1 > rpm:
            return "rpm"
        if itpm is not None and use.input_tokens and use.input_tokens + ask.input_tokens > itpm:
            return "input_tpm"
        if otpm is not None and use.output_tokens and use.output_tokens + ask.output_tokens > otpm:
            return "output_tpm"
        if s.limits.concurrency is not None and use.active + 1 > s.limits.concurrency:
            return "concurrency"
        return ""

    def _queue(self) -> list[_Waiter]:
        """Waiters in the order they are served: priority, tenant's fair start, arrival."""
        waiting = [w for w in self.waiters.values() if w.grant is None]
        return sorted(
            waiting,
            key=lambda w: (
                w.ask.priority,
                max(self.state.clock, self.state.virtual.get(w.ask.tenant, 0.0)),
                w.ask.since,
                w.ask.lease_id,
            ),
        )

    def _cost(self, ask: Ask) -> float:
        """A grant's share of the binding budget (requests or input tokens)."""
        rpm, itpm, _ = self._limits()
        costs = [1 / rpm if rpm else 0.0, ask.input_tokens / itpm if itpm else 0.0]
        return max(costs) or 1.0

    def _serve(self, now: datetime) -> None:
        """Drop leases out of the window, grant in queue order while the head fits, answer waiters
        past their deadline."""
        s = self.state
        s.leases = [lease for lease in s.leases if lease.end() + s.limits.window > now]
        while (queue := self._queue()) and not self._refusal(queue[0].ask, now):
            waiter = queue[0]
            ask = waiter.ask
            start = max(s.clock, s.virtual.get(ask.tenant, 0.0))
            s.clock = start
            s.virtual[ask.tenant] = start + self._cost(ask) / max(ask.weight, 1e-6)
            lease = Lease(
                lease_id=ask.lease_id,
                session=ask.session,
                tenant=ask.tenant,
                priority=ask.priority,
                granted_at=now,
                expires_at=now + s.limits.lease_ttl,
                input_tokens=ask.input_tokens,
                output_tokens=ask.output_tokens,
            )
            s.leases.append(lease)
            s.requests += 1
            s.last_active = now
            self._answer(waiter, Grant(lease_id=ask.lease_id, granted=True, expires_at=lease.expires_at))
        for waiter in self._queue():
            if waiter.deadline <= now:
                reason = self._refusal(waiter.ask, now) or "queued"
                resumes = self._next_free(now) if reason != "cooldown" else s.cooldown_until
                self._answer(
                    waiter,
                    Grant(lease_id=waiter.ask.lease_id, granted=False, resumes_at=resumes, reason=reason),
                )
        if self.waiters:
            s.last_active = now

    def _answer(self, waiter: _Waiter, grant: Grant) -> None:
        waiter.grant = grant
        self.waiters.pop(waiter.ask.lease_id, None)

    def _next_free(self, now: datetime) -> datetime:
        """When the window next frees room: a lease leaving it, or one expiring."""
        s = self.state
        times = [lease.end() + s.limits.window for lease in s.leases]
        times += [lease.expires_at for lease in s.leases if lease.ended_at is None and lease.expires_at > now]
        if s.cooldown_until is not None and s.cooldown_until > now:
            times.append(s.cooldown_until)
        return min(times, default=now)

    def _next_wake(self, now: datetime) -> timedelta:
        """How long until something changes by itself: room freed, a cooldown's end, a deadline."""
        times = [w.deadline for w in self.waiters.values()]
        if self.waiters:
            times.append(self._next_free(now))
        times = [t for t in times if t > now]
        if not times:
            return (
                IDLE_END if not self.state.leases else self.state.limits.window + self.state.limits.lease_ttl
            )
        return max(min(times) - now, timedelta(milliseconds=10))

    def _idle(self, now: datetime) -> bool:
        s = self.state
        return (
            not self.waiters and not s.leases and (s.last_active is None or s.last_active + IDLE_END <= now)
        )

    def _should_move(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self.state.history_events
        )
