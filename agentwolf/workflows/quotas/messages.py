"""The quota workflow's vocabulary: its patches and bounds, and what workers and the workflow say
to each other (asks, grants, polls, news, releases) and what its status shows. Deterministic code only."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agentwolf.config.quotas import EndpointQuota

QUOTA_WORKFLOW = "Limiter"
PACED = "limiter-paced"
"""Patch: grants paced while requests wait; tenants' virtual times start at the system's on joining."""
CATCH_UP = "limiter-catch-up"
"""Patch: paced grants the quota workflow's workflow tasks made late are caught up, up to BURST intervals."""
RESERVE = "limiter-reserve"
"""Patch: jobs and background work leave `limits.reserve` of each budget to interactive requests,
which are not paced."""
LEASES = "limiter-leases"
"""Patch: workers renew the leases they hold (`News.held`); a release for a lease no longer held counts
as an ended lease; a release never ends a lease before its grant."""
PROBE = "limiter-probe"
"""Patch: while an endpoint's limits are unknown its first request goes alone; learnt limits merge
(a response naming some leaves the others); a window the provider states applies."""
PROBE_WAIT = timedelta(seconds=10)
"""Probing runs: how long the first request to an endpoint of unknown limits goes alone at most."""
BURST = 2.0
"""Intervals of paced grants a late workflow task may catch up (before the patch: a quarter)."""
POLL = timedelta(seconds=10)
"""A `poll` with nothing granted answers by then (with why its requests wait); the worker polls again."""
STALE = timedelta(seconds=30)
"""A worker that has not polled for this long is gone: its waiting requests leave the queue."""
WAITS_KEPT = 200
SKEW = timedelta(seconds=1)
"""How far a worker's clock may be behind the quota workflow's (`Release.ended_at`)."""
TIGHT = "limiter-tight-skew"
"""Patch: SKEW is TIGHT_SKEW: a second more per lease held 10 % of a 10 s window's budget unused (the
provider saw the request before the worker saw it end, so only clocks out of step need the margin)."""
TIGHT_SKEW = timedelta(milliseconds=250)
IDLE_END = timedelta(hours=1)
"""A quota workflow with no lease in its window and no waiter for this long ends (the next acquire starts it
again, with what the workers configure)."""


def quota_workflow_id(endpoint: str) -> str:
    return f"wolf-limiter/{endpoint}"


class Learned(BaseModel):
    """Limits a provider's `x-ratelimit-limit-*` headers reported (they fill unset ones)."""

    rpm: int | None = None
    input_tpm: int | None = None
    output_tpm: int | None = None
    window: timedelta | None = None
    """The window the provider states (`RateLimit-Policy: 20;w=60`); None: not said (60 s)."""

    def merged(self, newer: Learned) -> Learned:
        """What `newer` says, and for what it does not say, what was known."""
        return self.model_copy(update=newer.model_dump(exclude_none=True))


class Ask(BaseModel):
    lease_id: str
    worker: str = ""
    """The asking worker process (its polls collect the grant)."""
    session: str
    """The asking session's workflow id (shown by `wolf quotas` while it waits)."""
    tenant: str
    weight: float = 1.0
    priority: int = 2
    input_tokens: int = 0
    output_tokens: int = 0
    since: datetime
    """When this request first asked: its place in the queue across re-asks."""
    limits: EndpointQuota
    """The asking worker's configured limits (the latest asker's apply)."""


class Grant(BaseModel):
    lease_id: str
    granted: bool
    expires_at: datetime | None = None
    resumes_at: datetime | None = None
    """Not granted: the earliest time it could be (an estimate past a cooldown or a window)."""
    reason: str = ""
    """Not granted: `cooldown`, `rpm`, `input_tpm`, `output_tpm`, `concurrency`, `reserved` (what is
    left is kept for interactive requests), `probing` (the endpoint's limits are not known yet: its
    first request goes alone), `queued`."""


class Poll(BaseModel):
    worker: str
    asks: list[Ask]
    """Every request of the worker that waits (the quota workflow adds those it does not hold: a lost signal,
    a new run)."""
    ungranted: bool = False
    """`asks` holds only requests the worker has no grant for (workers since the `limiter-paced`
    patch): one the quota workflow granted is an answer the worker never got, sent again."""


class Polled(BaseModel):
    grants: list[Grant]
    """Granted leases ready for the worker, and for its other requests why they still wait."""
    moving: bool = False
    """The quota workflow continues as new: poll again at once."""


class Release(BaseModel):
    lease_id: str
    sent: bool = True
    """False: no request reached the provider (cancelled before it was sent)."""
    input_tokens: int = 0
    output_tokens: int = 0
    learned: Learned | None = None
    ended_at: datetime | None = None
    """When the worker saw the request end (its answer or its error), by its clock: the provider saw
    the request before. Paced runs count the lease until a window after this (and SKEW), not after
    the release reached the quota workflow, which on a busy fleet can be many seconds later."""


class Cooldown(BaseModel):
    until: datetime
    reason: str = ""


class News(BaseModel):
    """What one worker has to tell a quota workflow since its last signal, as one `news` signal (workers
    since batching; before, a signal each): requests that started waiting while its poll was in
    flight, a 429's cooldown, leases given back, applied in that order."""

    worker: str
    asks: list[Ask] = []
    cooldown: Cooldown | None = None
    releases: list[Release] = []
    held: list[str] = []
    """Leases the worker holds, their requests still running (workers since the `limiter-leases`
    patch): each lives on a TTL from now."""
    learned: Learned | None = None
    """What the headers of an answer said as it began (a stream opening; empty: nothing), before its
    request ends (workers since the `limiter-probe` patch): requests held back while the endpoint's
    limits were unknown need not wait for the whole answer."""


class Lease(BaseModel):
    lease_id: str
    worker: str = ""
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


class QuotaState(BaseModel):
    """The quota workflow's input and its continue-as-new snapshot."""

    endpoint: str
    label: str
    """Provider, base URL and model, for `wolf quotas` (never the key)."""
    limits: EndpointQuota
    learned: Learned = Learned()
    leases: list[Lease] = []
    cooldown_until: datetime | None = None
    cooldown_reason: str = ""
    virtual: dict[str, float] = {}
    """Tenant -> virtual finish time of its last grant (fair queuing)."""
    clock: float = 0.0
    """The system's virtual time: the start tag of the last grant (paced runs: never past a waiting
    tenant's virtual time)."""
    paced_at: datetime | None = None
    """Paced runs: the earliest time of the next grant while requests keep waiting."""
    contended: bool = False
    """Paced runs: requests still waited when the quota workflow last served its queue."""
    interactive_at: datetime | None = None
    """Reserving runs: when an interactive request last asked (at first, when the quota workflow started):
    the reserve is held until a window after."""
    requests: int = 0
    cooldowns: int = 0
    answered: bool = False
    """Probing runs: a request's answer came back, so what the provider says of its limits is known
    (nothing, when it sends no rate-limit headers)."""
    last_active: datetime | None = None
    queue: list[Ask] = []
    """Requests waiting for a lease."""
    ready: list[Grant] = []
    """Grants their worker has not collected yet."""
    seen: dict[str, datetime] = {}
    """Worker -> its last poll or enqueue."""
    waits: dict[int, list[float]] = {}
    """Priority -> seconds the last WAITS_KEPT granted requests waited (since they first asked)."""
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


class QuotaStatus(BaseModel):
    """What `wolf quotas` shows of one endpoint."""

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
    wait_p95: dict[int, float] = {}
    """Priority -> the 95th percentile of the recent grants' waits, in seconds."""
