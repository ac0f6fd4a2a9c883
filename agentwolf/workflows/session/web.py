"""The web capability in the workflow: `web_fetch` and an HTTP `web_search` run as `wolf.web`
activities on the worker, after the session's rules and approvals (the tool router, tools.py), like
any tool call.

Imported passed through, like tools.py: it calls only `workflow.*` and deterministic helpers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

from agentwolf.config.manifest import AgentConfig, WebCapability, WebSettings
from agentwolf.workflows.contracts import HostRef, ToolCallOutput, ToolSpec
from agentwolf.workflows.session.turn import HEARTBEAT_TIMEOUT, TOOL_RETRY, short
from agentwolf.workflows.web_tools import WebCall

WEB_TOOLS = "web-tools"  # patch: web_fetch and web_search run as `wolf.web` activities


def web_settings(agent: AgentConfig | None) -> WebSettings | None:
    """The agent's web capability, if it has one."""
    if agent is None:
        return None
    return next((c.web for c in agent.capabilities if isinstance(c, WebCapability)), None)


async def run_web(
    ref: HostRef, spec: ToolSpec, arguments: dict[str, Any], web: WebSettings
) -> ToolCallOutput:
    """One web tool call, permitted already."""
    return await workflow.execute_activity(
        "wolf.web",
        WebCall(ref=ref, tool=spec.tool, arguments=arguments, settings=web),
        result_type=ToolCallOutput,
        start_to_close_timeout=timedelta(seconds=web.timeout_s + 30),
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        retry_policy=TOOL_RETRY,
        summary=short(f"{spec.tool} {next(iter(arguments.values()), '')}"),
    )
