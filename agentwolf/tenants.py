"""Tenant names and the tenant -> namespace mapping for hard isolation.

A tenant is part of every workflow id (`wolf/<tenant>/<session>`, `wolf-config/<tenant>/<name>`),
so its name must not contain `/`: otherwise tenant `a/b` with session `c` and tenant `a` with
session `b/c` would share an id. Tenants share a namespace by default (isolated by id and the
`WolfTenant` search attribute); `WOLF_TENANT_NAMESPACES="acme=acme-ns,beta=beta-ns"` gives tenants
their own namespaces, served by their own workers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAMESPACES_ENV = "WOLF_TENANT_NAMESPACES"


class TenantError(ValueError):
    """A tenant name that cannot be used, or a request that crosses tenants."""


def check_tenant(tenant: str) -> str:
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
        mapping[check_tenant(tenant)] = namespace
    return mapping


def namespace_for(tenant: str, env: Mapping[str, str] | None = None) -> str | None:
    """The tenant's own namespace, or None when it shares the configured one."""
    return tenant_namespaces(env).get(tenant)
