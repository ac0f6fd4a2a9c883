"""Tools as the model sees them: specs with model-facing names (their results are rendered as text by
hosts/tool_calls.py, cut to the agent's limit by `compaction.cut_tool_outputs`; the transcript keeps
them whole)."""

from __future__ import annotations

import fnmatch
import re

from agentwolf.config.manifest import Manifest, McpServerConfig
from agentwolf.extensions.types import ToolEntry
from agentwolf.workflows.contracts import READ_TOOL_OUTPUT, RECALL_SPEC, ToolSpec

_TOOL_NAME = re.compile(r"[^a-zA-Z0-9_-]")

_BUILT_IN = ("delegate", "load_skill", "read_skill_file", READ_TOOL_OUTPUT.name, RECALL_SPEC.name)


def tool_specs(listed: dict[str, list[ToolEntry]], manifest: Manifest) -> list[ToolSpec]:
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
