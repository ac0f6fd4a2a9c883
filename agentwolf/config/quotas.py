"""Quotas: the budgets of a provider endpoint (requests, input and output tokens per minute,
concurrent requests), shared by every worker of the namespace through its quota workflow
(agentwolf/workflows/quotas/).

They come from the worker policy (`quotas.models`) and the manifest (`host.models.quotas`); for a
model both name, the policy's entry wins; a model no entry names has every limit learnt. A limit left
unset is learnt from the provider's rate-limit headers. The keys' old names (`flow:`, `limits:`)
are still read, with a deprecation warning."""

from __future__ import annotations

import fnmatch
import logging
import warnings
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

log = logging.getLogger(__name__)

PRIORITIES = {1: "interactive", 2: "job", 3: "background"}
"""Session priorities, lower first (Temporal's priority-key scale): `wolf chat`/`prompt` sessions, job
and schedule runs (and sessions started without one: subagents), background tasks (`wolf submit`)."""
DEFAULT_PRIORITY = 2
INTERACTIVE = 1
PRIORITY_MEMO = "priority"
"""The session's memo key holding its priority (set by `WolfClient.start_session`)."""


def renamed(data: Any, old: str, new: str, where: str) -> Any:
    """`data` (a mapping about to be validated) with its deprecated key `old` read as `new`, warned
    about once per place and logged; both keys at once is an error."""
    if not isinstance(data, dict) or old not in data:
        return data
    if new in data:
        raise ValueError(f"`{where}{old}` and `{where}{new}` both given: keep `{new}` only")
    note = f"`{where}{old}` is deprecated: name it `{where}{new}` (read as such)"
    warnings.warn(note, DeprecationWarning, stacklevel=2)
    log.warning(note)
    data = dict(data)
    data[new] = data.pop(old)
    return data


def session_priority(background: bool, trigger: str | None) -> int:
    """A session's priority key: runs a job or schedule started go before background tasks; a
    session a person talks to goes first (its subagents inherit it)."""
    if trigger is not None:
        return 2
    return 3 if background else 1


class EndpointQuota(BaseModel):
    """The budgets of the models a `match` pattern names (`openai:gpt-4o*`, `*`), per endpoint (base
    URL and API key) and model; None: unknown until a provider header says."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    match: str = "*"
    """A glob over the model spec as written (`openai:gpt-4o-mini`)."""
    rpm: int | None = Field(None, ge=1)
    """Requests per window."""
    input_tpm: int | None = Field(None, ge=1)
    """Input tokens per window."""
    output_tpm: int | None = Field(None, ge=1)
    """Output tokens per window."""
    concurrency: int | None = Field(None, ge=1)
    """Requests in flight at once, over every worker."""
    output_reserve: int = Field(1024, ge=1)
    """Output tokens reserved per request when the agent sets no `max_tokens` (reconciled with the
    real usage when the answer is in)."""
    window: timedelta = Field(timedelta(minutes=1), gt=timedelta(0))
    """The provider's window: 60 s for per-minute limits. An entry with no number of its own uses
    the window the provider states (`RateLimit-Policy`), if it does."""
    reserve: float = Field(0.15, ge=0, lt=1)
    """The share of each budget jobs and background work leave to interactive requests, which get it
    at once, unpaced (0: none). Held while people use the endpoint: from the quota workflow's start until a
    window passes without an interactive request; meanwhile jobs may use it too."""
    lease_ttl: timedelta = Field(timedelta(minutes=2), gt=timedelta(0))
    """A lease its worker has not named for this long (the worker died) is freed: its request counts
    until the end of the window after that. A live worker names its leases every quarter of it, so a
    request may run longer."""

    def matches(self, spec: str) -> bool:
        return fnmatch.fnmatchcase(spec, self.match)


class QuotaPolicy(BaseModel):
    """The worker policy's `quotas:` section (formerly `flow:`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    models: list[EndpointQuota] = []
    """Checked in order before the manifest's `host.models.quotas`: the first match wins (formerly
    `limits:`)."""
    tenants: dict[str, float] = {}
    """Tenant weights on a shared endpoint (default 1): a tenant with weight 2 gets twice the share of
    one with weight 1 while both wait."""
    rate_wait_max: timedelta = Field(timedelta(minutes=30), gt=timedelta(0))
    """How long a model request may wait for its provider's limits before its turn fails."""

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        return renamed(data, "limits", "models", "quotas.")

    def weight(self, tenant: str) -> float:
        return self.tenants.get(tenant, 1.0)


def quota_for(spec: str, policy: list[EndpointQuota], manifest: list[EndpointQuota]) -> EndpointQuota:
    """The quota of a model spec: the policy's first match, else the manifest's, else none known
    (every limit learnt from the provider)."""
    return next((entry for entry in [*policy, *manifest] if entry.matches(spec)), EndpointQuota())
