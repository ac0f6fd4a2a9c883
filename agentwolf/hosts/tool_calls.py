"""A tool call on the host, answered whole: the `wolf.call_tool` activity's one call.

The host brings back what a worker restart lost (a session's or a skill's MCP server), runs a
plugin's function right here or an MCP server's tool on the pooled client, and says a failure the
model should see as the call's output. The activity keeps what is Temporal's: heartbeats, the cut
of a lost attempt, redaction and the caller check (activities/session.py)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import mcp_types
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agentwolf.config.manifest import Manifest
from agentwolf.config.session_servers import SESSION_SERVER
from agentwolf.extensions.pool import McpUnavailable
from agentwolf.extensions.types import ExtensionError
from agentwolf.hosts.host import AgentHost
from agentwolf.hosts.servers import restore_session_server, restore_skill_server
from agentwolf.workflows.contracts import CompiledAgent, ToolCallInput, ToolCallOutput


async def call_tool(
    host: AgentHost,
    inp: ToolCallInput,
    manifest: Manifest,
    compiled: Callable[[], Awaitable[CompiledAgent]],
    on_progress: ProgressFnT | None = None,
) -> ToolCallOutput:
    """Run one tool call; `manifest` is the session's config (a skill's server comes from it),
    `compiled` fetches the session's compiled agent (its client's servers are listed there), asked
    only when a session server must be restored."""
    if inp.server not in host.pool.servers and inp.server.startswith(SESSION_SERVER):
        await restore_session_server(host, await compiled(), inp)
    elif inp.server not in host.pool.servers:
        await restore_skill_server(host, manifest, inp)
    if (functions := host.function_tools(inp.server)) is not None:  # a plugin's: runs right here
        try:
            done = await functions.call_tool(inp.tool, inp.arguments)
        except ExtensionError as exc:  # the plugin is not loaded on this worker
            return ToolCallOutput(content=str(exc), is_error=True)
        return ToolCallOutput(content=render(done), is_error=bool(done.is_error))
    cap = host.mcp.get(inp.server)
    version = cap.version if cap else 0
    try:
        result = await host.pool.call_tool(inp.server, inp.tool, inp.arguments, on_progress)
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
    return ToolCallOutput(content=render(result), is_error=bool(result.is_error), changed=changed)


def render(result: mcp_types.CallToolResult) -> str:
    """A tool's result as the text the model reads: text blocks as they are, other blocks (and a
    result with only structured content) as JSON."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", exclude_none=True)))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)
