"""`wolf.compile`: an agent of a manifest becomes the compiled agent a session runs (recorded in
history, so replays see the same tools)."""

from __future__ import annotations

import asyncio
import fnmatch
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentwolf.activities import observe
from agentwolf.activities.session_io import heartbeating
from agentwolf.activities.tools import tool_specs
from agentwolf.activities.window import context_window
from agentwolf.config.agent_files import AgentFileError, reread
from agentwolf.config.aliases import AliasError, resolve_model
from agentwolf.config.capabilities import CapabilityError
from agentwolf.config.manifest import (
    AgentConfig,
    CodeModeCapability,
    CodeModeSettings,
    Manifest,
    McpServerConfig,
    PydanticCapability,
    SubagentCapability,
    WebCapability,
)
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError
from agentwolf.config.suggest import did_you_mean, listing
from agentwolf.extensions import code_mode
from agentwolf.hosts.capabilities import CAPABILITY_TOOLS, SessionDeps, context
from agentwolf.hosts.host import AgentHost
from agentwolf.hosts.prepare import Prepared, PrepareError, prepare
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
from agentwolf.workflows.memory_tools import memory_tools
from agentwolf.workflows.web_tools import web_tools
from agentwolf.workflows.workspace_tools import workspace_tools


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
    if agent.file is not None:  # a Markdown agent: read again (an edit counts), and watched
        file = agent.file
        agent = await _from_file(inp.manifest, inp.agent, agent)
        agent_sources.append(await host.agent_folder(file))
    models, resolved, compact_models = _models(host, inp.manifest, agent)
    try:
        prepared = await heartbeating(
            prepare(
                host,
                inp.manifest,
                inp.agent,
                inp.ref.workflow_id,
                inp.turn_id or "-",
                inp.active_skills,
                inp.session_servers,
            )
        )
    except PrepareError as exc:
        raise ApplicationError(str(exc), type=exc.kind, non_retryable=exc.permanent) from None
    contributed = await _capabilities(host, inp, agent, models)
    tools, script_tools, code = _tools(agent, prepared, inp.manifest, contributed.tools)
    defaults = inp.manifest.host.models.defaults
    compiled = CompiledAgent(
        agent=inp.agent,
        models=models,
        labels=[observe.model_label(spec, host.secrets) for spec in models],
        instructions="\n\n".join(
            part for part in (agent.instructions, *contributed.instructions, prepared.catalog) if part
        ),
        tools=tools,
        temperature=agent.temperature if agent.temperature is not None else defaults.temperature,
        max_tokens=agent.max_tokens if agent.max_tokens is not None else defaults.max_tokens,
        tool_output_chars=agent.limits.tool_output_chars,
        context_window=context_window(inp.manifest.host.models, models, resolved),
        compact_models=compact_models,
        stream=agent.stream,
        commands=prepared.commands,
        sources=sorted(
            {f"mcp:{label}" for label in prepared.tools}
            | {f"skills:{path}" for path in prepared.skill_roots}
            | set(agent_sources)
        ),
        skills=[
            SkillInfo(
                name=e.name,
                uri=e.uri,
                allowed_tools=list(e.allowed_tools) if e.allowed_tools is not None else None,
                mcp_servers=list(e.mcp_servers),
            )
            for e in prepared.skills
        ],
        skill_servers=prepared.skill_servers | contributed.servers,
        session_servers=prepared.session_servers,
        capabilities=contributed.specs,
        model_settings={**agent.model_settings, **contributed.settings},
        script_tools=script_tools,
        code_mode=code,
    )
    digests = {source: await heartbeating(host.source_digest(source)) for source in compiled.sources}
    compiled.source_digests = {source: d for source, d in digests.items() if d is not None}
    host.keep(compiled)
    host.track(inp.ref.workflow_id, compiled.sources)
    return compiled


def _models(
    host: AgentHost, manifest: Manifest, agent: AgentConfig
) -> tuple[list[str], list[str], list[str]]:
    """(the agent's model chain, its specs resolved, the compaction models). Specs may carry
    placeholders (`${WOLF_MODEL:-test}`): they stay in what compile returns (it is recorded in
    history) and are resolved when the model is built. Checked now, so a refused or unset variable
    fails here, clearly."""
    try:
        models = resolve_model(manifest.host.models, agent.model)
        resolved = [host.secrets.resolve(spec) for spec in models]
        compact_models = (
            resolve_model(manifest.host.models, agent.limits.compact_model)
            if agent.limits.compact_model
            else []
        )
        for spec in compact_models:
            host.secrets.resolve(spec)
    except (AliasError, MissingVariable, PolicyError) as exc:
        raise ApplicationError(str(exc), type="ConfigError", non_retryable=True) from None
    return models, resolved, compact_models


def _tools(
    agent: AgentConfig, prepared: Prepared, manifest: Manifest, contributed: list[ToolSpec]
) -> tuple[list[ToolSpec], list[ToolSpec], CodeModeSettings | None]:
    """(the tools offered, the tools scripts call, code mode's settings): the MCP and function tools
    and those the agent's pydantic-ai capabilities contribute, as the agent's `tools` globs offer
    them, `delegate`, the skill tools, the session's readers, the web tools; code mode then offers
    `run_code` instead of the tools its scripts call."""
    subagents = [
        name for cap in agent.capabilities if isinstance(cap, SubagentCapability) for name in cap.subagent
    ]
    tools = [*tool_specs(prepared.tools, manifest), *contributed]
    if agent.tools is not None:
        tools = [t for t in tools if _offered(t, agent.tools)]
    skills = skill_tools([e.name for e in prepared.skills]) if prepared.skills else []
    tools = [
        *tools,
        *([delegate_spec(subagents)] if subagents else []),
        *(t for t in skills if agent.tools is None or _offered(t, agent.tools)),
        READ_TOOL_OUTPUT,
        RECALL_SPEC,
        *(t for c in agent.capabilities if isinstance(c, WebCapability) for t in web_tools(c.web)),
        *(workspace_tools(agent.workspace) if agent.workspace is not None else []),
        *(memory_tools(agent.memory) if agent.memory is not None else []),
    ]
    code = next((c.code_mode for c in agent.capabilities if isinstance(c, CodeModeCapability)), None)
    if code is None:
        return tools, [], None
    offered, script_tools = code_mode.split_tools(tools, code)
    return [code_mode.run_code_spec(script_tools, code), *offered], script_tools, code


async def _from_file(manifest: Manifest, name: str, loaded: AgentConfig) -> AgentConfig:
    """A Markdown agent as its file says now: an edit made since the config loaded counts."""
    try:
        return await asyncio.to_thread(
            reread,
            name,
            loaded,
            manifest.agents_from,
            manifest.host.models.aliases,
            manifest.host.mcp_servers,
        )
    except AgentFileError as exc:
        raise ApplicationError(str(exc), type="ConfigError", non_retryable=True) from None


@dataclass
class _Contributed:
    """What an agent's pydantic-ai capabilities add to its compiled agent."""

    specs: list[PydanticCapability] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    tools: list[ToolSpec] = field(default_factory=list)
    servers: dict[str, McpServerConfig] = field(default_factory=dict)


async def _capabilities(
    host: AgentHost, inp: CompileInput, agent: AgentConfig, models: list[str]
) -> _Contributed:
    """Build the agent's pydantic-ai capabilities (a spec the worker cannot build fails the compile,
    for good) and take their static parts: instructions after the agent's own, model settings over
    the agent's, their toolsets' tools (run by `wolf.call_tool` on the host's built toolset). Per-run
    instructions and settings, native tools and hooks are applied per request (hosts/capabilities.py)."""
    specs = [c for c in agent.capabilities if isinstance(c, PydanticCapability)]
    if not specs:
        return _Contributed()
    try:
        built = host.capabilities(specs)
    except CapabilityError as exc:
        raise ApplicationError(str(exc), type="ConfigError", non_retryable=True) from None
    assert built is not None
    out = _Contributed(specs, built.static_instructions(), dict(built.static_settings()))
    if built.toolset is not None:
        model = await heartbeating(host.model(models))
        deps = SessionDeps(
            inp.ref.tenant,
            inp.ref.workflow_id,
            inp.agent,
            inp.turn_id,
            None,
            activity.info().attempt,
            host.named,
        )
        listed = await heartbeating(built.tools(context(deps, model, [], built)))
        out.tools = [
            ToolSpec(
                name=name,
                server=CAPABILITY_TOOLS,
                tool=name,
                description=tool.tool_def.description or "",
                parameters=dict(tool.tool_def.parameters_json_schema),
            )
            for name, tool in listed.items()
        ]
        out.servers = {CAPABILITY_TOOLS: McpServerConfig(plugin=CAPABILITY_TOOLS)}
    return out


def _offered(spec: ToolSpec, patterns: list[str]) -> bool:
    """Whether an agent's `tools` globs offer `spec` (by model-facing name, `server:tool` or bare name)."""
    names = (spec.name, f"{spec.server}:{spec.tool}", spec.tool)
    return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)
