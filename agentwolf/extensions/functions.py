"""FunctionToolsCap: a plugin's Python function tools as one tool source of a host.

A `host.mcp_servers` entry `{plugin: <name>}` names it, so it is listed, named, permitted and called
exactly like an MCP server's tools; only the call differs: the function runs in the worker. Results
take the MCP result shape, so the activity renders both kinds alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

import mcp_types
from pydantic import ValidationError
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.tools import RunContext
from pydantic_core import to_json

from agentwolf.extensions.types import ExtensionError, ResourceEntry, SkillFile, ToolEntry
from agentwolf.plugins import FunctionTool

_NO_CONTEXT = cast(RunContext[Any], None)
"""Registered tools take no RunContext (`PluginRegistry.tool` checks), so none is built."""


class FunctionToolsCap:
    """Implements McpResource for the tools plugin `plugin` registered on this worker (None: not loaded)."""

    def __init__(
        self,
        server: str,
        plugin: str,
        tools: Mapping[str, FunctionTool] | None,
        loaded: list[str],
        call_timeout: float,
    ) -> None:
        self.server = server
        self.source = f"mcp:{server}"
        self.plugin = plugin
        self.tools = tools
        self.loaded = loaded
        self.call_timeout = call_timeout

    def _registered(self) -> Mapping[str, FunctionTool]:
        if self.tools is None:
            raise ExtensionError(
                f"host.mcp_servers.{self.server}: plugin {self.plugin!r} is not loaded on this worker "
                f"(start it with `wolf worker --plugin <module>` or install its entry point; "
                f"loaded: {', '.join(self.loaded) or 'none'})"
            )
        return self.tools

    async def list_tools(self) -> list[ToolEntry]:
        return [
            ToolEntry(
                name, self.server, f.tool.description or "", f.tool.function_schema.json_schema, f.repeat_safe
            )
            for name, f in self._registered().items()
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        """Validate the arguments against the signature and run the function (a sync one in a thread,
        which a timeout or cancel cannot stop: it finishes in the background). What the model could
        fix (bad arguments, `ModelRetry`, an exception) comes back as an error result."""
        function = self._registered().get(name)
        if function is None:
            return _result(f"plugin {self.plugin!r} has no tool {name!r}", error=True)
        schema = function.tool.function_schema
        try:
            validated = schema.validator.validate_python(arguments)
        except ValidationError as exc:
            return _result(f"invalid arguments for {name}: {exc}", error=True)
        try:
            async with asyncio.timeout(self.call_timeout):
                value = await schema.call(validated, _NO_CONTEXT)
            # Rendered here: a result that fails to render must not fail the activity, whose retries
            # would run the function again. What JSON cannot say (an object) shows as its str().
            text = value if isinstance(value, str) else to_json(value, fallback=str).decode()
        except TimeoutError:
            return _result(f"tool call timed out after {self.call_timeout:g}s", error=True)
        except ModelRetry as exc:
            return _result(exc.message, error=True)
        except Exception as exc:  # noqa: BLE001 - the function's failure is the model's to see
            return _result(f"{name} failed: {type(exc).__name__}: {exc}", error=True)
        return _result(text)

    async def list_resources(self) -> list[ResourceEntry]:
        return []

    async def resource_exists(self, uri: str) -> bool:
        return False

    async def read_resource(self, uri: str) -> SkillFile:
        raise ExtensionError(f"plugin tool source {self.server!r} serves no resources")


def _result(text: str, *, error: bool = False) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text=text)], is_error=error)
