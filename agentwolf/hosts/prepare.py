"""What an agent's compile needs from its host: the session's own MCP servers and this turn's skill
servers registered, every tool source's tools listed, the skills, their catalog and the slash
commands. `wolf.compile` (activities/compile.py) turns it into the compiled agent."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mcp.shared.exceptions import MCPError
from temporalio import activity

from agentwolf.config.manifest import Manifest, McpServerConfig
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError
from agentwolf.extensions.pool import McpUnavailable
from agentwolf.extensions.registry import Scope
from agentwolf.extensions.skills import LocalSkillRoot
from agentwolf.extensions.types import ExtensionError, SkillEntry, ToolEntry
from agentwolf.hosts.host import AgentHost
from agentwolf.hosts.servers import ServerError, activate_skills, add_session_servers


class PrepareError(Exception):
    """Listing the agent's extensions failed; `kind` names how, `permanent` that retrying cannot help."""

    def __init__(self, message: str, kind: str, permanent: bool) -> None:
        super().__init__(message)
        self.kind = kind
        self.permanent = permanent


@dataclass
class Prepared:
    """An agent's extensions as its host lists them for one turn of one session."""

    tools: dict[str, list[ToolEntry]]
    """Each tool source's tools, by server label."""
    skills: list[SkillEntry]
    catalog: str
    """The skills' catalog for the instructions."""
    commands: dict[str, str]
    """Slash commands (`/name` -> description)."""
    skill_servers: dict[str, McpServerConfig]
    session_servers: dict[str, McpServerConfig]
    skill_roots: list[str]
    """The skill folders the agent sees."""


async def prepare(
    host: AgentHost,
    manifest: Manifest,
    agent: str,
    session_id: str,
    turn_id: str,
    active_skills: list[str],
    session_servers: dict[str, McpServerConfig],
) -> Prepared:
    """Register and list what the agent uses in this session and turn. A first use starts watchers
    and scans folders, and a re-joined server may wait for the old one to stop: callers heartbeat."""
    scope = await host.scope(manifest, agent, session_id, turn_id)
    try:
        joined = await add_session_servers(host, scope, session_servers)
    except ServerError as exc:
        raise PrepareError(str(exc), "SealError", permanent=True) from None
    skills = host.registry.skills(scope)
    try:
        entries = await skills.list_skills()
        skill_servers = await activate_skills(host, scope, manifest, entries, active_skills)
        servers = host.registry.tool_sources(scope)
        results = await asyncio.gather(*(s.list_tools() for s in servers), return_exceptions=True)
        listed: list[list[ToolEntry]] = []
        for server, result in zip(servers, list(results), strict=True):
            label = server.server  # type: ignore[attr-defined]
            if isinstance(result, BaseException) and label in skill_servers:
                # A skill still works without the servers it brings (its instructions load).
                activity.logger.warning("skill server %s is unavailable: %s", label, result)
                del skill_servers[label]
                result = []
            elif isinstance(result, BaseException):
                raise result
            listed.append(result)
        if skill_servers:  # the skills' own servers may serve skills too
            skills = host.registry.skills(scope)
            entries = await skills.list_skills()
        catalog = await skills.catalog(manifest.host.skills.catalog_bytes)
        commands = await _commands(host, scope)
    except McpUnavailable as exc:
        raise PrepareError(host.secrets.redact(str(exc)), "McpUnavailable", exc.permanent) from None
    except (MCPError, TimeoutError) as exc:
        raise PrepareError(
            host.secrets.redact(f"listing MCP tools failed: {exc}"), "McpUnavailable", permanent=False
        ) from None
    except (ExtensionError, MissingVariable, PolicyError) as exc:
        raise PrepareError(str(exc), "ExtensionError", permanent=True) from None
    for problem in skills.shadowed:
        activity.logger.warning("skills: %s", problem)
    return Prepared(
        tools=dict(zip([s.server for s in servers], listed, strict=True)),  # type: ignore[attr-defined]
        skills=entries,
        catalog=catalog,
        commands=commands,
        skill_servers=skill_servers,
        session_servers=joined,
        skill_roots=[str(r.path) for r in host.registry.visible(scope, LocalSkillRoot)],
    )


async def _commands(host: AgentHost, scope: Scope) -> dict[str, str]:
    """The session's slash commands for clients to offer; a server that cannot list its prompts
    costs its commands, not the compile."""
    try:
        return {f"/{c.name}": c.description for c in await host.registry.commands(scope)}
    except (ExtensionError, McpUnavailable, MCPError, TimeoutError) as exc:
        activity.logger.warning("listing slash commands failed: %s", host.secrets.redact(str(exc)))
        return {}
