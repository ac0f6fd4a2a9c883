"""Which existing sessions a caller may reach: one rule for every front end that names a session.

A session is reachable through an agent only if it runs that agent from that agent's config: a
registry config by name, a manifest file by identity (`SessionStatus.config_id`; every session of any
file has no config name, so the name alone would admit them all). A key reaches a session only if
the key may use the session's agent and config. Anything else is as unknown as a missing session:
`SessionNotFound`, which front ends answer as not found."""

from __future__ import annotations

from agentwolf.access import Principal, Runs, runs
from agentwolf.client.wolf_client import SessionNotFound, WolfClient
from agentwolf.protocols.app import Served, Target
from agentwolf.protocols.auth import SERVED
from agentwolf.workflows.types import SessionStatus


async def session_of(wolf: WolfClient, served: Runs, session_id: str) -> SessionStatus:
    """The caller's session `session_id` if it runs `served` (else SessionNotFound)."""
    status = await wolf.status(session_id)
    if not runs(status, served):
        raise SessionNotFound(session_id)
    return status


def target_of(
    served: Served, principal: Principal, agent: str, config_name: str | None, config_id: str | None
) -> Target | None:
    """The target a session of `agent` runs, as this server names it, if `principal` may use it (None:
    a config this server does not serve, or an agent or config the key may not use). A file session
    (no `config_name`) is the served file's only if its manifest identity `config_id` is."""
    if config_name == SERVED:  # a registry config from before the name was reserved
        return None
    if config_name is None:
        if served.manifest is None or config_id != served.manifest.identity:
            return None
        target, config = Target(agent, agent, {"manifest": served.manifest}), SERVED
    elif config_name == served.config_name:
        target, config = Target(agent, agent, {"config_name": config_name}), config_name
    else:
        target, config = Target(f"{config_name}/{agent}", agent, {"config_name": config_name}), config_name
    return target if principal.may_use(config, agent) else None


async def reach(served: Served, principal: Principal, session_id: str) -> tuple[SessionStatus, Target]:
    """The session and its target, for paths that name a session without an agent (a response id,
    an approval, a transcript); SessionNotFound unless `principal` may use what it runs."""
    wolf = served.wolf(principal)
    status = await wolf.status(session_id)
    target = target_of(served, principal, status.agent, status.config_name, status.config_id)
    if target is None:
        raise SessionNotFound(session_id)
    return status, target
