"""`wolf.web`: the web capability's calls (extensions/web.py), under the worker's policy. Safe to
run twice: fetches and searches only read."""

from __future__ import annotations

from temporalio import activity

from agentwolf.access import check_caller
from agentwolf.activities.session_io import heartbeating
from agentwolf.extensions import web
from agentwolf.hosts.host_registry import HostRegistry
from agentwolf.workflows.contracts import ToolCallOutput
from agentwolf.workflows.web_tools import DEFAULT_CHARS, WebCall


class WebActivities:
    def __init__(self, hosts: HostRegistry) -> None:
        self.hosts = hosts

    @activity.defn(name="wolf.web")
    async def web(self, inp: WebCall) -> ToolCallOutput:
        check_caller(inp.ref.workflow_id, inp.ref.tenant, self.hosts.tenant)
        secrets = self.hosts.policy.secrets_for(inp.ref.tenant)
        args, settings = inp.arguments, inp.settings
        try:
            if inp.tool == "web_fetch":
                url, chars = args.get("url"), args.get("max_chars", DEFAULT_CHARS)
                if not isinstance(url, str) or not isinstance(chars, int) or chars < 1:
                    return ToolCallOutput(
                        content="web_fetch needs `url` (and a positive `max_chars`)", is_error=True
                    )
                text = await heartbeating(web.fetch(url, chars, settings, self.hosts.policy))
            elif inp.tool == "web_search" and settings.search is not None:
                query = args.get("query")
                if not isinstance(query, str) or not query.strip():
                    return ToolCallOutput(content="web_search needs `query`", is_error=True)
                text = await heartbeating(
                    web.search(query, settings.search, settings.timeout_s, self.hosts.policy, secrets)
                )
            else:
                return ToolCallOutput(content=f"no web tool {inp.tool!r} here", is_error=True)
        except web.WebError as exc:
            return ToolCallOutput(content=secrets.redact(str(exc)), is_error=True)
        return ToolCallOutput(content=secrets.redact(text))
