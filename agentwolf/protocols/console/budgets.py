"""The usage page's budgets: each agent's `limits.usd_budget_session` and `usd_budget_turn` beside what
its sessions spent, and the sessions at 80 % of their session budget or past it (where the session
itself warns, then stops).

The limits come from the configs: a registry config's current version for sessions started from one,
the served config file for the others (a session started elsewhere from another file is shown
against the served file's agent of that name)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass

from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from agentwolf.access import Principal
from agentwolf.client.configs import ConfigNotFound
from agentwolf.client.usage import Spending
from agentwolf.config.manifest import Limits, Manifest
from agentwolf.protocols.served import Served
from agentwolf.workflows.types import AGENT_ATTR, CONFIG_ATTR

NEAR = 0.8
"""The share of a session budget at which a session is marked (the session warns there too)."""
FILE = "file"
"""How the page names the served config file."""


@dataclass(frozen=True)
class Budget:
    config: str
    agent: str
    session_usd: float | None
    turn_usd: float | None
    sessions: int
    spent: float
    """USD its sessions spent, their subagents included (what the session budget counts)."""


@dataclass(frozen=True)
class Flagged:
    session_id: str
    agent: str
    spent: float
    budget: float

    @property
    def share(self) -> float:
        return self.spent / self.budget

    @property
    def over(self) -> bool:
        return self.spent >= self.budget


async def budgets(
    served: Served, principal: Principal, spending: list[Spending]
) -> tuple[list[Budget], list[Flagged]]:
    """Agents with a USD budget among the sessions' (config, agent) pairs, and the sessions near or
    over theirs, the fullest first."""
    groups: dict[tuple[str, str], list[Spending]] = defaultdict(list)
    for one in spending:
        attrs = one.execution.typed_search_attributes
        groups[attrs.get(CONFIG_ATTR) or FILE, attrs.get(AGENT_ATTR) or "?"].append(one)
    names = sorted({config for config, _ in groups} - {FILE})
    wolf = served.wolf(principal)

    async def manifest(name: str) -> Manifest | None:
        try:
            return (await wolf.config_get(name)).manifest
        except (ConfigNotFound, RPCError, WorkflowQueryFailedError):
            return None  # gone, or its registry cannot answer: no budget shown

    found = dict(zip(names, await asyncio.gather(*map(manifest, names)), strict=True))
    found[FILE] = served.manifest

    def limits(config: str, agent: str) -> Limits | None:
        source = found.get(config)
        held = source.agents.get(agent) if source is not None else None
        return held.limits if held is not None else None

    rows, flagged = [], []
    for (config, agent), mine in sorted(groups.items()):
        limit = limits(config, agent)
        if limit is None or (limit.usd_budget_session is None and limit.usd_budget_turn is None):
            continue
        spent = sum(s.counters.total.spent for s in mine if s.counters is not None)
        rows.append(Budget(config, agent, limit.usd_budget_session, limit.usd_budget_turn, len(mine), spent))
        if limit.usd_budget_session is not None:
            flagged += [
                Flagged(
                    s.execution.id.split("/", 2)[-1], agent, s.counters.total.spent, limit.usd_budget_session
                )
                for s in mine
                if s.counters is not None and s.counters.total.spent >= NEAR * limit.usd_budget_session
            ]
    flagged.sort(key=lambda f: (-f.share, f.session_id))
    return rows, flagged
