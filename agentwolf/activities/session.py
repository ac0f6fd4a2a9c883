"""The activities a session runs: compile, model_request, call_tool, read_skill, expand_command.

Thin by design: each looks up the host for (config, tenant) and delegates to it. Whatever a worker
lacks (a manifest it never saw, a compiled agent, a transcript prefix) it fetches from the session
workflow by query, so any worker can serve any step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import functools
import hashlib
import json
import re
import shlex
from collections.abc import Awaitable, Callable
from typing import TypeVar

import mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from pydantic_ai.exceptions import ModelHTTPError, UserError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelRequest, ToolReturnPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition
from temporalio import activity
from temporalio.exceptions import ApplicationError

from agentwolf.activities import live, observe
from agentwolf.activities.cost import record, request_cost, used_spec
from agentwolf.config.aliases import AliasError, resolve_model
from agentwolf.config.manifest import Manifest, McpServerConfig, SubagentCapability
from agentwolf.config.placeholders import MissingVariable
from agentwolf.config.policy import PolicyError
from agentwolf.extensions.pool import McpUnavailable
from agentwolf.extensions.registry import Scope, ScopeLevel
from agentwolf.extensions.skills import LocalSkillRoot
from agentwolf.extensions.types import ExtensionError, SkillEntry, ToolEntry
from agentwolf.hosts.host import AgentHost, CachedTranscript, HostRegistry
from agentwolf.telemetry import metrics
from agentwolf.workflows.contracts import (
    COMPILED_QUERY,
    EMPTY_DIGEST,
    MANIFEST_QUERY,
    READ_TOOL_OUTPUT,
    SESSION,
    TRANSCRIPT_QUERY,
    CommandInput,
    CommandOutput,
    CompiledAgent,
    CompileInput,
    HostRef,
    ModelRequestInput,
    ModelRequestOutput,
    SkillInfo,
    SkillReadInput,
    ToolCallInput,
    ToolCallOutput,
    ToolSpec,
    chain_digest,
    delegate_spec,
    skill_tools,
)
from agentwolf.workflows.output import OUTPUT_DESCRIPTION, OUTPUT_TOOL
from agentwolf.workflows.types import tenant_of

T = TypeVar("T")

_PERMANENT_HTTP = {400, 401, 403, 404, 422}
_TOOL_NAME = re.compile(r"[^a-zA-Z0-9_-]")


A = TypeVar("A", bound=CompileInput | ModelRequestInput | ToolCallInput | SkillReadInput | CommandInput)


def _serving(
    method: Callable[[SessionActivities, A], Awaitable[T]],
) -> Callable[[SessionActivities, A], Awaitable[T]]:
    """Check the tenant, then keep the activity's host from being closed as idle while it runs."""

    @functools.wraps(method)
    async def serve(self: SessionActivities, inp: A) -> T:
        check_tenant(inp.ref, self.hosts.tenant)
        with self.hosts.serving(inp.ref.config_id, inp.ref.tenant):
            return await method(self, inp)

    return serve


def check_tenant(ref: HostRef, served: str | None) -> None:
    """The tenant is the one the calling workflow's id names; input that says otherwise is refused,
    and so is a tenant this worker does not serve."""
    caller = activity.info().workflow_id or ""
    tenant = tenant_of(caller)
    if ref.workflow_id != caller or ref.tenant != tenant:
        raise ApplicationError(
            f"refused: the input names session {ref.workflow_id!r} of tenant {ref.tenant!r}, "
            f"but the calling workflow is {caller!r} (tenant {tenant!r})",
            type="TenantMismatch",
            non_retryable=True,
        )
    if served is not None and tenant != served:
        raise ApplicationError(
            f"refused: this worker serves tenant {served!r} only, not {tenant!r}",
            type="TenantMismatch",
            non_retryable=True,
        )


class SessionActivities:
    def __init__(self, hosts: HostRegistry) -> None:
        self.hosts = hosts

    @activity.defn(name="wolf.compile")
    @_serving
    async def compile(self, inp: CompileInput) -> CompiledAgent:
        """Agent name + manifest -> model chain, instructions, and the tools its MCP servers list."""
        host = self.hosts.ensure(inp.manifest, inp.ref.tenant)
        agent = inp.manifest.agents.get(inp.agent)
        if agent is None:
            raise ApplicationError(
                f"unknown agent {inp.agent!r} (agents in this config: "
                f"{sorted(inp.manifest.agents) or 'none'})",
                type="UnknownAgent",
                non_retryable=True,
            )
        try:
            # Specs may carry placeholders (`${WOLF_MODEL:-test}`): they stay in what compile returns
            # (it is recorded in history) and are resolved when the model is built. Checked now, so a
            # refused or unset variable fails here, clearly.
            models = resolve_model(inp.manifest.host.models, agent.model)
            for spec in models:
                host.secrets.resolve(spec)
        except (AliasError, MissingVariable, PolicyError) as exc:
            raise ApplicationError(str(exc), type="ConfigError", non_retryable=True) from None
        subagents = [
            name for cap in agent.capabilities if isinstance(cap, SubagentCapability) for name in cap.subagent
        ]
        scope = await host.scope(inp.manifest, inp.agent, inp.ref.workflow_id, inp.turn_id or "-")
        session_servers = await _add_session_servers(host, scope, inp.session_servers)
        skills = host.registry.skills(scope)
        try:
            entries = await _heartbeating(skills.list_skills())
            skill_servers = await _activate_skills(host, scope, inp.manifest, entries, inp.active_skills)
            servers = host.registry.tool_sources(scope)
            results = await _heartbeating(
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
                entries = await _heartbeating(skills.list_skills())
            catalog = await skills.catalog(inp.manifest.host.skills.catalog_bytes)
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
        tools = _tool_specs(dict(zip([s.server for s in servers], listed, strict=True)), inp.manifest)  # type: ignore[attr-defined]
        compiled = CompiledAgent(
            agent=inp.agent,
            models=models,
            instructions="\n\n".join(part for part in (agent.instructions, catalog) if part),
            tools=tools
            + ([delegate_spec(subagents)] if subagents else [])
            + (skill_tools([e.name for e in entries]) if entries else [])
            + [READ_TOOL_OUTPUT],
            temperature=agent.temperature if agent.temperature is not None else defaults.temperature,
            max_tokens=agent.max_tokens if agent.max_tokens is not None else defaults.max_tokens,
            tool_output_chars=agent.limits.tool_output_chars,
            stream=agent.stream,
            commands=commands,
            sources=sorted(
                {f"mcp:{s.server}" for s in servers}  # type: ignore[attr-defined]
                | {f"skills:{r.path}" for r in host.registry.visible(scope, LocalSkillRoot)}
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
        digests = {source: await _heartbeating(host.source_digest(source)) for source in compiled.sources}
        compiled.source_digests = {source: d for source, d in digests.items() if d is not None}
        host.keep(compiled)
        host.track(inp.ref.workflow_id, compiled.sources)
        return compiled

    @activity.defn(name="wolf.read_skill")
    @_serving
    async def read_skill(self, inp: SkillReadInput) -> ToolCallOutput:
        """A skill file as the model may see it: text, or a note for binary files (never decoded)."""
        with observe.skill_read(inp.uri) as read:
            result = await self._read_skill(inp)
            read.done(result)
        return result

    async def _read_skill(self, inp: SkillReadInput) -> ToolCallOutput:
        host = await self._host(inp.ref)
        scope = await host.scope(
            self.hosts.manifests[inp.ref.config_id], inp.agent, inp.ref.workflow_id, inp.turn_id
        )
        try:
            file = await _heartbeating(host.registry.resolve_uri(inp.uri, scope))
        except ExtensionError as exc:
            return ToolCallOutput(content=str(exc), is_error=True)
        except (McpUnavailable, MCPError, TimeoutError) as exc:
            return ToolCallOutput(content=f"reading {inp.uri} failed: {exc}", is_error=True)
        if file.text is None:
            size = len(file.blob or b"")
            return ToolCallOutput(
                content=f"[binary file {inp.uri}: {size} bytes, {file.mime_type}; not shown]"
            )
        content = file.text
        if inp.listing:
            files = await _skill_files(host, scope, inp.uri)
            if files:
                content += "\n\n---\nFiles in this skill (read with read_skill_file): " + ", ".join(files)
        return ToolCallOutput(content=content)

    @activity.defn(name="wolf.expand_command")
    @_serving
    async def expand_command(self, inp: CommandInput) -> CommandOutput:
        """`/name args`: a local skill (with $ARGUMENTS, $1...) first, else an MCP prompt `/server:prompt`."""
        host = await self._host(inp.ref)
        scope = await host.scope(
            self.hosts.manifests[inp.ref.config_id], inp.agent, inp.ref.workflow_id, inp.turn_id
        )
        name, _, rest = inp.text[1:].strip().partition(" ")
        try:
            commands = {c.name: c for c in await _heartbeating(host.registry.commands(scope))}
            command = commands.get(name)
            if command is None:
                known = ", ".join(f"/{c}" for c in sorted(commands)) or "none"
                return CommandOutput(error=f"unknown command /{name} (commands for {inp.agent}: {known})")
            source = host.registry.command_source(command, scope)
            if command.origin.startswith("mcp:"):
                text = await _heartbeating(
                    source.get_command(name, _prompt_arguments(command.arguments, rest))
                )
                return CommandOutput(text=text)
            text = await source.get_command(name, {"ARGUMENTS": rest})
            return CommandOutput(text=text.strip(), skill=name)
        except (ExtensionError, McpUnavailable, MCPError, TimeoutError) as exc:
            return CommandOutput(error=f"/{name} failed: {exc}")

    @activity.defn(name="wolf.model_request")
    @_serving
    async def model_request(self, inp: ModelRequestInput) -> ModelRequestOutput:
        """One model request; the transcript arrives as a delta against this worker's copy."""
        host = await self._host(inp.ref)
        compiled = host.compiled.get(inp.compiled_digest)
        if compiled is None:
            compiled = await _query(inp.ref, COMPILED_QUERY, CompiledAgent)
            if compiled is None or compiled.digest != inp.compiled_digest:
                raise ApplicationError(
                    f"the session's compiled agent does not match the digest {inp.compiled_digest} it was "
                    "sent with",
                    type="CompiledMismatch",
                )
            host.keep(compiled)
        if inp.ref.workflow_id not in host.sessions:
            host.track(inp.ref.workflow_id, compiled.sources)
            manifest = self.hosts.manifests[inp.ref.config_id]
            host.background(host.recheck(manifest, compiled, inp.ref.workflow_id))
        offered = (
            compiled.tools
            if inp.tool_names is None
            else [t for t in compiled.tools if t.name in inp.tool_names]
        )
        limit = compiled.tool_output_chars
        cached = host.transcript(inp.ref.workflow_id, inp.base_len, inp.base_digest) if inp.base_len else None
        cache_hit = cached is not None or not inp.base_len
        if cached is not None:
            base, base_sent = cached.messages, cached.sent
        else:
            base = []
            if inp.base_len:
                # The transcript is append-only, so the workflow's current copy starts with our prefix;
                # checked against the digest the workflow sent, like a cached copy.
                base = (await _query(inp.ref, TRANSCRIPT_QUERY, list[ModelMessage]))[: inp.base_len]
                if len(base) != inp.base_len or chain_digest(EMPTY_DIGEST, base) != inp.base_digest:
                    raise ApplicationError(
                        f"the session's transcript prefix ({len(base)} messages) does not match the digest "
                        "it was sent with",
                        type="TranscriptMismatch",
                    )
            base_sent = _cut_tool_outputs(base, limit)
        messages = [*base, *inp.delta]
        sent = [*base_sent, *_cut_tool_outputs(inp.delta, limit)]
        if not any(
            m is not s for m, s in zip(messages, sent, strict=True)
        ):  # nothing cut: nothing to read on
            offered = [t for t in offered if t.server != SESSION]
        try:
            model = host.model(compiled.models)
            streamed = live.LiveResponse(inp.turn_id, inp.step, host.secrets) if compiled.stream else None
            response = await _heartbeating(
                live.request(
                    model,
                    _with_instructions(sent, compiled.instructions),
                    _settings(compiled),
                    ModelRequestParameters(
                        function_tools=[
                            ToolDefinition(
                                name=t.name, description=t.description, parameters_json_schema=t.parameters
                            )
                            for t in offered
                        ],
                        output_tools=[
                            ToolDefinition(
                                name=OUTPUT_TOOL,
                                description=OUTPUT_DESCRIPTION,
                                parameters_json_schema=inp.output,
                                kind="output",
                            )
                        ]
                        if inp.output
                        else [],
                        allow_text_output=inp.output is None,
                        output_mode="tool" if inp.output else "text",
                    ),
                    streamed,
                ),
                details=(lambda: (streamed.current(),)) if streamed else tuple,
            )
        except ModelHTTPError as exc:
            raise ApplicationError(
                host.secrets.redact(f"model request failed: {exc}"),
                type="ModelHTTPError",
                non_retryable=exc.status_code in _PERMANENT_HTTP,
            ) from None
        except (UserError, LookupError, MissingVariable, PolicyError) as exc:
            message = host.secrets.redact(f"model configuration: {exc}")
            raise ApplicationError(message, type="ConfigError", non_retryable=True) from None
        observe.model_answered(inp.ref.tenant, response, cache_hit)
        # Cache the response as the workflow will see it (after a trip through the data converter),
        # redacted: a provider echoes the model name and its URL, which may be resolved placeholders.
        stored = ModelMessagesTypeAdapter.validate_json(
            host.secrets.redact(ModelMessagesTypeAdapter.dump_json([response]).decode())
        )
        digest = chain_digest(chain_digest(inp.base_digest, inp.delta), stored)
        host.remember(inp.ref.workflow_id, CachedTranscript([*messages, *stored], digest, [*sent, *stored]))
        spec = used_spec(model, compiled.models, response)
        cost = request_cost(response, spec, host.manifest.host.models)
        record(inp.ref.tenant, spec or response.model_name or "unknown", cost)
        return ModelRequestOutput(response=stored[0], cache_hit=cache_hit, model=spec, cost_usd=cost)

    @activity.defn(name="wolf.call_tool")
    @_serving
    async def call_tool(self, inp: ToolCallInput) -> ToolCallOutput:
        """Run one tool: an MCP server's on the host's pooled client, or a plugin's function in this
        worker; failures become errors the model sees.

        What leaves is redacted: a tool (or an error naming a URL) may echo a resolved secret."""
        host = self.hosts.ensure(inp.manifest, inp.ref.tenant) if inp.manifest else await self._host(inp.ref)
        with observe.tool_call(inp.server, inp.tool, inp.arguments) as call:
            result = await self._call_tool(host, inp)
            result = result.model_copy(update={"content": host.secrets.redact(result.content)})
            call.done(result)
        return result

    async def _call_tool(self, host: AgentHost, inp: ToolCallInput) -> ToolCallOutput:
        if inp.server not in host.pool.servers and inp.server.startswith(SESSION_SERVER):
            await _restore_session_server(host, inp)
        elif inp.server not in host.pool.servers:
            await _restore_skill_server(host, self.hosts.manifests[inp.ref.config_id], inp)
        if (functions := host.function_tools(inp.server)) is not None:  # a plugin's: runs right here
            try:
                done = await _heartbeating(functions.call_tool(inp.tool, inp.arguments))
            except ExtensionError as exc:  # the plugin is not loaded on this worker
                return ToolCallOutput(content=str(exc), is_error=True)
            return ToolCallOutput(content=_render(done), is_error=bool(done.is_error))
        cap = host.mcp.get(inp.server)
        version = cap.version if cap else 0
        try:
            on_progress, progress = live.tool_progress(inp.call_id, host.secrets)
            result = await _heartbeating(
                host.pool.call_tool(inp.server, inp.tool, inp.arguments, on_progress), details=progress
            )
        except McpUnavailable as exc:
            return ToolCallOutput(content=str(exc), is_error=True)
        except MCPError as exc:
            return ToolCallOutput(content=f"MCP error {exc.code}: {exc}", is_error=True)
        except TimeoutError:
            timeout = host.pool.servers[inp.server].call_timeout
            return ToolCallOutput(content=f"tool call timed out after {timeout:g}s", is_error=True)
        except (ValidationError, RuntimeError) as exc:  # an answer the MCP client cannot parse
            return ToolCallOutput(
                content=f"MCP server {inp.server!r} sent an unusable answer: {exc}", is_error=True
            )
        # A server announces a list change before it answers: the SDK spawns the notification's
        # handler (which bumps the cap's version) before it hands over the answer, so it has run.
        changed = cap is not None and cap.version != version
        return ToolCallOutput(content=_render(result), is_error=bool(result.is_error), changed=changed)

    @activity.defn(name="wolf.release_session")
    async def release_session(self, ref: HostRef) -> None:
        """The session closed: this worker's host forgets it, and the MCP servers its client brought
        (SESSION scope) stop."""
        check_tenant(ref, self.hosts.tenant)
        host = self.hosts.find(ref.config_id, ref.tenant)
        if host is not None:
            host.forget(ref.workflow_id)

    async def _host(self, ref: HostRef) -> AgentHost:
        host = await self.hosts.get(ref.config_id, ref.tenant, lambda: _query(ref, MANIFEST_QUERY, Manifest))
        metrics.gauge(metrics.HOSTS, len(self.hosts.hosts()))
        return host


async def _commands(host: AgentHost, scope: Scope) -> dict[str, str]:
    """The session's slash commands (`/name` -> description) for clients to offer; a server that
    cannot list its prompts costs its commands, not the compile."""
    try:
        return {f"/{c.name}": c.description for c in await _heartbeating(host.registry.commands(scope))}
    except (ExtensionError, McpUnavailable, MCPError, TimeoutError) as exc:
        activity.logger.warning("listing slash commands failed: %s", host.secrets.redact(str(exc)))
        return {}


async def _query(ref: HostRef, name: str, result_type: type[T]) -> T:
    handle = activity.client().get_workflow_handle(ref.workflow_id)
    return await handle.query(name, result_type=result_type)


async def _heartbeating(
    work: Awaitable[T], interval: float = 0.1, details: Callable[[], tuple[object, ...]] = tuple
) -> T:
    """Await `work` while heartbeating, so a cancel (interrupt) reaches this activity promptly.

    Each heartbeat carries `details()`: a heartbeat replaces the last one's details, and followers
    read live output from them."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            if not activity.info().is_local:
                activity.heartbeat(*details())
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _with_instructions(messages: list[ModelMessage], instructions: str) -> list[ModelMessage]:
    """pydantic-ai reads instructions from the last request; set them there without touching the cache."""
    if not instructions:
        return messages
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(request := messages[i], ModelRequest):
            out = list(messages)
            out[i] = dataclasses.replace(request, instructions=instructions)
            return out
    return messages


def _settings(compiled: CompiledAgent) -> ModelSettings:
    settings = ModelSettings()
    if compiled.temperature is not None:
        settings["temperature"] = compiled.temperature
    if compiled.max_tokens is not None:
        settings["max_tokens"] = compiled.max_tokens
    return settings


async def _activate_skills(
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
            label = _skill_server_label(entry.name, server, config)
            host.registry.link(f"skill:{entry.name}", f"mcp:{label}")
            await host.pool.add_server(label, config, trusted=False)
            host.registry.add(host.mcp_server(label), scope)
            servers[label] = config
    return servers


def _skill_server_label(skill: str, server: str, config: McpServerConfig) -> str:
    """`<skill>/<server>@<digest of its config>`: declared server names cannot hold `/`, so a skill's
    server never takes a declared one's place; the digest keeps same-named skills from different
    folders from sharing a connection, and binds the label to the exact config."""
    return f"{skill}/{server}@{hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:8]}"


SESSION_SERVER = "session:"
"""Labels of the servers a session's client brought: `session:<name>@<digest>` (declared names hold
no `:`), so a session's server never takes a declared one's place."""


def session_server_label(workflow_id: str, name: str, config: McpServerConfig) -> str:
    """The digest binds the label to one session and the exact config: no two sessions share a
    process, and a changed config is a new server."""
    digest = hashlib.sha256(f"{workflow_id}\n{config.model_dump_json()}".encode()).hexdigest()[:8]
    return f"{SESSION_SERVER}{name}@{digest}"


async def _add_session_servers(
    host: AgentHost, scope: Scope, servers: dict[str, McpServerConfig]
) -> dict[str, McpServerConfig]:
    """Register the servers the session's client brought at SESSION scope (no other session sees
    them); they start on the host's pool under the worker policy, and `${VAR}` never resolves in them."""
    session = Scope(ScopeLevel.SESSION, scope.agent_name, scope.session_id)
    added: dict[str, McpServerConfig] = {}
    for name, config in servers.items():
        label = session_server_label(scope.session_id, name, config)
        await host.pool.add_server(label, config, trusted=False)
        host.registry.add(host.mcp_server(label), session)
        added[label] = config
    return added


async def _restore_session_server(host: AgentHost, inp: ToolCallInput) -> None:
    """A worker that did not compile this session's agent takes the server's config from the
    session's compiled agent, if the label's digest matches it."""
    compiled = await _query(inp.ref, COMPILED_QUERY, CompiledAgent)
    config = compiled.session_servers.get(inp.server)
    name = inp.server.removeprefix(SESSION_SERVER).rpartition("@")[0]
    if config is not None and session_server_label(inp.ref.workflow_id, name, config) == inp.server:
        await host.pool.add_server(inp.server, config, trusted=False)


async def _restore_skill_server(host: AgentHost, manifest: Manifest, inp: ToolCallInput) -> None:
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
        if config is not None and _skill_server_label(skill, server, config) == inp.server:
            await host.pool.add_server(inp.server, config, trusted=False)
            return


async def _skill_files(host: AgentHost, scope: Scope, uri: str) -> list[str]:
    for root in host.registry.visible(scope, LocalSkillRoot):
        for entry in await root.list_skills():
            if entry.uri == uri:
                return root.files(entry.name)
    return []


def _prompt_arguments(names: tuple[object, ...], rest: str) -> dict[str, str]:
    """`key=value` words by name, other words in the prompt's declared argument order."""
    try:
        words = shlex.split(rest)
    except ValueError:
        words = rest.split()
    named = dict(w.split("=", 1) for w in words if "=" in w)
    positional = [w for w in words if "=" not in w]
    order = [a.name for a in names if a.name not in named]  # type: ignore[attr-defined]
    return {**dict(zip(order, positional, strict=False)), **named}


_BUILT_IN = ("delegate", "load_skill", "read_skill_file", READ_TOOL_OUTPUT.name)


def _tool_specs(listed: dict[str, list[ToolEntry]], manifest: Manifest) -> list[ToolSpec]:
    """Model-facing names: the MCP name, prefixed with the server where two servers (or a built-in) clash.
    Safe to repeat: as the manifest's `repeat_safe` says for the server, else as the server annotates."""
    counts: dict[str, int] = dict.fromkeys(_BUILT_IN, 1)
    for tools in listed.values():
        for tool in tools:
            counts[tool.name] = counts.get(tool.name, 0) + 1
    specs = []
    for server, tools in listed.items():
        for tool in tools:
            name = tool.name if counts[tool.name] == 1 else f"{server}__{tool.name}"
            specs.append(
                ToolSpec(
                    name=_TOOL_NAME.sub("_", name)[:64],
                    server=server,
                    tool=tool.name,
                    description=tool.description,
                    parameters=dict(tool.parameters),
                    repeat_safe=_repeat_safe(manifest.host.mcp_servers.get(server), tool),
                )
            )
    return specs


def _repeat_safe(config: McpServerConfig | None, tool: ToolEntry) -> bool:
    if config is None or config.repeat_safe is None:
        return tool.repeat_safe
    return any(fnmatch.fnmatchcase(tool.name, pattern) for pattern in config.repeat_safe)


def _cut_tool_outputs(messages: list[ModelMessage], limit: int) -> list[ModelMessage]:
    """What the model is sent: tool results longer than `limit` cut, with a note on how to read on (the
    messages with nothing too long are the same objects). The transcript keeps them whole."""
    out = list(messages)
    for i, message in enumerate(messages):
        if not isinstance(message, ModelRequest) or not any(_too_long(p, limit) for p in message.parts):
            continue
        parts = [
            dataclasses.replace(p, content=_cut(p, limit)) if _too_long(p, limit) else p  # type: ignore[arg-type]
            for p in message.parts
        ]
        out[i] = dataclasses.replace(message, parts=parts)
    return out


def _too_long(part: object, limit: int) -> bool:
    return isinstance(part, ToolReturnPart) and isinstance(part.content, str) and len(part.content) > limit


def _cut(part: ToolReturnPart, limit: int) -> str:
    content = str(part.content)
    return (
        f"{content[:limit]}\n\n[cut: {limit} of {len(content)} characters shown; read on with "
        f"read_tool_output(call_id={part.tool_call_id!r}, offset={limit})]"
    )


def _render(result: mcp_types.CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", exclude_none=True)))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)
