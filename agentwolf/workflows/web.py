"""The web capability in the workflow: `web_fetch` and an HTTP `web_search` run as `wolf.web`
activities on the worker, after the session's rules and approvals, like any tool call.

Imported passed through, like tools.py: it calls only `workflow.*` and deterministic helpers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic_ai.messages import ToolCallPart
from temporalio import workflow

from agentwolf.config.manifest import WebCapability
from agentwolf.workflows.contracts import CompiledAgent, ToolCallOutput, ToolOutcome, ToolSpec
from agentwolf.workflows.tools import ToolRouting
from agentwolf.workflows.turn import HEARTBEAT_TIMEOUT, TOOL_RETRY, short
from agentwolf.workflows.web_tools import WEB, WebCall

WEB_TOOLS = "web-tools"  # patch: web_fetch and web_search run as `wolf.web` activities


class WebRouting(ToolRouting):
    """Tool routing that also runs the web tools."""

    async def _route_call(
        self,
        compiled: CompiledAgent,
        spec: ToolSpec | None,
        call: ToolCallPart,
        index: int,
        key: str,
        arguments: dict[str, Any],
    ) -> tuple[ToolCallOutput, ToolOutcome | None]:
        agent = self.inp.manifest.agents.get(self.inp.agent)
        web = (
            next((c.web for c in agent.capabilities if isinstance(c, WebCapability)), None) if agent else None
        )
        if spec is None or spec.server != WEB or web is None or not workflow.patched(WEB_TOOLS):
            return await super()._route_call(compiled, spec, call, index, key, arguments)
        refusal = await self._permission(compiled, spec, call, key, arguments)
        if refusal is not None:
            return ToolCallOutput(content=refusal, is_error=True), ToolOutcome.DENIED
        result = await workflow.execute_activity(
            "wolf.web",
            WebCall(ref=self._ref(), tool=spec.tool, arguments=arguments, settings=web),
            result_type=ToolCallOutput,
            start_to_close_timeout=timedelta(seconds=web.timeout_s + 30),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=TOOL_RETRY,
            summary=short(f"{spec.tool} {next(iter(arguments.values()), '')}"),
        )
        return result, None
