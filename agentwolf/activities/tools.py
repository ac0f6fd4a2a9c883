"""Tools as the model sees them: specs with model-facing names, tool outputs cut to the agent's limit
(the transcript keeps them whole), MCP results rendered as text."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
from collections import Counter

import mcp_types
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart

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


def cut_tool_outputs(messages: list[ModelMessage], limit: int, start: int = 0) -> list[ModelMessage]:
    """What the model is sent: tool results longer than `limit` cut, with a note on how to read on (the
    messages with nothing too long are the same objects). The transcript keeps them whole.
    `start`: the first message's position in the transcript, which the note names."""
    out = list(messages)
    for i, message in enumerate(messages):
        if not isinstance(message, ModelRequest) or not any(_too_long(p, limit) for p in message.parts):
            continue
        ids = Counter(p.tool_call_id for p in message.parts if isinstance(p, ToolReturnPart))
        parts = list(message.parts)
        for j, part in enumerate(parts):
            if isinstance(part, ToolReturnPart) and _too_long(part, limit):
                index = j if ids[part.tool_call_id] > 1 else None
                parts[j] = dataclasses.replace(part, content=_cut(part, limit, start + i, index))  # type: ignore[arg-type]
        out[i] = dataclasses.replace(message, parts=parts)
    return out


def _too_long(part: object, limit: int) -> bool:
    return isinstance(part, ToolReturnPart) and isinstance(part.content, str) and len(part.content) > limit


def _cut(part: ToolReturnPart, limit: int, message: int, index: int | None) -> str:
    """The note names the result by call id and its message's position in the transcript (models
    repeat call ids across steps), and by its part's `index` where the id repeats in that message."""
    content = str(part.content)
    where = f"message={message}" + (f", part={index}" if index is not None else "")
    return (
        f"{content[:limit]}\n\n[cut: {limit} of {len(content)} characters shown; read on with "
        f"read_tool_output(call_id={part.tool_call_id!r}, offset={limit}, {where})]"
    )


def render(result: mcp_types.CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", exclude_none=True)))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts)
