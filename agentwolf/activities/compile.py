"""`wolf.compile`: an agent of a manifest becomes the compiled agent a session runs (recorded in
history, so replays see the same tools)."""

from __future__ import annotations

import asyncio
import fnmatch

from mcp.shared.exceptions import MCPError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentwolf.activities import observe
from agentwolf.activities.servers import activate_skills, add_session_servers
from agentwolf.activities.session_io import heartbeating
from agentwolf.activities.tools import tool_specs
from agentwolf.activities.window import context_window
from agentwolf.config.agent_files import AgentFileError, reread
from agentwolf.config.aliases import AliasError, resolve_model
from agentwolf.config.manifest import (
    AgentConfig,
    CodeModeCapability,
    Manifest,
    SubagentCapability,
    WebCapability,
)
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError
from agentwolf.config.suggest import did_you_mean, listing
from agentwolf.extensions import code_mode
from agentwolf.extensions.pool import McpUnavailable
from agentwolf.extensions.registry import Scope
from agentwolf.extensions.skills import LocalSkillRoot
from agentwolf.extensions.types import ExtensionError, ToolEntry
from agentwolf.hosts.host import AgentHost
from agentwolf.workflows.contracts import (
    READ_TOOL_OUTPUT,
    RECALL_SPEC,
    CompiledAgent,
    CompileInput,
    SkillInfo,
    ToolSpec,
    delegate_spec,
    skill_tools,
)
from agentwolf.workflows.web_tools import web_tools


async def compile_agent(host: AgentHost, inp: CompileInput) -> CompiledAgent:
    """Agent name + manifest -> model chain, instructions, and the tools its MCP servers list."""
    agent = inp.manifest.agents.get(inp.agent)
    if agent is None:
        raise ApplicationError(
            f"unknown agent {inp.agent!r}{did_you_mean(inp.agent, inp.manifest.agents)}"
            f" (agents in this config: {listing(inp.manifest.agents)})",
            type="UnknownAgent",
            non_retryable=True,
        )
    agent_sources = []
    if agent.file is not None:  # a Markdown agent: watched, and read again (an edit counts)
        agent_sources.append(await host.agent_folder(agent.file))
        agent = await _from_file(host, inp.manifest, agent)
    try:
        # Specs may carry placeholders (`${WOLF_MODEL:-test}`): they stay in what compile returns
        # (it is recorded in history) and are resolved when the model is built. Checked now, so a
        # refused or unset variable fails here, clearly.
        models = resolve_model(inp.manifest.host.models, agent.model)
        resolved = [host.secrets.resolve(spec) for spec in models]
        compact_models = (
            resolve_model(inp.manifest.host.models, agent.limits.compact_model)
            if agent.limits.compact_model
            else []
        )
        for spec in compact_models:
            host.secrets.resolve(spec)
    except (AliasError, MissingVariable, PolicyError) as exc:
        raise ApplicationError(str(exc), type="ConfigError", non_retryable=True) from None
    subagents = [
        name for cap in agent.capabilities if isinstance(cap, SubagentCapability) for name in cap.subagent
    ]
    # Heartbeating: a first use starts watchers and scans folders, a re-joined server may wait for the
    # old one to stop: longer than the heartbeat timeout, which failed the attempt.
    scope = await heartbeating(host.scope(inp.manifest, inp.agent, inp.ref.workflow_id, inp.turn_id or "-"))
    session_servers = await heartbeating(add_session_servers(host, scope, inp.session_servers))
    skills = host.registry.skills(scope)
    try:
        entries = await heartbeating(skills.list_skills())
        skill_servers = await activate_skills(host, scope, inp.manifest, entries, inp.active_skills)
        servers = host.registry.tool_sources(scope)
        results = await heartbeating(
            asyncio.gather(*(s.list_tools() for s in servers), return_exceptions=True)
        )
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
            entries = await heartbeating(skills.list_skills())
        catalog = await heartbeating(skills.catalog(inp.manifest.host.skills.catalog_bytes))
        commands = await _commands(host, scope)
    except McpUnavailable as exc:
        raise ApplicationError(
            host.secrets.redact(str(exc)), type="McpUnavailable", non_retryable=exc.permanent
        ) from None
    except (MCPError, TimeoutError) as exc:
        raise ApplicationError(
            host.secrets.redact(f"listing MCP tools failed: {exc}"), type="McpUnavailable"
        ) from None
    except (ExtensionError, MissingVariable, PolicyError) as exc:
        raise ApplicationError(str(exc), type="ExtensionError", non_retryable=True) from None
    for problem in skills.shadowed:
        activity.logger.warning("skills: %s", problem)
    defaults = inp.manifest.host.models.defaults
    tools = tool_specs(dict(zip([s.server for s in servers], listed, strict=True)), inp.manifest)  # type: ignore[attr-defined]
    if agent.tools is not None:
        tools = [t for t in tools if _offered(t, agent.tools)]
    compiled = CompiledAgent(
        agent=inp.agent,
        models=models,
        labels=[observe.model_label(spec, host.secrets) for spec in models],
        instructions="\n\n".join(part for part in (agent.instructions, catalog) if part),
        tools=tools
        + ([delegate_spec(subagents)] if subagents else [])
        + [
            t
            for t in (skill_tools([e.name for e in entries]) if entries else [])
            if agent.tools is None or _offered(t, agent.tools)
        ]
        + [READ_TOOL_OUTPUT, RECALL_SPEC],
        temperature=agent.temperature if agent.temperature is not None else defaults.temperature,
        max_tokens=agent.max_tokens if agent.max_tokens is not None else defaults.max_tokens,
        tool_output_chars=agent.limits.tool_output_chars,
        context_window=context_window(inp.manifest.host.models, models, resolved),
        compact_models=compact_models,
        stream=agent.stream,
        commands=commands,
        sources=sorted(
            {f"mcp:{s.server}" for s in servers}  # type: ignore[attr-defined]
            | {f"skills:{r.path}" for r in host.registry.visible(scope, LocalSkillRoot)}
            | set(agent_sources)
        ),
        skills=[
            SkillInfo(
                name=e.name,
                uri=e.uri,
                allowed_tools=list(e.allowed_tools) if e.allowed_tools is not None else None,
                mcp_servers=list(e.mcp_servers),
            )
            for e in entries
        ],
        skill_servers=skill_servers,
        session_servers=session_servers,
    )
    _built_in_capabilities(compiled, agent)
    digests = {source: await heartbeating(host.source_digest(source)) for source in compiled.sources}
    compiled.source_digests = {source: d for source, d in digests.items() if d is not None}
    host.keep(compiled)
    host.track(inp.ref.workflow_id, compiled.sources)
    return compiled


async def _from_file(host: AgentHost, manifest: Manifest, loaded: AgentConfig) -> AgentConfig:
    """A Markdown agent as its file says now: an edit made since the config loaded counts."""
    try:
        return await asyncio.to_thread(
            reread, loaded, manifest.host.models.aliases, manifest.host.mcp_servers
        )
    except AgentFileError as exc:
        raise ApplicationError(str(exc), type="ConfigError", non_retryable=True) from None


def _offered(spec: ToolSpec, patterns: list[str]) -> bool:
    """Whether an agent's `tools` globs offer `spec` (by model-facing name, `server:tool` or bare name)."""
    names = (spec.name, f"{spec.server}:{spec.tool}", spec.tool)
    return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)


async def _commands(host: AgentHost, scope: Scope) -> dict[str, str]:
    """The session's slash commands (`/name` -> description) for clients to offer; a server that
    cannot list its prompts costs its commands, not the compile."""
    try:
        return {f"/{c.name}": c.description for c in await heartbeating(host.registry.commands(scope))}
    except (ExtensionError, McpUnavailable, MCPError, TimeoutError) as exc:
        activity.logger.warning("listing slash commands failed: %s", host.secrets.redact(str(exc)))
        return {}


def _built_in_capabilities(compiled: CompiledAgent, agent: AgentConfig) -> None:
    """Web adds its tools; code mode then offers `run_code` instead of the tools its scripts call."""
    compiled.tools += [
        t for c in agent.capabilities if isinstance(c, WebCapability) for t in web_tools(c.web)
    ]
    code = next((c.code_mode for c in agent.capabilities if isinstance(c, CodeModeCapability)), None)
    if code is not None:
        offered, compiled.script_tools = code_mode.split_tools(compiled.tools, code)
        compiled.tools = [code_mode.run_code_spec(compiled.script_tools, code), *offered]
        compiled.code_mode = code
