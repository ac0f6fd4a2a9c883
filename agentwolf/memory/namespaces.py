"""A memory's namespace: (tenant, owner, agent) or a shared layer of it, and its storage key, which
starts with the tenant (a key prefix, not a filter applied afterwards)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from agentwolf.access import check_tenant_name

OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+:-]{0,127}")
AGENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
SHARED = "*"
"""The owner (agent layer) or owner and agent (tenant layer) of a shared layer."""
Layer = Literal["own", "agent", "tenant"]


class NamespaceError(ValueError):
    """A tenant, owner or agent that cannot name a namespace."""


def check_owner(owner: str) -> str:
    """`owner` if it can name a memory owner: letters, digits and `_.@+:-` (an email works), no `/`."""
    if not OWNER.fullmatch(owner):
        raise NamespaceError(
            f"invalid memory owner {owner!r}: use letters, digits and '_.@+:-' (at most 128)"
        )
    return owner


@dataclass(frozen=True)
class Namespace:
    tenant: str
    owner: str
    agent: str

    def __post_init__(self) -> None:
        try:
            check_tenant_name(self.tenant)
        except ValueError as exc:
            raise NamespaceError(str(exc)) from None
        if self.owner != SHARED:
            check_owner(self.owner)
        if self.agent != SHARED and not AGENT.fullmatch(self.agent):
            raise NamespaceError(f"invalid agent name for memory: {self.agent!r}")

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.owner}/{self.agent}"

    @classmethod
    def parse(cls, key: str) -> Namespace:
        tenant, owner, agent = key.split("/")
        return cls(tenant, owner, agent)

    def layer(self, layer: Layer) -> Namespace:
        """This owner's namespace (`own`), or a shared layer over it."""
        if layer == "agent":
            return Namespace(self.tenant, SHARED, self.agent)
        if layer == "tenant":
            return Namespace(self.tenant, SHARED, SHARED)
        return self

    @property
    def label(self) -> str:
        """How a hit from this namespace is named to the model: its layer, never another owner's name."""
        if self.owner != SHARED:
            return "own"
        return "tenant" if self.agent == SHARED else "agent"


def owner_prefix(tenant: str, owner: str) -> str:
    """The key prefix of every namespace of one owner of one tenant (the private ones; shared layers
    are not the owner's)."""
    return f"{check_tenant_name(tenant)}/{check_owner(owner)}/"
