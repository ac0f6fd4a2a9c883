"""ExtensionRegistry: every capability a host holds, visible by scope POOL -> AGENT -> SESSION -> TURN.

A query at one level sees its own entries and every outer level's. Inner levels take precedence
(a turn's skill beats the agent's, the agent's beat the pool's); shadowing is reported, never
silent. Capabilities are found by protocol with `isinstance`, so one object may serve skills,
tools and commands at once (an MCP server does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from agentwolf.extensions.safety import parse_skill_uri
from agentwolf.extensions.skills import SkillManagerCap
from agentwolf.extensions.types import (
    ChangeEvent,
    ChangeObservable,
    CommandEntry,
    CommandResource,
    ExtensionError,
    McpResource,
    SkillFile,
    SkillResource,
)

log = logging.getLogger(__name__)

P = TypeVar("P")


class ScopeLevel(IntEnum):
    POOL = 0
    AGENT = 1
    SESSION = 2
    TURN = 3


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a capability is visible, or from where a query looks."""

    level: ScopeLevel
    agent_name: str = ""
    session_id: str = ""
    turn_id: str = ""

    def __post_init__(self) -> None:
        needs = {
            ScopeLevel.AGENT: ("agent_name",),
            ScopeLevel.SESSION: ("agent_name", "session_id"),
            ScopeLevel.TURN: ("agent_name", "session_id", "turn_id"),
        }.get(self.level, ())
        missing = [name for name in needs if not getattr(self, name)]
        if missing:
            raise ValueError(f"a {self.level.name} scope needs {', '.join(missing)}")

    def sees(self, where: Scope) -> bool:
        """Whether a capability registered at `where` is visible from this scope."""
        if where.level > self.level:
            return False
        if where.level >= ScopeLevel.AGENT and where.agent_name != self.agent_name:
            return False
        if where.level >= ScopeLevel.SESSION and where.session_id != self.session_id:
            return False
        return where.level < ScopeLevel.TURN or where.turn_id == self.turn_id


POOL = Scope(ScopeLevel.POOL)


class ExtensionRegistry:
    def __init__(
        self, *, max_composition_depth: int = 3, on_release: Callable[[object], None] | None = None
    ) -> None:
        self.max_composition_depth = max_composition_depth
        self.on_release = on_release
        """Called with each capability whose last entry went, so its owner can stop what only it needed."""
        self._entries: list[tuple[Scope, object]] = []
        self._links: dict[str, set[str]] = {}
        self._changes: asyncio.Queue[ChangeEvent] = asyncio.Queue()
        self._forwarders: dict[int, asyncio.Task[None]] = {}

    # -- registration --------------------------------------------------------------------------

    def add(self, capability: object, scope: Scope = POOL) -> None:
        if any(s == scope and c is capability for s, c in self._entries):
            return
        self._entries.append((scope, capability))
        if isinstance(capability, ChangeObservable) and id(capability) not in self._forwarders:
            self._forwarders[id(capability)] = asyncio.create_task(self._forward(capability))

    def clear_agent(self, agent_name: str) -> None:
        """No session uses this agent (version) any more: drop its AGENT entries."""
        self._drop(lambda s, _: s.level == ScopeLevel.AGENT and s.agent_name == agent_name)

    def clear_session(self, session_id: str) -> None:
        """A session ended: drop its SESSION and TURN entries; POOL and AGENT entries outlive it."""
        self._drop(lambda s, _: s.level >= ScopeLevel.SESSION and s.session_id == session_id)

    def clear_turns(self, session_id: str, *, keep: str = "") -> None:
        """Drop a session's TURN entries (but those of turn `keep`): a turn's extensions end with it."""
        self._drop(
            lambda s, _: s.level == ScopeLevel.TURN and s.session_id == session_id and s.turn_id != keep
        )

    def discard(self, capability: object, scope: Scope) -> None:
        """Drop one entry (a session's replaced server): released if that was the capability's last."""
        self._drop(lambda s, c: s == scope and c is capability)

    def _drop(self, match: Callable[[Scope, object], bool]) -> None:
        dropped = {id(c): c for s, c in self._entries if match(s, c)}
        self._entries = [(s, c) for s, c in self._entries if not match(s, c)]
        still = {id(c) for _, c in self._entries}
        for capability in (c for key, c in dropped.items() if key not in still):
            if (task := self._forwarders.pop(id(capability), None)) is not None:
                task.cancel()
            self._unlink(getattr(capability, "source", ""))
            if self.on_release is not None:
                self.on_release(capability)

    # -- queries -------------------------------------------------------------------------------

    def visible(self, scope: Scope, protocol: type[P] | None = None) -> list[P]:
        """Capabilities visible from `scope`, innermost level first (registration order within a level)."""
        found: list[P] = []
        for level in sorted(ScopeLevel, reverse=True):
            for where, capability in self._entries:
                wanted = protocol is None or isinstance(capability, protocol)
                if (
                    where.level == level
                    and scope.sees(where)
                    and wanted
                    and all(capability is not f for f in found)
                ):
                    found.append(capability)  # type: ignore[arg-type]
        return found

    def skills(self, scope: Scope) -> SkillManagerCap:
        """The merged skill view for `scope`: inner levels win, shadowed duplicates are reported."""
        return SkillManagerCap(self.visible(scope, SkillResource))

    def tool_sources(self, scope: Scope) -> list[McpResource]:
        return self.visible(scope, McpResource)

    async def commands(self, scope: Scope) -> list[CommandEntry]:
        """Slash commands: local skills first (only those that won their name), then MCP prompts
        (`server:prompt`)."""
        effective = {(e.origin, e.name) for e in await self.skills(scope).list_skills()}
        local: list[CommandEntry] = []
        remote: list[CommandEntry] = []
        for source in self.visible(scope, CommandResource):
            listed = await source.list_commands()
            if isinstance(source, McpResource):
                remote.extend(listed)
            else:
                local.extend(c for c in listed if (c.origin, c.name) in effective)
        seen: set[str] = set()
        out = []
        for command in [*local, *remote]:
            if command.name not in seen:
                seen.add(command.name)
                out.append(command)
        return out

    def command_source(self, command: CommandEntry, scope: Scope) -> CommandResource:
        """The capability that serves `command` (by origin)."""
        for source in self.visible(scope, CommandResource):
            if command.origin in (getattr(source, "origin", None), getattr(source, "source", None)):
                return source
        raise ExtensionError(f"/{command.name}: its source {command.origin} is no longer visible")

    async def resolve_uri(self, uri: str, scope: Scope) -> SkillFile:
        """Read `skill://...` or `mcp://<server>/<resource-uri>`; each capability is asked cheaply first."""
        scheme = uri.partition("://")[0] if "://" in uri else ""
        if scheme == "skill":
            parse_skill_uri(uri)  # traversal and malformed paths are refused by name, before any lookup
            manager = self.skills(scope)
            if await manager.skill_exists(uri):
                return await manager.read_skill(uri)
            await manager.read_skill(uri)  # raises the specific reason (an escaping symlink, no such file)
            raise ExtensionError(f"no visible skill has {uri!r}")
        if scheme == "mcp":
            server, _, resource = uri.removeprefix("mcp://").partition("/")
            for source in self.tool_sources(scope):
                if getattr(source, "server", None) == server and await source.resource_exists(resource):
                    return await source.read_resource(resource)
            raise ExtensionError(f"no visible MCP server {server!r} has resource {resource!r}")
        raise ExtensionError(f"unknown URI scheme in {uri!r}: only skill:// and mcp:// are served")

    # -- composition ---------------------------------------------------------------------------

    def link(self, parent: str, child: str) -> int:
        """Record that `parent` brings `child` (a skill bringing an MCP server); returns the chain depth.

        A cycle is refused; a chain deeper than `max_composition_depth` is allowed with a warning.
        """
        if parent == child or self._reaches(child, parent):
            raise ExtensionError(f"composition cycle: {child} already leads back to {parent}")
        self._links.setdefault(parent, set()).add(child)
        depth = self._depth(child, frozenset()) + self._height(parent)
        if depth > self.max_composition_depth:
            log.warning(
                "extension chain through %s -> %s is %d deep (max_composition_depth %d)",
                parent,
                child,
                depth,
                self.max_composition_depth,
            )
        return depth

    def _unlink(self, node: str) -> None:
        """Forget what `node` brings and what brings it (it is no longer registered)."""
        self._links.pop(node, None)
        for parent, children in list(self._links.items()):
            children.discard(node)
            if not children:
                del self._links[parent]

    def _reaches(self, start: str, goal: str) -> bool:
        stack, seen = [start], set()
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend(self._links.get(node, ()))
        return False

    def _depth(self, node: str, path: frozenset[str]) -> int:
        """Edges below `node` on its longest chain."""
        children = self._links.get(node, set()) - path
        return 1 + max((self._depth(c, path | {node}) for c in children), default=0) if children else 1

    def _height(self, node: str) -> int:
        """Edges above `node` on its longest chain of parents."""
        parents = [p for p, children in self._links.items() if node in children]
        return max((1 + self._height(p) for p in parents), default=0)

    # -- changes -------------------------------------------------------------------------------

    async def changes(self) -> AsyncIterator[ChangeEvent]:
        """Every observable capability's changes, merged into one stream."""
        while True:
            yield await self._changes.get()

    async def _forward(self, capability: ChangeObservable) -> None:
        try:
            async for event in capability.on_change():
                self._changes.put_nowait(event)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("change stream of %r failed", capability)

    async def close(self) -> None:
        tasks = list(self._forwarders.values())
        self._forwarders.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
