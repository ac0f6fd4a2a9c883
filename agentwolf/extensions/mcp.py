"""McpServerCap: one MCP server of a host's pool as tools, resources, skills, commands and changes.

Lists are cached until the server says they changed (`list_changed`), so nothing is re-listed per
step. Skills follow the MCP skills extension (SEP-2640: `skills/list`, content via
`resources/read`, digests checked); without it, only `skill://.../SKILL.md` resources count as
skills, never an arbitrary resource.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Any, Literal

import mcp_types
import yaml
from pydantic import TypeAdapter

from agentwolf.extensions.pool import McpPool
from agentwolf.extensions.safety import (
    MAX_FILE_BYTES,
    MAX_FILES_PER_SKILL,
    MAX_SKILL_MD_BYTES,
    parse_skill_uri,
)
from agentwolf.extensions.skills_md import parse_skill_md
from agentwolf.extensions.types import (
    ChangeEvent,
    CommandArgument,
    CommandEntry,
    ExtensionError,
    ResourceEntry,
    SkillEntry,
    SkillFile,
    ToolEntry,
)
from agentwolf.extensions.watch import Debouncer

log = logging.getLogger(__name__)

SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
MAX_PAGES = 20
_DICT = TypeAdapter(dict[str, Any])


class _SkillsList(mcp_types.Request[mcp_types.PaginatedRequestParams | None, Literal["skills/list"]]):
    method: Literal["skills/list"] = "skills/list"
    params: mcp_types.PaginatedRequestParams | None = None


class McpServerCap:
    """Implements McpResource, SkillResource, CommandResource and ChangeObservable for one server."""

    def __init__(self, pool: McpPool, server: str, *, quiet: float = 0.25, max_wait: float = 2.0) -> None:
        self.pool = pool
        self.server = server
        self.source = f"mcp:{server}"
        self._tools: list[ToolEntry] | None = None
        self._resources: list[ResourceEntry] | None = None
        self._skills: dict[str, SkillEntry] | None = None
        self._skill_files: dict[str, str | None] = {}
        """Every file of every listed skill -> its sha256 digest (None when the server gave none)."""
        self._prompts: list[mcp_types.Prompt] | None = None
        self.problems: list[str] = []
        self.version = 0
        """Bumped on every announced change: a caller can tell whether its own call changed the lists."""
        self._changes = Debouncer(self.source, "tools", quiet=quiet, max_wait=max_wait)

    # -- changes -------------------------------------------------------------------------------

    def list_changed(self, kind: str) -> None:
        """The server announced a new list: forget the cached one and tell observers (coalesced)."""
        self.version += 1
        if kind == "tools":
            self._tools = None
        elif kind == "prompts":
            self._prompts = None
        else:
            self._resources, self._skills = None, None
        self._changes.poke(kind)

    def on_change(self) -> AsyncIterator[ChangeEvent]:
        return self._changes.events()

    def close(self) -> None:
        self._changes.close()

    # -- tools and resources -------------------------------------------------------------------

    async def list_tools(self) -> list[ToolEntry]:
        if self._tools is None:
            tools = await self.pool.list_tools(self.server)
            self._tools = [
                ToolEntry(t.name, self.server, t.description or "", dict(t.input_schema), _repeat_safe(t))
                for t in tools
            ]
        return self._tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> mcp_types.CallToolResult:
        return await self.pool.call_tool(self.server, name, arguments)

    async def list_resources(self) -> list[ResourceEntry]:
        if self._resources is None:
            resources: list[ResourceEntry] = []
            cursor: str | None = None
            for _ in range(MAX_PAGES):
                page = await self._use(lambda c, cur=cursor: c.list_resources(cursor=cur))
                resources.extend(
                    ResourceEntry(str(r.uri), r.name, self.server, r.description or "", r.mime_type)
                    for r in page.resources
                )
                cursor = page.next_cursor
                if not cursor:
                    break
            self._resources = resources
        return self._resources

    async def resource_exists(self, uri: str) -> bool:
        return any(r.uri == uri for r in await self.list_resources())

    async def read_resource(self, uri: str, *, limit: int = MAX_FILE_BYTES) -> SkillFile:
        result = await self._use(lambda c: c.read_resource(uri))
        if not result.contents:
            raise ExtensionError(f"{self.server}: {uri} has no content")
        content = result.contents[0]
        if isinstance(content, mcp_types.BlobResourceContents):
            data = base64.b64decode(content.blob)
            _check_size(uri, len(data), limit)
            return SkillFile(uri, blob=data, mime_type=content.mime_type or "application/octet-stream")
        _check_size(uri, len(content.text.encode()), limit)
        return SkillFile(uri, text=content.text, mime_type=content.mime_type or "text/plain")

    # -- skills (SEP-2640) ---------------------------------------------------------------------

    async def list_skills(self) -> list[SkillEntry]:
        if self._skills is None:
            self.problems, self._skill_files = [], {}
            capabilities = await self._capabilities()
            if SKILLS_EXTENSION in (capabilities.extensions or {}):
                listed = await self._listed_skills()
            else:
                listed = await self._skill_resources() if capabilities.resources is not None else []
            skills: dict[str, SkillEntry] = {}
            for uri, skill in listed:
                if any(s.name == skill.name for s in skills.values()):
                    self.problems.append(f"{self.server}: skill {skill.name!r} listed twice; kept the first")
                    continue
                skills[uri] = skill
            self._skills = skills
        return list(self._skills.values())

    async def _capabilities(self) -> mcp_types.ServerCapabilities:
        async def capabilities(client: Any) -> mcp_types.ServerCapabilities:
            return client.server_capabilities

        return await self._use(capabilities)

    async def _listed_skills(self) -> list[tuple[str, SkillEntry]]:
        out = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            request = _SkillsList(params=mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            page = await self._use(lambda c, r=request: c.session.send_request(r, _DICT))
            for item in page.get("skills") or []:
                try:
                    uri, frontmatter = str(item["uri"]), dict(item["frontmatter"])
                    files = {str(f["uri"]): f.get("digest") for f in item.get("resources") or []}
                except (KeyError, TypeError, ValueError) as exc:
                    self.problems.append(f"{self.server}: malformed skills/list entry ({exc!r})")
                    continue
                if len(files) > MAX_FILES_PER_SKILL:
                    self.problems.append(
                        f"{self.server}: {uri} has {len(files)} files (max {MAX_FILES_PER_SKILL})"
                    )
                    continue
                document = f"---\n{yaml.safe_dump(frontmatter)}---\n"
                entry = self._entry(uri, document)
                if entry is not None:
                    out.append((uri, entry))
                    self._skill_files.update(files)
            cursor = page.get("nextCursor")
            if not cursor:
                break
        return out

    async def _skill_resources(self) -> list[tuple[str, SkillEntry]]:
        """No skills extension: resources named `skill://<path>/SKILL.md` are skills; nothing else is."""
        out = []
        for resource in await self.list_resources():
            if not (resource.uri.startswith("skill://") and resource.uri.endswith("/SKILL.md")):
                continue
            try:
                text = (await self.read_resource(resource.uri, limit=MAX_SKILL_MD_BYTES)).text or ""
            except ExtensionError as exc:
                self.problems.append(str(exc))
                continue
            entry = self._entry(resource.uri, text)
            if entry is not None:
                out.append((resource.uri, entry))
                self._skill_files[resource.uri] = None
        folders = {uri.rsplit("/", 1)[0] + "/" for uri, _ in out}
        for resource in await self.list_resources():
            if any(resource.uri.startswith(f) for f in folders):
                self._skill_files.setdefault(resource.uri, None)
        return out

    def _entry(self, uri: str, document: str) -> SkillEntry | None:
        """A skill entry if the URI and frontmatter agree (last path segment = name), else a problem."""
        try:
            skill_path, file = parse_skill_uri(uri)
            if file != "SKILL.md":
                raise ExtensionError(f"{uri}: a skill URI must end in /SKILL.md")
            folder = skill_path.rsplit("/", 1)[-1]
            return parse_skill_md(document, folder=folder, origin=self.source, uri=uri).entry
        except ExtensionError as exc:
            self.problems.append(f"{self.server}: {exc}")
            return None

    async def skill_exists(self, uri: str) -> bool:
        await self.list_skills()
        return uri in self._skill_files

    async def read_skill(self, uri: str) -> SkillFile:
        """A file of a listed skill (never another resource); SKILL.md comes without its frontmatter."""
        if not await self.skill_exists(uri):
            raise ExtensionError(f"{self.server}: {uri} is not a file of a listed skill")
        is_skill_md = uri.endswith("/SKILL.md")
        file = await self.read_resource(uri, limit=MAX_SKILL_MD_BYTES if is_skill_md else MAX_FILE_BYTES)
        digest = self._skill_files.get(uri)
        if digest is not None:
            data = file.blob if file.blob is not None else (file.text or "").encode()
            actual = hashlib.sha256(data).hexdigest()
            if digest.removeprefix("sha256:").lower() != actual:
                raise ExtensionError(f"{self.server}: {uri} does not match its listed digest")
        if is_skill_md and file.text is not None:
            skill = (self._skills or {}).get(uri)
            folder = skill.name if skill else None
            body = parse_skill_md(file.text, folder=folder, origin=self.source, uri=uri).body
            return SkillFile(uri, text=body)
        return file

    # -- prompts as slash commands -------------------------------------------------------------

    async def list_commands(self) -> list[CommandEntry]:
        if self._prompts is None:
            serves_prompts = (await self._capabilities()).prompts is not None
            self._prompts = (await self._use(lambda c: c.list_prompts())).prompts if serves_prompts else []
        return [
            CommandEntry(
                f"{self.server}:{p.name}",
                p.description or "",
                self.source,
                tuple(
                    CommandArgument(a.name, a.description or "", bool(a.required)) for a in p.arguments or ()
                ),
            )
            for p in self._prompts
        ]

    async def get_command(self, name: str, arguments: dict[str, str]) -> str:
        prompt = name.removeprefix(f"{self.server}:")
        result = await self._use(lambda c: c.get_prompt(prompt, arguments))
        parts = []
        for message in result.messages:
            content = message.content
            parts.append(
                content.text if isinstance(content, mcp_types.TextContent) else f"[{content.type} content]"
            )
        return "\n\n".join(parts)

    async def _use(self, op: Any) -> Any:
        return await self.pool.use(self.server, op, timeout=self.pool.servers[self.server].call_timeout)


def _check_size(uri: str, size: int, limit: int) -> None:
    if size > limit:
        raise ExtensionError(f"{uri} is {size} bytes (limit {limit})")


def _repeat_safe(tool: mcp_types.Tool) -> bool:
    hints = tool.annotations
    return bool(hints and (hints.read_only_hint or hints.idempotent_hint))
