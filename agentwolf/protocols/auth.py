"""API keys: who may call `wolf serve`, as which tenant, on which configs and agents.

Keys come from the worker policy file (`api_keys:`, see agentwolf/config/policy.py) or from
`WOLF_API_KEYS="key=tenant,..."`; only their SHA-256 is kept, and a presented key is hashed and
compared against every stored digest in constant time."""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping

from agentwolf.access import Principal, check_tenant_name
from agentwolf.client.configs import SERVED
from agentwolf.config.policy import ApiKeyEntry

__all__ = ["SERVED", "ApiKeys", "Principal", "digest"]


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    def __init__(self, entries: list[ApiKeyEntry]) -> None:
        self._keys = [
            (
                bytes.fromhex(e.sha256),
                Principal(check_tenant_name(e.tenant), e.configs, e.agents, e.sha256, e.subject),
            )
            for e in entries
        ]

    def __bool__(self) -> bool:
        return bool(self._keys)

    def principal(self, presented: str) -> Principal | None:
        wanted = hashlib.sha256(presented.encode()).digest()
        found = None
        for stored, principal in self._keys:
            if hmac.compare_digest(stored, wanted):
                found = principal
        return found

    def identified(self, key_id: str) -> Principal | None:
        """The principal of the one key whose SHA-256 (hex) starts with `key_id` (None: none, or more
        than one)."""
        found = [p for _, p in self._keys if key_id and p.key.startswith(key_id)]
        return found[0] if len(found) == 1 else None

    @classmethod
    def load(cls, policy_keys: list[ApiKeyEntry], environ: Mapping[str, str] = os.environ) -> ApiKeys:
        """The policy's keys plus `WOLF_API_KEYS="key=tenant,key2=tenant2"` (split at the last `=`:
        tenants have none, base64 keys may end in some)."""
        entries = list(policy_keys)
        for item in filter(None, (p.strip() for p in environ.get("WOLF_API_KEYS", "").split(","))):
            key, sep, tenant = item.rpartition("=")
            if not sep or not key or not tenant:
                raise ValueError("WOLF_API_KEYS entries are key=tenant, separated by commas")
            entries.append(ApiKeyEntry(sha256=digest(key), tenant=tenant))
        return cls(entries)
