"""The web capability's tools as the model sees them, and what a call sends to `wolf.web`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agentwolf.config.manifest import WebSettings
from agentwolf.workflows.contracts import HostRef, ToolSpec

WEB = "@web"
"""The `server` of `web_fetch` and an HTTP `web_search`: they run in the worker (`wolf.web`)."""

DEFAULT_CHARS = 20_000


def web_tools(settings: WebSettings) -> list[ToolSpec]:
    """`web_fetch` and `web_search` as the settings offer them; a search through an MCP server is
    that server's tool under the name `web_search` (its calls are ordinary MCP calls)."""
    tools = []
    if settings.fetch:
        tools.append(
            ToolSpec(
                name="web_fetch",
                server=WEB,
                tool="web_fetch",
                description="Fetch a web page (HTML, plain text or JSON) and return it as Markdown.",
                parameters={
                    "type": "object",
                    "properties": {
                        "url": {"type": "string", "description": "An http:// or https:// URL."},
                        "max_chars": {"type": "integer", "minimum": 100, "default": DEFAULT_CHARS},
                    },
                    "required": ["url"],
                },
                repeat_safe=True,
            )
        )
    if (search := settings.search) is not None:
        tools.append(
            ToolSpec(
                name="web_search",
                server=search.mcp or WEB,
                tool=search.tool if search.mcp else "web_search",
                description="Search the web: results as title, URL and snippet.",
                parameters={
                    "type": "object",
                    "properties": {"query": {"type": "string"}},
                    "required": ["query"],
                },
                repeat_safe=True,
            )
        )
    return tools


class WebCall(BaseModel):
    ref: HostRef
    tool: str
    arguments: dict[str, Any]
    settings: WebSettings
