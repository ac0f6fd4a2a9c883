"""The MCP servers a session brings besides its manifest's: an active skill's (TURN scope) and the
session's client's (SESSION scope), their labels, and how a worker that did not compile restores them.
Host work, run inside the session's activities (`wolf.compile`, `wolf.call_tool`)."""

from __future__ import annotations

import hashlib

from temporalio import activity

from agentwolf.config.manifest import Manifest, McpServerConfig
from agentwolf.config.session_servers import (
    SESSION_SERVER,
    SealError,
    server_name,
    session_server_label,
    unseal,
)
from agentwolf.extensions.registry import Scope, ScopeLevel
from agentwolf.extensions.skills import LocalSkillRoot
from agentwolf.extensions.types import SkillEntry
from agentwolf.hosts.host import AgentHost
from agentwolf.workflows.contracts import CompiledAgent, ToolCallInput


class ServerError(Exception):
    """A server the session brings cannot be used as given; retrying cannot fix it."""


async def activate_skills(
    host: AgentHost, scope: Scope, manifest: Manifest, entries: list[SkillEntry], names: list[str]
) -> dict[str, McpServerConfig]:
    """Register the MCP servers this turn's active skills bring, at TURN scope; earlier turns' go.

    Only the skill that won its name (never a shadowed one), only local skills, and only when the
    host opts in (`host.skills.allow_mcp_servers`): a skill folder is not trusted to run programs.
    """
    host.registry.clear_turns(scope.session_id, keep=scope.turn_id)
    servers: dict[str, McpServerConfig] = {}
    roots = {root.origin: root for root in host.registry.visible(scope, LocalSkillRoot)}
    for entry in entries:
        root = roots.get(entry.origin)
        if entry.name not in names or not entry.mcp_servers or root is None:
            continue
        if not manifest.host.skills.allow_mcp_servers:
            activity.logger.warning(
                "skill %s declares MCP servers; host.skills.allow_mcp_servers is off", entry.name
            )
            continue
        parsed = root.parsed(entry.name)
        for server, config in parsed.mcp_servers.items() if parsed else ():
            label = skill_server_label(entry.name, server, config)
            host.registry.link(f"skill:{entry.name}", f"mcp:{label}")
            await host.pool.add_server(label, config, trusted=False)
            host.registry.add(host.mcp_server(label), scope)
            servers[label] = config
    return servers


def skill_server_label(skill: str, server: str, config: McpServerConfig) -> str:
    """`<skill>/<server>@<digest of its config>`: declared server names cannot hold `/`, so a skill's
    server never takes a declared one's place; the digest keeps same-named skills from different
    folders from sharing a connection, and binds the label to the exact config."""
    return f"{skill}/{server}@{hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:8]}"


async def add_session_servers(
    host: AgentHost, scope: Scope, servers: dict[str, McpServerConfig]
) -> dict[str, McpServerConfig]:
    """Register the servers the session's client brought at SESSION scope (no other session sees
    them); they start on the host's pool under the worker policy, and `${VAR}` never resolves in them.
    What is returned (recorded in history) keeps their secrets sealed.

    A server this session had under a label no longer among them (a same-named one re-joined with
    another config) is unregistered and released, so the model is offered only the current one."""
    session = Scope(ScopeLevel.SESSION, scope.agent_name, scope.session_id)
    added: dict[str, McpServerConfig] = {}
    for name, config in servers.items():
        label = session_server_label(scope.session_id, name, config)
        try:
            opened = await _opened(host, scope.session_id, config)
        except SealError as exc:
            raise ServerError(f"MCP server {name!r}: {exc}") from None
        await host.pool.add_server(label, opened, trusted=False)
        host.registry.add(host.mcp_server(label), session)
        added[label] = config
    for source in host.registry.tool_sources(session):
        label = getattr(source, "server", "")
        if label.startswith(SESSION_SERVER) and label not in added:
            host.registry.discard(source, session)
    return added


async def restore_session_server(host: AgentHost, compiled: CompiledAgent, inp: ToolCallInput) -> None:
    """A worker that did not compile this session's agent takes the server's config from the
    session's `compiled` agent, if the label's digest matches it."""
    config = compiled.session_servers.get(inp.server)
    name = server_name(inp.server)
    if config is not None and session_server_label(inp.ref.workflow_id, name, config) == inp.server:
        try:
            opened = await _opened(host, inp.ref.workflow_id, config)
        except SealError as exc:  # the pool reports the server as not declared
            activity.logger.warning("MCP server %s: %s", inp.server, exc)
            return
        await host.pool.add_server(inp.server, opened, trusted=False)


async def _opened(host: AgentHost, workflow_id: str, config: McpServerConfig) -> McpServerConfig:
    """The config with its sealed secrets read back (config/session_servers.py): they stay in this
    worker's memory, redacted from tool output, errors and logs."""
    opened, secrets = await unseal(activity.client().data_converter, workflow_id, config)
    host.secrets.hide(secrets)
    return opened


async def restore_skill_server(host: AgentHost, manifest: Manifest, inp: ToolCallInput) -> None:
    """A worker that did not compile this turn registers a skill's server from the skill file it
    reads itself (never from activity input), if the label's digest matches that file's config."""
    skill, _, rest = inp.server.partition("/")
    server = rest.rpartition("@")[0]
    if not (skill and server and manifest.host.skills.allow_mcp_servers):
        return  # the pool reports the server as not declared
    scope = await host.scope(manifest, inp.agent, inp.ref.workflow_id, inp.turn_id or "-")
    for root in host.registry.visible(scope, LocalSkillRoot):
        parsed = root.parsed(skill)
        config = parsed.mcp_servers.get(server) if parsed else None
        if config is not None and skill_server_label(skill, server, config) == inp.server:
            await host.pool.add_server(inp.server, config, trusted=False)
            return
