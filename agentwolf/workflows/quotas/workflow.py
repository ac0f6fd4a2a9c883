"""The quota workflow: one provider endpoint's budgets (requests, input and output tokens per window,
concurrent requests), shared by every worker of a task queue, as a long-lived workflow.

Workflow id `wolf-limiter/<endpoint>` (a digest of base URL, API key, model and task queue: never the
key), on the task queue of the workers that use the endpoint.
Each worker process keeps one `poll` update in flight per endpoint, carrying every request of that
worker that waits for a lease; the update answers as soon as one of them is granted (with every
grant ready for that worker), else within POLL. A request that starts waiting while a poll is in
flight is announced by signal, so it need not wait for the next poll. Temporal bounds the updates in
flight per workflow (`history.maxInFlightUpdates`, 10 by default): one per worker, not one per
request, keeps a fleet of workers within it. A lease goes back by signal, carrying the real usage
(reserve, then reconcile). Workers send what they have to say (requests that started waiting, a
429's cooldown, leases given back) as one `news` signal at a time per endpoint (before: `enqueue`,
`cooldown` and `release`, a signal each, which a busy server took seconds each to record). A lease
counts in the window from its grant until a window after its release (paced runs: after its end as
the worker saw it), so the provider, which saw the request somewhere in between, never counts more
than the quota workflow did. A lease never released (its worker was SIGKILLed) ends at its TTL; a worker
that stops polling loses its waiting requests after STALE. A 429's cooldown holds every grant back
until it passes.

Waiters are served by priority (Temporal priority key: interactive 1, jobs 2, background 3), then by
tenant share (start-time fair queuing: each grant advances the tenant's virtual time by its cost
over its weight, and the waiter with the smallest start goes next), then in arrival order (`since`).

Paced (runs since the `limiter-paced` patch): while requests keep waiting, grants are spread at the
budget's rate (each one its cost's share of the window after the one before, a continuously
refilling bucket) instead of going out in a batch whenever the window frees room, so the window
frees room one request at a time and a request of higher priority arriving meanwhile gets the next
slot, at most one interval away. An endpoint nobody waits for grants as much as its window holds
at once. A tenant's virtual time starts at the system's when it starts waiting (no share is kept
for a tenant with nothing waiting), and the system's is the smallest of the waiting tenants', so a
grant that priority moves ahead takes nothing from the others' place.

Reserving (runs since the `limiter-reserve` patch): jobs and background work are never granted the
last `limits.reserve` of a budget (15 %) while people use the endpoint (an interactive request
asked within the last window, or the quota workflow started within it), and interactive requests are not
paced: one that arrives while jobs saturate the endpoint finds room at once, however full of job
leases the window is. A window without interactive requests lets jobs use the reserve too.

Held (runs since the `limiter-leases` patch): a worker names the leases it still holds in a `news`
signal every quarter of `lease_ttl`, and each naming moves the lease's end on to a TTL from then, so
a request that runs longer than the TTL (a model request may run `MODEL_TIMEOUT`, 10 minutes) keeps
counting, in flight and in the window, while a dead worker's lease still ends a TTL after its last
word. A release for a lease the quota workflow no longer holds counts its real usage as an ended lease, and
a release never ends a lease before its grant (a worker's clock behind the quota workflow's).

Probing (runs since the `limiter-probe` patch): while an endpoint's limits are unknown (no number
configured or learnt, no answer of the provider seen), its first request goes alone, for up to
PROBE_WAIT; what the provider's answer says about its limits (workers read the rate-limit headers of
every response, not only of a 429, and tell a stream's as it opens) then applies. A window the
provider states applies when the entry sets no number.

The quota workflow continues as new when its history grows, carrying its ledger and its queue.
Deterministic code only.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentwolf.config.quotas import DEFAULT_PRIORITY, INTERACTIVE

from agentwolf.workflows.quotas.ledger import Ledger
from agentwolf.workflows.quotas.messages import (
    BURST,
    CATCH_UP,
    IDLE_END,
    LEASES,
    PACED,
    POLL,
    PROBE,
    QUOTA_WORKFLOW,
    RESERVE,
    SKEW,
    STALE,
    TIGHT,
    TIGHT_SKEW,
    WAITS_KEPT,
    Ask,
    Cooldown,
    Grant,
    Learned,
    Lease,
    News,
    Poll,
    Polled,
    QuotaState,
    QuotaStatus,
    Release,
    Waiting,
)


@dataclass
class _Poll:
    worker: str
    deadline: datetime
    answer: Polled | None = None


@workflow.defn(name=QUOTA_WORKFLOW)
class QuotaWorkflow:
    @workflow.init
    def __init__(self, state: QuotaState) -> None:
        self.state = state
        self.polls: dict[str, _Poll] = {}
        self.changed = False
        self.moving = False
        self.paced = workflow.patched(PACED)
        self.burst = BURST if self.paced and workflow.patched(CATCH_UP) else 0.25
        self.reserving = self.paced and workflow.patched(RESERVE)
        self.skew = TIGHT_SKEW if self.paced and workflow.patched(TIGHT) else SKEW
        self.leasing = self.paced and workflow.patched(LEASES)
        self.probing = self.paced and workflow.patched(PROBE)
        self.ledger = Ledger(state, self.paced, self.reserving, self.probing)

    @workflow.run
    async def run(self, state: QuotaState) -> None:
        self.state.last_active = self.state.last_active or workflow.now()
        if self.reserving and self.state.interactive_at is None:  # people may come: hold the reserve
            self.state.interactive_at = workflow.now()
        while True:
            now = workflow.now()
            self._serve(now)
            if self._should_move():
                self.moving = True
                for poll in list(self.polls.values()):
                    self._answer(poll, Polled(grants=[], moving=True))
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self.state)
            if self._idle(now) and workflow.all_handlers_finished():
                return
            wake = self._next_wake(now)
            self.changed = False
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self.changed, timeout=wake)

    @workflow.update
    async def poll(self, poll: Poll) -> Polled:
        """The worker's grants as soon as one is ready, at once when none of its requests waits, else
        within POLL with why they wait."""
        if self.moving:
            return Polled(grants=[], moving=True)
        if (old := self.polls.get(poll.worker)) is not None:
            self._answer(old, Polled(grants=[]))
        self._enqueue(poll.worker, poll.asks)
        if self.paced and poll.ungranted:
            self._redeliver(poll)
        mine = _Poll(poll.worker, workflow.now() + POLL)
        self.polls[poll.worker] = mine
        self.changed = True
        await workflow.wait_condition(lambda: mine.answer is not None)
        assert mine.answer is not None
        return mine.answer

    def _redeliver(self, poll: Poll) -> None:
        """Grants the worker still asks for: an answer it never got (its call timed out on a busy
        server) must not strand the request and hold the budget until the lease's TTL."""
        s = self.state
        asked = {a.lease_id for a in poll.asks}
        ready = {g.lease_id for g in s.ready}
        for lease in s.leases:
            if lease.lease_id in asked and lease.ended_at is None and lease.lease_id not in ready:
                s.ready.append(Grant(lease_id=lease.lease_id, granted=True, expires_at=lease.expires_at))

    @workflow.signal
    def enqueue(self, poll: Poll) -> None:
        """Requests that started waiting while their worker's poll was in flight."""
        self._enqueue(poll.worker, poll.asks)
        self.changed = True

    def _enqueue(self, worker: str, asks: list[Ask]) -> None:
        s = self.state
        s.seen[worker] = workflow.now()
        held = {a.lease_id for a in s.queue} | {g.lease_id for g in s.ready} | {x.lease_id for x in s.leases}
        for ask in asks:
            if ask.lease_id not in held:
                if self.paced and all(a.tenant != ask.tenant for a in s.queue):  # the tenant joins
                    s.virtual[ask.tenant] = max(s.virtual.get(ask.tenant, s.clock), s.clock)
                s.queue.append(ask.model_copy(update={"worker": worker}))
                s.limits = ask.limits  # the latest asker's configuration applies
            if self.reserving and ask.priority <= INTERACTIVE:
                s.interactive_at = workflow.now()
        if asks:
            s.last_active = workflow.now()

    @workflow.signal
    def release(self, release: Release) -> None:
        """A lease's request is done (or was never sent): reconcile its tokens with the real usage."""
        s = self.state
        s.queue = [a for a in s.queue if a.lease_id != release.lease_id]  # cancelled while it waited
        s.ready = [g for g in s.ready if g.lease_id != release.lease_id]
        held = [lease for lease in s.leases if lease.lease_id == release.lease_id]
        if self.leasing and not held and release.sent:  # it left the ledger while its request ran
            at = min(workflow.now(), release.ended_at or workflow.now())
            late = Lease(
                lease_id=release.lease_id,
                session="",
                tenant="",
                priority=DEFAULT_PRIORITY,
                granted_at=at,
                expires_at=at,
            )
            s.leases.append(late)
            held = [late]
        for lease in held:
            if lease.ended_at is None:
                reserved = self.ledger.share(lease)
                lease.ended_at = self._ended(lease, release)
                lease.sent = release.sent
                lease.input_tokens = release.input_tokens if release.sent else 0
                lease.output_tokens = release.output_tokens if release.sent else 0
                if self.paced and s.paced_at is not None:  # the pace follows the real use too
                    s.paced_at -= max(0.0, reserved - self.ledger.share(lease)) * self.ledger.window()
        if self.probing:
            if release.sent:
                self._learn(release.learned or Learned())
        elif release.learned is not None:
            s.learned = release.learned
        self.changed = True

    def _learn(self, learned: Learned) -> None:
        """Probing runs: an answer came back, saying `learned` of the provider's limits."""
        self.state.answered = True
        self.state.learned = self.state.learned.merged(learned)

    def _ended(self, lease: Lease, release: Release) -> datetime:
        """When the lease's request ended: as its worker saw it (and SKEW), never after the release
        reached the quota workflow, nor (leasing runs) before its grant."""
        now = workflow.now()
        if not self.paced or release.ended_at is None:
            return now
        ended = min(now, release.ended_at + self.skew)
        if not self.leasing:
            return ended
        if release.ended_at < lease.granted_at - self.skew or release.ended_at > now + self.skew:
            workflow.logger.warning(
                "quota workflow %s: worker %s's clock is off: its request ended at %s, granted at %s, now %s",
                self.state.label,
                lease.worker,
                release.ended_at,
                lease.granted_at,
                now,
            )
        return max(lease.granted_at, ended)

    def _renew(self, held: list[str]) -> None:
        """Leases whose requests still run live on a TTL from now."""
        s = self.state
        names = set(held)
        until = workflow.now() + s.limits.lease_ttl
        for lease in s.leases:
            if lease.lease_id in names and lease.ended_at is None:
                lease.expires_at = max(lease.expires_at, until)

    @workflow.signal
    def news(self, news: News) -> None:
        """A worker's requests, cooldown and releases in one signal: a busy server takes a signal per
        request and per release minutes late, and a workflow task completes behind them."""
        self._enqueue(news.worker, news.asks)
        if self.leasing:
            self._renew(news.held)
        if self.probing and news.learned is not None:
            self._learn(news.learned)
        if news.cooldown is not None:
            self.cooldown(news.cooldown)
        for release in news.releases:
            self.release(release)
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
    def status(self) -> QuotaStatus:
        now = workflow.now()
        s = self.state
        rpm, itpm, otpm = self.ledger.limits()
        cooling = s.cooldown_until if s.cooldown_until and s.cooldown_until > now else None
        return QuotaStatus(
            endpoint=s.endpoint,
            label=s.label,
            rpm=rpm,
            input_tpm=itpm,
            output_tpm=otpm,
            concurrency=s.limits.concurrency,
            window_s=self.ledger.window().total_seconds(),
            use=self.ledger.use(now),
            cooldown_until=cooling,
            cooldown_reason=s.cooldown_reason if cooling else "",
            waiting=[
                Waiting(session=a.session, tenant=a.tenant, priority=a.priority, since=a.since)
                for a in self.ledger.queue()
            ],
            requests=s.requests,
            cooldowns=s.cooldowns,
            wait_p95={p: sorted(w)[int(0.95 * (len(w) - 1))] for p, w in s.waits.items() if w},
        )

    def _serve(self, now: datetime) -> None:
        """Drop leases out of the window and gone workers' requests, grant in queue order while the
        head fits, answer the polls that have grants or reached their deadline."""
        s = self.state
        s.leases = [lease for lease in s.leases if lease.end() + self.ledger.window() > now]
        gone = {w for w, seen in s.seen.items() if seen + STALE <= now and w not in self.polls}
        if gone:
            s.queue = [a for a in s.queue if a.worker not in gone]
            lost = {g.lease_id for g in s.ready if self._worker_of(g) in gone}
            s.ready = [g for g in s.ready if g.lease_id not in lost]
            if self.paced:  # never delivered, so never sent: no budget held (asked again, granted again)
                s.leases = [lease for lease in s.leases if lease.lease_id not in lost]
            s.seen = {w: t for w, t in s.seen.items() if w not in gone}
        while (queue := self.ledger.queue()) and not self.ledger.refusal(queue[0], now):
            ask = queue[0]
            start = self.ledger.start(ask.tenant)
            s.virtual[ask.tenant] = start + self.ledger.cost(ask) / max(ask.weight, 1e-6)
            s.queue.remove(ask)
            if self.paced:
                behind = [s.virtual.get(a.tenant, s.clock) for a in s.queue]
                s.clock = max(s.clock, min([start, *behind]))
                # the next grant while others wait: an interval on, from this one's slot (grants
                # late by up to `burst` intervals keep the rate: a loaded server runs this workflow's
                # tasks seconds late) or, after a longer wait, from now (no larger burst)
                interval = self.ledger.share(ask) * self.ledger.window()
                s.paced_at = max(s.paced_at or now, now - interval * self.burst) + interval
            else:
                s.clock = start
            lease = Lease(
                lease_id=ask.lease_id,
                worker=ask.worker,
                session=ask.session,
                tenant=ask.tenant,
                priority=ask.priority,
                granted_at=now,
                expires_at=now + s.limits.lease_ttl,
                input_tokens=ask.input_tokens,
                output_tokens=ask.output_tokens,
            )
            s.leases.append(lease)
            s.ready.append(Grant(lease_id=ask.lease_id, granted=True, expires_at=lease.expires_at))
            waits = s.waits.setdefault(ask.priority, [])
            waits[:] = [*waits[-(WAITS_KEPT - 1) :], max(0.0, (now - ask.since).total_seconds())]
            s.requests += 1
        if s.queue:
            s.last_active = now
        s.contended = bool(s.queue)
        for poll in list(self.polls.values()):
            ready = [g for g in s.ready if self._worker_of(g) == poll.worker]
            waiting = any(a.worker == poll.worker for a in s.queue)
            if ready or not waiting or poll.deadline <= now:  # nothing to wait for: answer at once
                s.ready = [g for g in s.ready if self._worker_of(g) != poll.worker]
                self._answer(poll, Polled(grants=ready + self._reasons(poll.worker, now)))

    def _worker_of(self, grant: Grant) -> str:
        return next((lease.worker for lease in self.state.leases if lease.lease_id == grant.lease_id), "")

    def _reasons(self, worker: str, now: datetime) -> list[Grant]:
        """Why the worker's waiting requests wait, and until about when."""
        out = []
        for ask in self.state.queue:
            if ask.worker == worker:
                reason = self.ledger.refusal(ask, now) or "queued"
                resumes = self.state.cooldown_until if reason == "cooldown" else self.ledger.next_free(now)
                out.append(Grant(lease_id=ask.lease_id, granted=False, resumes_at=resumes, reason=reason))
        return out

    def _answer(self, poll: _Poll, polled: Polled) -> None:
        poll.answer = polled
        if self.polls.get(poll.worker) is poll:
            del self.polls[poll.worker]

    def _next_wake(self, now: datetime) -> timedelta:
        """How long until something changes by itself: room freed, a cooldown's end, a deadline."""
        times = [p.deadline for p in self.polls.values()]
        times += [seen + STALE for seen in self.state.seen.values()]
        if self.state.queue:
            times.append(self.ledger.next_free(now))
        times = [t for t in times if t > now]
        if not times:
            return IDLE_END if not self.state.leases else self.ledger.window() + self.state.limits.lease_ttl
        return max(min(times) - now, timedelta(milliseconds=10))

    def _idle(self, now: datetime) -> bool:
        s = self.state
        quiet = not s.queue and not s.leases and not s.ready and not self.polls
        return quiet and (s.last_active is None or s.last_active + IDLE_END <= now)

    def _should_move(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self.state.history_events
        )
