"""`wolf.compile`: an agent of a manifest becomes the compiled agent a session runs (recorded in
history, so replays see the same tools)."""

from __future__ import annotations

import asyncio
import fnmatch

from temporalio.exceptions import ApplicationError

from agentwolf.activities import observe
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
from agentwolf.hosts.host import AgentHost
from agentwolf.hosts.prepare import PrepareError, prepare
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
    entries = prepared.skills
    defaults = inp.manifest.host.models.defaults
    tools = tool_specs(prepared.tools, inp.manifest)
    if agent.tools is not None:
        tools = [t for t in tools if _offered(t, agent.tools)]
    compiled = CompiledAgent(
        agent=inp.agent,
        models=models,
        labels=[observe.model_label(spec, host.secrets) for spec in models],
        instructions="\n\n".join(part for part in (agent.instructions, prepared.catalog) if part),
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
            for e in entries
        ],
        skill_servers=prepared.skill_servers,
        session_servers=prepared.session_servers,
    )
    _built_in_capabilities(compiled, agent)
    digests = {source: await heartbeating(host.source_digest(source)) for source in compiled.sources}
    compiled.source_digests = {source: d for source, d in digests.items() if d is not None}
    host.keep(compiled)
    host.track(inp.ref.workflow_id, compiled.sources)
    return compiled


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


def _offered(spec: ToolSpec, patterns: list[str]) -> bool:
    """Whether an agent's `tools` globs offer `spec` (by model-facing name, `server:tool` or bare name)."""
    names = (spec.name, f"{spec.server}:{spec.tool}", spec.tool)
    return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)


def _built_in_capabilities(compiled: CompiledAgent, agent: AgentConfig) -> None:
    """Web and memory add their tools; code mode then offers `run_code` instead of the tools its
    scripts call."""
    compiled.tools += [
        t for c in agent.capabilities if isinstance(c, WebCapability) for t in web_tools(c.web)
    ]
    if agent.memory is not None:
        compiled.tools += memory_tools(agent.memory)
    code = next((c.code_mode for c in agent.capabilities if isinstance(c, CodeModeCapability)), None)
    if code is not None:
        offered, compiled.script_tools = code_mode.split_tools(compiled.tools, code)
        compiled.tools = [code_mode.run_code_spec(compiled.script_tools, code), *offered]
        compiled.code_mode = code
