"""Tenancy and access, in one place: who is asking, which tenant and which sessions it may reach,
and the workflow-id scheme that carries the tenant.

Where a request's tenant is decided: once, where it enters. A front end maps its API key to a
`Principal` (protocols/auth.py, `ApiKeys`), `wolf serve --no-auth` and stdio front ends use one
fixed tenant, the CLI takes `--tenant`/`WOLF_TENANT`, and the SDK takes `WolfClient(tenant=...)`
(validated by `check_tenant_name`). From then on the tenant travels only inside workflow ids
(`wolf/<tenant>/<session>`, `wolf-config/<tenant>/<name>`, `wolf-fire/<tenant>/<name>`; built and
read by `workflow_id` and `tenant_of`): a worker derives it from the calling workflow's id, never from
input (`check_caller` for session activities; `SessionWorkflow.run` checks its own input the same way).

A tenant's name must not contain `/`: otherwise tenant `a/b` with session `c` and tenant `a` with
session `b/c` would share an id. Tenants share a namespace by default (isolated by id and the
`WolfTenant` search attribute); `WOLF_TENANT_NAMESPACES="acme=acme-ns,beta=beta-ns"` gives tenants
their own namespaces, served by their own workers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentwolf.workflows.types import SessionStatus, tenant_of, workflow_id

__all__ = [
    "Principal",
    "Runs",
    "TenantError",
    "caller_tenant",
    "check_caller",
    "check_tenant_name",
    "namespace_for",
    "runs",
    "tenant_namespaces",
    "tenant_of",
    "workflow_id",
]

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAMESPACES_ENV = "WOLF_TENANT_NAMESPACES"


class TenantError(ValueError):
    """A tenant name that cannot be used, or a request that crosses tenants."""


def check_tenant_name(tenant: str) -> str:
    """`tenant` if it can be part of a workflow id (else TenantError)."""
    if not NAME.fullmatch(tenant):
        raise TenantError(
            f"invalid tenant name {tenant!r}: use letters, digits, '.', '_' and '-' (at most 64, no '/')"
        )
    return tenant


def tenant_namespaces(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`WOLF_TENANT_NAMESPACES` parsed: `tenant=namespace` pairs separated by commas."""
    raw = (os.environ if env is None else env).get(NAMESPACES_ENV, "")
    mapping: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        tenant, sep, namespace = (s.strip() for s in item.partition("="))
        if not sep or not namespace:
            raise TenantError(f"{NAMESPACES_ENV}: {item!r} is not `tenant=namespace`")
        mapping[check_tenant_name(tenant)] = namespace
    return mapping


def namespace_for(tenant: str, env: Mapping[str, str] | None = None) -> str | None:
    """The tenant's own namespace, or None when it shares the configured one."""
    return tenant_namespaces(env).get(tenant)


@dataclass(frozen=True)
class Principal:
    """Who is asking a front end: one tenant, optionally only some configs and agents of it."""

    tenant: str
    configs: frozenset[str] | None = None
    agents: frozenset[str] | None = None
    key: str = ""
    """The key's SHA-256 (empty: no key, as with `--no-auth` or on stdio): what MCP sessions bind to."""
    subject: str | None = None
    """Whom the key acts for: the owner of the sessions it starts (whose long-term memory they use);
    None: the request's `user` within this key, else the key itself."""

    def may_use(self, config: str, agent: str) -> bool:
        return (self.configs is None or config in self.configs) and (
            self.agents is None or agent in self.agents
        )


class Runs(Protocol):
    """An agent and its config (`start_session` keywords: `manifest=` or `config_name=`), as a
    front end's `Target` or ACP's served agent carry them."""

    @property
    def agent(self) -> str: ...

    @property
    def source(self) -> Mapping[str, Any]: ...


def runs(status: SessionStatus, served: Runs) -> bool:
    """Whether an existing session may be reached through `served`: only if it runs that agent from
    that config, a registry config by name, a manifest file by identity (`SessionStatus.config_id`;
    every session of any file has no config name, so the name alone would admit them all)."""
    from agentwolf.config.manifest import Manifest  # front ends have it loaded; clients need not

    if status.agent != served.agent:
        return False
    name, manifest = served.source.get("config_name"), served.source.get("manifest")
    if name is not None:
        return status.config_name == name
    if status.config_name is not None or not isinstance(manifest, Manifest):
        return False
    return status.config_id == manifest.identity


def caller_tenant(claimed: str | None = None, served: str | None = None) -> str:
    """In an activity: the tenant the calling workflow's id names (a session, registry, schedule
    firing or eval run); refused when the id names none, when the input claims another (`claimed`),
    or when this worker serves only another (`served`)."""
    caller = activity.info().workflow_id or ""
    tenant = tenant_of(caller)
    if tenant is None or (claimed is not None and claimed != tenant):
        raise ApplicationError(
            f"refused: the input names tenant {claimed!r}, but the calling workflow is {caller!r} "
            f"(tenant {tenant!r})",
            type="TenantMismatch",
            non_retryable=True,
        )
    _check_served(tenant, served)
    return tenant


def check_caller(session_workflow_id: str, tenant: str, served: str | None) -> None:
    """In a session activity: the input's session and tenant are the calling workflow's own (the
    tenant its id names), and this worker serves that tenant; anything else is refused."""
    caller = activity.info().workflow_id or ""
    caller_tenant = tenant_of(caller)
    if session_workflow_id != caller or tenant != caller_tenant:
        raise ApplicationError(
            f"refused: the input names session {session_workflow_id!r} of tenant {tenant!r}, "
            f"but the calling workflow is {caller!r} (tenant {caller_tenant!r})",
            type="TenantMismatch",
            non_retryable=True,
        )
    _check_served(caller_tenant, served)


def _check_served(tenant: str, served: str | None) -> None:
    if served is not None and tenant != served:
        raise ApplicationError(
            f"refused: this worker serves tenant {served!r} only, not {tenant!r}",
            type="TenantMismatch",
            non_retryable=True,
        )
