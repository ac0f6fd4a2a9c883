"""A tool call on an MCP server, from the workflow's side: which server answers it (the compiled
skill and session servers, then the host's), the `wolf.call_tool` activity (a local one for a
known-fast tool that is safe to repeat), each tool's last duration that decides it, and what the
answer says besides its content (a cut call, changed lists). The router (tools.py) sends here
what its rules let through.

Imported passed through, like tools.py (an import-linter contract keeps clock, randomness,
environment and I/O modules out of it).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic_ai.messages import ToolCallPart
from temporalio import workflow

from agentwolf.config.manifest import McpServerConfig
from agentwolf.workflows.contracts import CUT_REPEATED, ToolCallInput, ToolCallOutput, ToolSpec
from agentwolf.workflows.session.core import SessionCore
from agentwolf.workflows.session.turn import (
    GONE_SERVERS,
    HEARTBEAT_TIMEOUT,
    LOCAL_TOOL_CALLS,
    SAFE_LOCAL_CALLS,
    TOOL_OWN_TIME,
    TOOL_RETRY,
    short,
)


class McpCalls:
    """Runs a call on its MCP server and remembers how long each tool took (workflow time, or the
    worker's own measure: replay-safe)."""

    def __init__(self, core: SessionCore) -> None:
        self.core = core
        self.tool_ms: dict[str, int] = {}
        """Each tool's last call duration: a known-fast one takes the local path."""

    async def call(self, spec: ToolSpec, call: ToolCallPart, arguments: dict[str, Any]) -> ToolCallOutput:
        """The call's answer; a server that left the session is said to the model."""
        server = self._server(spec.server)
        if server is None:  # a session server the client replaced or released
            if not workflow.patched(GONE_SERVERS):
                raise KeyError(spec.server)  # what runs before the patch did (the turn's task died)
            return ToolCallOutput(
                content=f"{call.tool_name} is gone: its MCP server {spec.server!r} left this session; "
                "use the tools offered now",
                is_error=True,
            )
        inp = ToolCallInput(
            ref=self.core.ref(),
            server=spec.server,
            tool=spec.tool,
            arguments=arguments,
            call_id=call.tool_call_id,
            agent=self.core.inp.agent,
            turn_id=self.core.running.turn_id or "",
            repeat_safe=spec.repeat_safe,
            name=call.tool_name,
        )
        started = workflow.now()
        result = await self._run(inp, server, fast=self._fast(spec, call.tool_name, server))
        # The call's own time when the worker measured it: the round trip also holds the queueing of
        # a busy fleet, which kept known-fast tools off the local path exactly when it saves most.
        if result.ran_ms is not None and workflow.patched(TOOL_OWN_TIME):
            self.tool_ms[call.tool_name] = result.ran_ms
        else:
            self.tool_ms[call.tool_name] = int((workflow.now() - started).total_seconds() * 1000)
        self._said(spec, call, result)
        return result

    def _server(self, name: str) -> McpServerConfig | None:
        """The server's config: a skill's or the session's (compiled in), else the host's."""
        compiled = self.core.compiled
        server = compiled.skill_servers.get(name) or compiled.session_servers.get(name) if compiled else None
        return server or self.core.inp.manifest.host.mcp_servers.get(name)

    def _fast(self, spec: ToolSpec, tool_name: str, server: McpServerConfig) -> bool:
        """A known-fast tool runs as a local activity. Its result is durable only when the workflow
        task completes (a worker lost meanwhile runs the call again): only tools safe to repeat."""
        last_ms = self.tool_ms.get(tool_name)
        fast = last_ms is not None and last_ms < server.fast_call_ms and workflow.patched(LOCAL_TOOL_CALLS)
        if fast and workflow.patched(SAFE_LOCAL_CALLS):
            fast = spec.repeat_safe
        return fast

    async def _run(self, inp: ToolCallInput, server: McpServerConfig, *, fast: bool) -> ToolCallOutput:
        summary = short(f"call_tool {inp.server}.{inp.tool}")
        timeout = timedelta(seconds=server.call_timeout + 30)
        if fast:
            # A local activity skips the server round trip (its input is not recorded, so it
            # carries the manifest). Signals wait for it, which is fine at this speed.
            return await workflow.execute_local_activity(
                "wolf.call_tool",
                inp.model_copy(update={"manifest": self.core.inp.manifest}),
                result_type=ToolCallOutput,
                start_to_close_timeout=timeout,
                retry_policy=TOOL_RETRY,
                summary=summary,
            )
        return await workflow.execute_activity(
            "wolf.call_tool",
            inp,
            result_type=ToolCallOutput,
            start_to_close_timeout=timeout,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=TOOL_RETRY,
            summary=summary,
        )

    def _said(self, spec: ToolSpec, call: ToolCallPart, result: ToolCallOutput) -> None:
        """What the answer tells besides its content: a retry after a lost worker (whether the call
        ran again), a server whose lists changed (the agent recompiles before its next request)."""
        if result.cut is not None:
            self.core.publish(
                "tool_call_cut",
                text=CUT_REPEATED if result.cut == "repeated" else result.content,
                tool=call.tool_name,
                call_id=call.tool_call_id,
                outcome=result.cut,
            )
        if result.changed:
            self.core.running.stale.mark(f"{spec.server} changed its lists during {spec.tool}")
            self.core.publish(
                "extensions_changed",
                text=self.core.running.stale.reason,
                tool=call.tool_name,
                call_id=call.tool_call_id,
            )
