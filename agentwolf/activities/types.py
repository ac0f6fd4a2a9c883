"""What crosses the workflow/activity boundary: small pydantic models, no live objects.

The transcript digest is the contract behind delta transcripts: the workflow and the worker chain
the same hash over the same serialized messages, so a worker can prove its cached copy is the
workflow's prefix before appending only the new messages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse

from agentwolf.config.manifest import Manifest

EMPTY_DIGEST = ""


def chain_digest(digest: str, messages: Sequence[ModelMessage]) -> str:
    """Extend `digest` with `messages`, one message at a time (so any split gives the same hash)."""
    for message in messages:
        body = ModelMessagesTypeAdapter.dump_json([message])
        digest = hashlib.sha256(digest.encode() + body).hexdigest()
    return digest


class HostRef(BaseModel):
    """Which host (config identity, tenant) serves an activity, and the session asking."""

    config_id: str
    tenant: str
    workflow_id: str


class ToolSpec(BaseModel):
    """One tool as the model sees it (`name`) and where it runs (`server`, `tool`)."""

    name: str
    server: str
    tool: str
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}


SUBAGENTS = "@subagents"
"""The `server` of the `delegate` tool: the workflow runs it as child sessions, not over MCP."""


def delegate_spec(agents: list[str]) -> ToolSpec:
    return ToolSpec(
        name="delegate",
        server=SUBAGENTS,
        tool="delegate",
        description="Hand a self-contained task to another agent and get its final answer back. "
        "Several delegate calls in one step run in parallel.",
        parameters={
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": sorted(set(agents))},
                "task": {"type": "string", "description": "Everything the agent needs to know."},
            },
            "required": ["agent", "task"],
        },
    )


class CompiledAgent(BaseModel):
    """An agent ready to run: concrete model chain, instructions, tools, settings."""

    agent: str
    models: list[str]
    instructions: str
    tools: list[ToolSpec]
    temperature: float | None = None
    max_tokens: int | None = None
    sources: list[str] = []
    """What the tools and skills came from (`mcp:<server>`, `skills:<root>`): changes to these recompile."""

    @property
    def digest(self) -> str:
        return hashlib.sha256(
            json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()
        ).hexdigest()[:16]

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


class CompileInput(BaseModel):
    ref: HostRef
    manifest: Manifest
    agent: str


class ModelRequestInput(BaseModel):
    """The transcript as a delta: `delta` follows the first `base_len` messages (digest `base_digest`)."""

    ref: HostRef
    compiled_digest: str
    base_len: int
    base_digest: str
    delta: list[ModelMessage]


class ModelRequestOutput(BaseModel):
    response: ModelResponse
    cache_hit: bool


class ToolCallInput(BaseModel):
    ref: HostRef
    server: str
    tool: str
    arguments: dict[str, Any]
    call_id: str
    manifest: Manifest | None = None
    """Set for local activities, whose input history never records, so the host is found without a query."""


class ToolCallOutput(BaseModel):
    content: str
    is_error: bool = False


# Queries a session workflow answers so a worker that misses a cache can catch up.
MANIFEST_QUERY = "manifest"
COMPILED_QUERY = "compiled"
TRANSCRIPT_QUERY = "transcript"
