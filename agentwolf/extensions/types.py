"""What extensions provide, as domain protocols, and the frozen entries they hand out (RFC-0051).

A capability implements any mix of the protocols; the registry finds them with `isinstance`.
Entries are plain frozen data: they cross into compile results and events, never live objects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable


class ExtensionError(Exception):
    """A request an extension refuses (bad URI, traversal, oversized file, unknown name): the message says
    why."""


@dataclass(frozen=True, slots=True)
class SkillEntry:
    """One skill as the catalog lists it. Identity is (origin, uri): two origins never shadow silently."""

    name: str
    description: str
    uri: str
    """`skill://<skill-path>/SKILL.md`."""
    origin: str
    """Where it comes from: `local:<root>` or `mcp:<server>`."""
    allowed_tools: tuple[str, ...] | None = None
    """Tool name patterns (fnmatch) the agent may use while the skill is active; None = no limit."""
    mcp_servers: tuple[str, ...] = ()
    """Names of the MCP servers the skill's frontmatter declares (they run on the host pool)."""
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SkillFile:
    """A file read from a skill: text, or bytes for binary files (never decoded as instructions)."""

    uri: str
    text: str | None = None
    blob: bytes | None = None
    mime_type: str = "text/markdown"


@dataclass(frozen=True, slots=True)
class ToolEntry:
    name: str
    server: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    repeat_safe: bool = False
    """The server says the tool is read-only or idempotent (MCP tool annotations): running it twice
    does no harm, so it may take the local-activity fast path."""


@dataclass(frozen=True, slots=True)
class ResourceEntry:
    uri: str
    name: str
    server: str
    description: str = ""
    mime_type: str | None = None


@dataclass(frozen=True, slots=True)
class CommandArgument:
    name: str
    description: str = ""
    required: bool = False


@dataclass(frozen=True, slots=True)
class CommandEntry:
    """A slash command: `/name` for local skills, `/server:prompt` for MCP prompts."""

    name: str
    description: str
    origin: str
    arguments: tuple[CommandArgument, ...] = ()


ChangeKind = Literal["skills", "tools", "resources", "prompts"]


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """Something an agent can reach changed: a skill root's files, or an MCP server's lists."""

    source: str
    """`skills:<root>` or `mcp:<server>`: matches `CompiledAgent.sources`."""
    kind: ChangeKind
    detail: str = ""


@runtime_checkable
class SkillResource(Protocol):
    async def list_skills(self) -> list[SkillEntry]: ...

    async def read_skill(self, uri: str) -> SkillFile: ...

    async def skill_exists(self, uri: str) -> bool: ...


@runtime_checkable
class McpResource(Protocol):
    async def list_tools(self) -> list[ToolEntry]: ...

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any: ...

    async def list_resources(self) -> list[ResourceEntry]: ...

    async def read_resource(self, uri: str) -> SkillFile: ...

    async def resource_exists(self, uri: str) -> bool: ...


@runtime_checkable
class CommandResource(Protocol):
    async def list_commands(self) -> list[CommandEntry]: ...

    async def get_command(self, name: str, arguments: dict[str, str]) -> str:
        """The prompt text the command expands to."""
        ...


@runtime_checkable
class ChangeObservable(Protocol):
    def on_change(self) -> AsyncIterator[ChangeEvent]: ...
