"""The activities a session runs: compile, model_request, compact_summary, call_tool, read_skill,
expand_command.

Thin by design: each looks up the host for (config, tenant) and asks it once (a tool call:
hosts/tool_calls.py; a model request: hosts/model_requests.py, through model_request.py); what stays
here is Temporal's: heartbeats, a lost attempt's cut, redaction, failures as ApplicationError.
Whatever a worker lacks (a manifest it never saw, a compiled agent, a transcript prefix) it fetches
from the session workflow by query, so any worker can serve any step. SessionActivities is where the
worker registers them; beside it: compile.py, model_request.py, tools as the model sees them
(tools.py), heartbeating and queries (session_io.py).
"""

from __future__ import annotations

import functools
import shlex
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from mcp.shared.exceptions import MCPError
from temporalio import activity

from agentwolf.access import check_caller
from agentwolf.activities import capabilities, live, observe
from agentwolf.activities.archive import archive, read_archived
from agentwolf.activities.compile import compile_agent
from agentwolf.activities.model_request import request_model
from agentwolf.activities.session_io import after_lost_attempt, heartbeating, query
from agentwolf.activities.summary import summarise
from agentwolf.config.manifest import Manifest
from agentwolf.extensions.pool import McpUnavailable
from agentwolf.extensions.registry import Scope
from agentwolf.extensions.skills import LocalSkillRoot
from agentwolf.extensions.types import ExtensionError
from agentwolf.hosts.host import AgentHost
from agentwolf.hosts.host_registry import HostRegistry
from agentwolf.hosts.tool_calls import call_tool
from agentwolf.telemetry import metrics
from agentwolf.workflows.archive import ArchivedPart, ArchivedRead, ArchiveInput
from agentwolf.workflows.contracts import (
    COMPILED_QUERY,
    CUT_NOTICE,
    MANIFEST_QUERY,
    CommandInput,
    CommandOutput,
    CompactInput,
    CompiledAgent,
    CompileInput,
    HostRef,
    ModelRequestInput,
    ModelRequestOutput,
    SkillReadInput,
    ToolCallInput,
    ToolCallOutput,
)

T = TypeVar("T")


A = TypeVar(
    "A",
    bound=CompileInput
    | ModelRequestInput
    | ToolCallInput
    | SkillReadInput
    | CommandInput
    | CompactInput
    | ArchiveInput
    | ArchivedRead,
)


def _serving(
    method: Callable[[SessionActivities, A], Awaitable[T]],
) -> Callable[[SessionActivities, A], Awaitable[T]]:
    """Check the tenant, then keep the activity's host from being closed as idle while it runs."""

    @functools.wraps(method)
    async def serve(self: SessionActivities, inp: A) -> T:
        check_caller(inp.ref.workflow_id, inp.ref.tenant, self.hosts.tenant)
        with self.hosts.serving(inp.ref.config_id, inp.ref.tenant):
            return await method(self, inp)

    return serve


class SessionActivities:
    def __init__(self, hosts: HostRegistry) -> None:
        self.hosts = hosts

    @activity.defn(name="wolf.compile")
    @_serving
    async def compile(self, inp: CompileInput) -> CompiledAgent:
        """Agent name + manifest -> model chain, instructions, and the tools its MCP servers list."""
        return await compile_agent(self.hosts.ensure(inp.manifest, inp.ref.tenant), inp)

    @activity.defn(name="wolf.read_skill")
    @_serving
    async def read_skill(self, inp: SkillReadInput) -> ToolCallOutput:
        """A skill file as the model may see it: text, or a note for binary files (never decoded)."""
        with observe.skill_read(inp.uri) as read:
            result = await self._read_skill(inp)
            read.done(result)
        return result

    async def _read_skill(self, inp: SkillReadInput) -> ToolCallOutput:
        host = await self.host(inp.ref)
        scope = await heartbeating(
            host.scope(self.hosts.manifests[inp.ref.config_id], inp.agent, inp.ref.workflow_id, inp.turn_id)
        )
        try:
            file = await heartbeating(host.registry.resolve_uri(inp.uri, scope))
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
        host = await self.host(inp.ref)
        scope = await heartbeating(
            host.scope(self.hosts.manifests[inp.ref.config_id], inp.agent, inp.ref.workflow_id, inp.turn_id)
        )
        name, _, rest = inp.text[1:].strip().partition(" ")
        try:
            commands = {c.name: c for c in await heartbeating(host.registry.commands(scope))}
            command = commands.get(name)
            if command is None:
                known = ", ".join(f"/{c}" for c in sorted(commands)) or "none"
                return CommandOutput(error=f"unknown command /{name} (commands for {inp.agent}: {known})")
            source = host.registry.command_source(command, scope)
            if command.origin.startswith("mcp:"):
                text = await heartbeating(
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
        return await request_model(self.hosts, await self.host(inp.ref), inp)

    @activity.defn(name="wolf.compact_summary")
    @_serving
    async def compact_summary(self, inp: CompactInput) -> ModelRequestOutput:
        """Summarise older turns of the session (tier 2 of compaction, activities/summary.py)."""
        return await summarise(await self.host(inp.ref), inp)

    @activity.defn(name="wolf.archive_transcript")
    @_serving
    async def archive_transcript(self, inp: ArchiveInput) -> ArchivedPart | None:
        """Store older messages of the session in the payload store (activities/archive.py)."""
        return await archive(await self.host(inp.ref), inp)

    @activity.defn(name="wolf.read_archived")
    @_serving
    async def read_archived(self, inp: ArchivedRead) -> ToolCallOutput:
        """A page of a tool result in the session's archived messages (`recall`)."""
        return await read_archived(inp)

    @activity.defn(name="wolf.call_tool")
    @_serving
    async def call_tool(self, inp: ToolCallInput) -> ToolCallOutput:
        """Run one tool: an MCP server's on the host's pooled client, or a plugin's function in this
        worker; failures become errors the model sees.

        What leaves is redacted: a tool (or an error naming a URL) may echo a resolved secret.

        A retry after a lost worker (the call may or may not have run) runs the call again only when
        its tool is safe to repeat; otherwise it answers CUT_NOTICE without running it. Checked
        first, before anything that could fail: an attempt that fails leaves a clean error as the
        last attempt's end, after which the next one would run the call blindly."""
        cut = await after_lost_attempt()
        if cut and not inp.repeat_safe:
            return ToolCallOutput(content=CUT_NOTICE, is_error=True, cut="not_repeated")
        host = self.hosts.ensure(inp.manifest, inp.ref.tenant) if inp.manifest else await self.host(inp.ref)
        with observe.tool_call(inp.server, inp.tool, inp.arguments) as call:
            started = time.monotonic()
            on_progress, progress = live.tool_progress(inp.call_id, inp.name or inp.tool, host.secrets)
            manifest = self.hosts.manifests[inp.ref.config_id]
            result = await heartbeating(
                capabilities.call_tool(  # through the agent's capability hooks, if it has any
                    host,
                    manifest,
                    inp,
                    lambda call: call_tool(
                        host,
                        call,
                        manifest,
                        lambda: query(inp.ref, COMPILED_QUERY, CompiledAgent),
                        on_progress,
                    ),
                ),
                details=progress,
            )
            ran_ms = int((time.monotonic() - started) * 1000)
            result = result.model_copy(
                update={
                    "content": host.secrets.redact(result.content),
                    "ran_ms": ran_ms,
                    "cut": "repeated" if cut else None,
                }
            )
            call.done(result)
        return result

    @activity.defn(name="wolf.release_session")
    async def release_session(self, ref: HostRef) -> None:
        """The session closed: this worker's host forgets it, and the MCP servers its client brought
        (SESSION scope) and its ACP agent's process stop."""
        check_caller(ref.workflow_id, ref.tenant, self.hosts.tenant)
        host = self.hosts.find(ref.config_id, ref.tenant)
        if host is not None:
            if (run := host.acp_runs.pop(ref.workflow_id, None)) is not None:
                await run.close()
            host.forget(ref.workflow_id)

    async def host(self, ref: HostRef) -> AgentHost:
        # A host new to this worker asks the session for its manifest (heartbeat on while it answers).
        host = await heartbeating(
            self.hosts.get(ref.config_id, ref.tenant, lambda: query(ref, MANIFEST_QUERY, Manifest))
        )
        metrics.gauge(metrics.HOSTS, len(self.hosts.hosts()))
        return host


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
