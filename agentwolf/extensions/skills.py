"""Skills: SKILL.md parsing (Agent Skills spec), skill folders on disk, and one agent's merged view.

Skill files are untrusted input (a cloned repo, a shared folder): parsing refuses YAML aliases and
anything malformed with an `ExtensionError`, and a root skips a bad skill with a recorded problem
instead of failing, so one broken folder never hides the others.
"""

from __future__ import annotations

import asyncio
import html
import mimetypes
import os
import re
import shlex
import threading
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml
from pydantic import ValidationError

from agentwolf.config.manifest import McpServerConfig
from agentwolf.extensions.safety import (
    MAX_FILE_BYTES,
    MAX_FILES_PER_SKILL,
    MAX_SKILL_BYTES,
    MAX_SKILL_MD_BYTES,
    SKILL_MD,
    SKILL_SCHEME,
    parse_skill_uri,
    resolve_within,
)
from agentwolf.extensions.types import (
    CommandArgument,
    CommandEntry,
    ExtensionError,
    SkillEntry,
    SkillFile,
    SkillResource,
)

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SPEC_KEYS = frozenset({"name", "description", "license", "compatibility", "metadata", "allowed-tools"})
_AGENTWOLF_KEYS = frozenset({"mcp-servers"})
_CLAUDE_CODE_USED = frozenset({"user-invocable", "argument-hint"})
_CLAUDE_CODE_IGNORED = frozenset({"disable-model-invocation", "model", "context", "agent", "hooks"})
_TOOL_PATTERN = re.compile(r"[^\s,(]+(?:\([^)]*\))?")
"""One `allowed-tools` item: `Read`, `mcp__*`, or `Bash(git add:*)` (spaces inside parentheses)."""
_PLACEHOLDER = re.compile(r"\$ARGUMENTS|\$(\d+)")
_MAX_DEPTH = 20


@dataclass(frozen=True, slots=True)
class ParsedSkill:
    """A validated SKILL.md: the catalog entry plus what only loading or slash commands need."""

    entry: SkillEntry
    body: str
    """SKILL.md without its frontmatter: the instructions."""
    warnings: tuple[str, ...]
    mcp_servers: Mapping[str, McpServerConfig]
    user_invocable: bool = True
    """Claude Code's `user-invocable`: whether the skill is also a slash command."""
    argument_hint: str | None = None
    license: str | None = None
    compatibility: str | None = None


class _FrontmatterLoader(yaml.SafeLoader):
    """SafeLoader without anchors/aliases, deep nesting and duplicate keys.

    Aliases let a few lines expand exponentially (billion laughs) and frontmatter never needs them;
    PyYAML slows down quadratically with nesting depth; a duplicate key would let a reader see one
    `name` while the parser keeps the other.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        line = event.start_mark.line + 2  # frontmatter starts on line 2 of SKILL.md
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise ExtensionError(f"YAML anchors and aliases are not allowed in frontmatter (line {line})")
        if self._depth >= _MAX_DEPTH:
            raise ExtensionError(f"frontmatter is nested more than {_MAX_DEPTH} levels deep (line {line})")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        keys = Counter(key.value for key, _ in node.value if isinstance(key, yaml.ScalarNode))
        duplicates = sorted(key for key, count in keys.items() if count > 1)
        if duplicates:
            raise ExtensionError(f"duplicate frontmatter keys: {', '.join(duplicates)}")
        return super().construct_mapping(node, deep)


def parse_skill_md(text: str, *, folder: str | None, origin: str, uri: str) -> ParsedSkill:
    """Validate a SKILL.md; `folder` is the name the skill's folder gives it (None: not checked)."""
    try:
        return _parse(text, folder=folder, origin=origin, uri=uri)
    except ExtensionError as exc:
        raise ExtensionError(f"{uri}: {exc}") from None


def _parse(text: str, *, folder: str | None, origin: str, uri: str) -> ParsedSkill:
    meta, body = _split_frontmatter(text)
    name = _required(meta, "name")
    if len(name) > 64 or not _NAME.fullmatch(name):
        raise ExtensionError(
            f"name {name!r} is invalid: use 1-64 lowercase letters, digits and single hyphens,"
            " not starting or ending with a hyphen"
        )
    if folder is not None and name != folder:
        raise ExtensionError(f"name {name!r} does not match its folder {folder!r}")
    description = _required(meta, "description").strip()
    if not description or len(description) > 1024:
        raise ExtensionError(f"description must be 1-1024 characters, not {len(description)}")
    compatibility = _string(meta, "compatibility")
    if compatibility is not None and len(compatibility) > 500:
        raise ExtensionError(f"compatibility must be at most 500 characters, not {len(compatibility)}")
    user_invocable = meta.get("user-invocable", True)
    if not isinstance(user_invocable, bool):
        raise ExtensionError(f"user-invocable must be true or false, not {user_invocable!r}")
    servers = _mcp_servers(meta.get("mcp-servers"))
    entry = SkillEntry(
        name=name,
        description=description,
        uri=uri,
        origin=origin,
        allowed_tools=_allowed_tools(meta["allowed-tools"]) if "allowed-tools" in meta else None,
        mcp_servers=tuple(servers),
        metadata=_metadata(meta.get("metadata")),
    )
    return ParsedSkill(
        entry=entry,
        body=body,
        warnings=tuple(_key_warnings(meta)),
        mcp_servers=servers,
        user_invocable=user_invocable,
        argument_hint=_argument_hint(meta.get("argument-hint")),
        license=_string(meta, "license"),
        compatibility=compatibility,
    )


def _split_frontmatter(text: str) -> tuple[dict[Any, Any], str]:
    lines = text.removeprefix("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        raise ExtensionError("SKILL.md must start with a '---' line opening its YAML frontmatter")
    close = next((i for i, line in enumerate(lines) if i and line.rstrip() == "---"), None)
    if close is None:
        raise ExtensionError("the frontmatter opened by '---' on line 1 is never closed by a '---' line")
    source = "".join(lines[1:close])
    try:
        meta = yaml.load(source, Loader=_FrontmatterLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        hint = " (tabs are not allowed for indentation)" if "\t" in source else ""
        raise ExtensionError(f"frontmatter is not valid YAML{hint}: {exc}") from None
    if not isinstance(meta, dict):
        raise ExtensionError(f"frontmatter must be a mapping of keys to values, not {type(meta).__name__}")
    return meta, "".join(lines[close + 1 :]).lstrip("\r\n")


def _string(meta: Mapping[Any, Any], key: str) -> str | None:
    value = meta.get(key)
    if value is not None and not isinstance(value, str):
        raise ExtensionError(f"{key} must be a string, but it is a {type(value).__name__}")
    return value


def _required(meta: Mapping[Any, Any], key: str) -> str:
    value = _string(meta, key)
    if value is None:
        raise ExtensionError(f"{key} must be a string, but it is missing")
    return value


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ExtensionError(f"metadata must be a mapping of strings to strings, not {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ExtensionError(f"metadata must map strings to strings: {key!r}: {item!r} is not (quote it)")
    return dict(value)


def _allowed_tools(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(_TOOL_PATTERN.findall(value))
    if isinstance(value, list) and all(isinstance(item, str) and item.strip() for item in value):
        return tuple(item.strip() for item in value)
    raise ExtensionError(
        f"allowed-tools must be a space- or comma-separated string or a list of names: {value!r}"
    )


def _mcp_servers(value: Any) -> dict[str, McpServerConfig]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ExtensionError(
            f"mcp-servers must map server names to their settings, not {type(value).__name__}"
        )
    servers = {}
    for name, settings in value.items():
        if not isinstance(name, str) or not name:
            raise ExtensionError(f"mcp-servers names must be non-empty strings, not {name!r}")
        try:
            servers[name] = McpServerConfig.model_validate(settings)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, error['loc'])) or 'settings'}: {error['msg']}" for error in exc.errors()
            )
            raise ExtensionError(f"mcp-servers.{name} is invalid: {problems}") from None
    return servers


def _argument_hint(value: Any) -> str | None:
    """A string; unquoted `argument-hint: [file]` (as Claude Code documents it) is a YAML list."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return " ".join(f"[{item}]" for item in value)
    raise ExtensionError(f"argument-hint must be a string, not {value!r}")


def _key_warnings(meta: Mapping[Any, Any]) -> list[str]:
    warnings = []
    for key in meta:
        if key in _SPEC_KEYS or key in _AGENTWOLF_KEYS:
            continue
        if key in _CLAUDE_CODE_USED:
            warnings.append(
                f"{key!r} is a Claude Code key, not in the Agent Skills spec (used for slash commands)"
            )
        elif key in _CLAUDE_CODE_IGNORED:
            warnings.append(f"{key!r} is a Claude Code key that AgentWolf ignores")
        else:
            warnings.append(f"unknown frontmatter key {key!r} ignored")
    return warnings


@dataclass(frozen=True, slots=True)
class _LocalSkill:
    folder: Path
    """Resolved."""
    parsed: ParsedSkill
    files: tuple[str, ...]


class LocalSkillRoot:
    """The skills in one folder on disk: every folder below it holding a SKILL.md.

    Plain filesystem, nothing live: `refresh()` rescans (a watcher calls it, off the event loop). A
    skill that fails to parse, exceeds the limits or leaves the root through a symlink is skipped and
    described in `problems`; notes about kept skills (ignored keys, refused symlinks) go to `warnings`.
    """

    def __init__(self, path: Path | str, *, label: str | None = None) -> None:
        self.path = Path(path)
        self.label = label or str(path)
        self.origin = f"local:{path}"
        self.problems: list[str] = []
        self.warnings: list[str] = []
        self._skills: dict[str, _LocalSkill] | None = None
        self._scanning = threading.Lock()
        self._first_scan = asyncio.Lock()

    async def load(self) -> None:
        """Scan once, in a thread: a big folder takes seconds, which would stall the event loop (and
        its activities' heartbeats). Concurrent first callers wait for the same scan."""
        if self._skills is None:
            async with self._first_scan:
                if self._skills is None:
                    await asyncio.to_thread(self.refresh)

    def refresh(self) -> None:
        """Rescan; scans run one at a time, so the last to finish saw the folder last."""
        with self._scanning:
            self._scan()

    def _scan(self) -> None:
        problems: list[str] = []
        warnings: list[str] = []
        skills: dict[str, _LocalSkill] = {}
        owners: dict[str, str] = {}
        root = self.path.resolve()
        if root.is_dir():
            if (root / SKILL_MD).exists():
                problems.append(
                    f"{self.label}: SKILL.md at the root is ignored: each skill needs its own folder"
                )
            for rel in _skill_folders(root, problems, self.label):
                try:
                    skill = self._load(root, rel, warnings)
                except (ExtensionError, OSError) as exc:
                    problems.append(f"{self.label}: skipped {rel}: {exc}")
                    continue
                name = skill.parsed.entry.name
                if name in owners:
                    problems.append(
                        f"{self.label}: skipped {rel}: the name {name!r} is taken by {owners[name]}"
                    )
                    continue
                owners[name] = rel
                skills[rel] = skill
        self._skills, self.problems, self.warnings = skills, problems, warnings

    def _load(self, root: Path, rel: str, warnings: list[str]) -> _LocalSkill:
        folder = (root / rel).resolve()
        skill_md = resolve_within(folder, SKILL_MD, shown=f"{rel}/{SKILL_MD}")
        with skill_md.open("rb") as handle:
            data = handle.read(MAX_SKILL_MD_BYTES + 1)
        if len(data) > MAX_SKILL_MD_BYTES:
            raise ExtensionError(f"SKILL.md is over the {MAX_SKILL_MD_BYTES}-byte limit")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ExtensionError(f"SKILL.md is not valid UTF-8: {exc}") from None
        files, escaping = _inventory(folder)
        warnings.extend(
            f"{self.label}: {rel}/{link}: not served: it is a symlink leading outside the skill"
            for link in escaping
        )
        uri = f"{SKILL_SCHEME}{quote(rel)}/{SKILL_MD}"
        parsed = parse_skill_md(text, folder=rel.rsplit("/", 1)[-1], origin=self.origin, uri=uri)
        warnings.extend(f"{self.label}: {rel}: {warning}" for warning in parsed.warnings)
        return _LocalSkill(folder=folder, parsed=parsed, files=files)

    def _loaded(self) -> dict[str, _LocalSkill]:
        """The skills, scanning here if nobody has yet (on the caller's thread: `load()` first)."""
        if self._skills is None:
            self.refresh()
        assert self._skills is not None
        return self._skills

    async def _scanned(self) -> dict[str, _LocalSkill]:
        await self.load()
        return self._loaded()

    def _named(self, name: str) -> _LocalSkill:
        for skill in self._loaded().values():
            if skill.parsed.entry.name == name:
                return skill
        raise ExtensionError(f"no skill named {name!r} in {self.label}")

    async def list_skills(self) -> list[SkillEntry]:
        return [skill.parsed.entry for skill in (await self._scanned()).values()]

    def parsed(self, name: str) -> ParsedSkill | None:
        """The whole parsed skill (its MCP servers, hints), or None if this root has no such skill."""
        return next((s.parsed for s in self._loaded().values() if s.parsed.entry.name == name), None)

    async def read_skill(self, uri: str) -> SkillFile:
        skills = await self._scanned()
        located = _locate(uri, skills)
        if located is None:
            raise ExtensionError(f"no skill in {self.label} for {uri!r}")
        skill, file = skills[located[0]], located[1]
        if file == SKILL_MD:
            return SkillFile(uri=uri, text=skill.parsed.body)
        return _read_file(resolve_within(skill.folder, file, shown=uri), uri)

    async def skill_exists(self, uri: str) -> bool:
        skills = await self._scanned()
        try:
            located = _locate(uri, skills)
            if located is None:
                return False
            path, file = located
            return file == SKILL_MD or resolve_within(skills[path].folder, file).is_file()
        except ExtensionError:
            return False

    def files(self, name: str) -> list[str]:
        """The skill's reference files (relative paths, SKILL.md excluded)."""
        return list(self._named(name).files)

    async def list_commands(self) -> list[CommandEntry]:
        return [
            CommandEntry(
                name=skill.parsed.entry.name,
                description=skill.parsed.entry.description,
                origin=self.origin,
                arguments=(CommandArgument("ARGUMENTS", description=skill.parsed.argument_hint or ""),),
            )
            for skill in (await self._scanned()).values()
            if skill.parsed.user_invocable
        ]

    async def get_command(self, name: str, arguments: dict[str, str]) -> str:
        """The skill body with `$ARGUMENTS`, `$1`, `$2`... filled in.

        One substitution pass, so placeholders inside the arguments stay literal; a body without any
        placeholder gets the arguments appended, so they are never lost.
        """
        await self.load()
        skill = self._named(name)
        if not skill.parsed.user_invocable:
            raise ExtensionError(f"skill {name!r} is not user-invocable: there is no /{name} command")
        text = arguments.get("ARGUMENTS", "")
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()

        def fill(match: re.Match[str]) -> str:
            if match.group(1) is None:
                return text
            index = int(match.group(1))
            return words[index - 1] if 0 < index <= len(words) else ""

        body = skill.parsed.body
        expanded = _PLACEHOLDER.sub(fill, body)
        if text and not _PLACEHOLDER.search(body):
            expanded = f"{expanded.rstrip()}\n\nARGUMENTS: {text}\n"
        return expanded


def _skill_folders(root: Path, problems: list[str], label: str) -> list[str]:
    """Skill paths under `root` in sorted order; a skill's own subfolders are its files, not skills.

    Hidden folders are not searched. Folder symlinks are not followed: one leading outside the root
    is refused with a problem, one inside it is an alias of a folder that is scanned anyway.
    """
    found: list[str] = []
    pending = [(root, "")]
    while pending:
        folder, rel = pending.pop()
        try:
            children = sorted(folder.iterdir())
        except OSError as exc:
            problems.append(f"{label}: cannot list {rel or '.'}: {exc}")
            continue
        for child in children:
            path = f"{rel}/{child.name}" if rel else child.name
            if child.name.startswith(".") or not child.is_dir():
                continue
            if child.is_symlink():
                if not _leads_inside(child, root):
                    problems.append(f"{label}: skipped {path}: it is a symlink to a folder outside the root")
            elif (child / SKILL_MD).is_file():
                found.append(path)
            else:
                pending.append((child, path))
    return sorted(found)


def _inventory(folder: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the skill's files without SKILL.md, symlinks leading outside it), enforcing the limits.

    Every file counts, hidden ones too; a symlink leading outside the skill is not a file of it
    (reading it is refused anyway).
    """
    files: list[str] = []
    escaping: list[str] = []
    count = total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for filename in sorted(filenames):
            path = Path(dirpath) / filename
            count += 1
            if count > MAX_FILES_PER_SKILL:
                raise ExtensionError(f"more than {MAX_FILES_PER_SKILL} files")
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink() and not _leads_inside(path, folder):
                escaping.append(relative)
                continue
            try:
                total += path.stat().st_size
            except OSError:  # a dangling symlink
                continue
            if total > MAX_SKILL_BYTES:
                raise ExtensionError(f"more than {MAX_SKILL_BYTES} bytes of files")
            if relative != SKILL_MD:
                files.append(relative)
    return tuple(files), tuple(escaping)


def _leads_inside(link: Path, folder: Path) -> bool:
    try:
        return link.resolve().is_relative_to(folder)
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop
        return False


def _locate(uri: str, skill_paths: Collection[str]) -> tuple[str, str] | None:
    """(skill path, file inside it) for a skill URI: the longest known skill path that prefixes it.

    `skill://team/review` alone is `team/review`'s SKILL.md when that is a skill.
    """
    skill_path, file = parse_skill_uri(uri)
    segments = f"{skill_path}/{file}".split("/")
    for cut in range(len(segments), 0, -1):
        candidate = "/".join(segments[:cut])
        if candidate in skill_paths:
            return candidate, "/".join(segments[cut:]) or SKILL_MD
    return None


def _read_file(path: Path, uri: str) -> SkillFile:
    """Text if the file is UTF-8 without NUL bytes; otherwise bytes, never decoded as instructions."""
    if not path.is_file():
        raise ExtensionError(f"{uri!r}: no such file in the skill")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ExtensionError(f"{uri!r} cannot be read: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ExtensionError(f"{uri!r} is larger than the {MAX_FILE_BYTES}-byte limit for one file")
    mime_type = mimetypes.guess_type(path.name)[0]
    if b"\x00" not in data:
        try:
            return SkillFile(uri=uri, text=data.decode("utf-8"), mime_type=mime_type or "text/plain")
        except UnicodeDecodeError:
            pass
    return SkillFile(uri=uri, blob=data, mime_type=mime_type or "application/octet-stream")


class SkillManagerCap:
    """One agent's skills from ordered sources.

    Precedence is the order of `sources`: the first source to list a name (or skill path) owns it. A
    later skill with a taken name is left out of the merged list and reported in `shadowed`, naming
    both origins, so a skill that does not show up is never a silent mystery. A source that fails to
    list is reported in `problems` and the others still count.
    """

    def __init__(self, sources: Sequence[SkillResource]) -> None:
        self.sources = tuple(sources)
        self.shadowed: list[str] = []
        self.problems: list[str] = []
        self._routes: dict[str, SkillResource] | None = None

    async def list_skills(self) -> list[SkillEntry]:
        merged: list[SkillEntry] = []
        owners: dict[str, str] = {}
        """Origin owning each taken name and skill path."""
        routes: dict[str, SkillResource] = {}
        shadowed: list[str] = []
        problems: list[str] = []
        for source in self.sources:
            try:
                entries = await source.list_skills()
            except Exception as exc:  # noqa: BLE001 - one unreachable source must not hide the rest
                problems.append(f"{source!r}: listing skills failed: {exc}")
                continue
            for entry in entries:
                try:
                    path, file = parse_skill_uri(entry.uri)
                except ExtensionError as exc:
                    problems.append(f"skill {entry.name!r} from {entry.origin} left out: {exc}")
                    continue
                if file != SKILL_MD:
                    problems.append(
                        f"skill {entry.name!r} from {entry.origin} left out: {entry.uri} is not a SKILL.md"
                    )
                    continue
                # A path inside (or around) another origin's skill would capture its files' URIs.
                owner = owners.get(f"name:{entry.name}") or next(
                    (
                        origin
                        for key, origin in owners.items()
                        if key.startswith("path:")
                        and _nested(key.removeprefix("path:"), path)
                        and (origin != entry.origin or key == f"path:{path}")
                    ),
                    None,
                )
                if owner is not None:
                    shadowed.append(
                        f"skill {entry.name!r} ({entry.uri}) from {entry.origin} is shadowed by the one "
                        f"from {owner}"
                    )
                    continue
                owners[f"name:{entry.name}"] = owners[f"path:{path}"] = entry.origin
                routes[path] = source
                merged.append(entry)
        self._routes, self.shadowed, self.problems = routes, shadowed, problems
        return merged

    async def _route(self, uri: str) -> SkillResource | None:
        """The source owning `uri`; listing again once if it is unknown (the sources may have changed)."""
        for fresh in (self._routes is None, True):
            if fresh:
                await self.list_skills()
            assert self._routes is not None
            located = _locate(uri, self._routes)
            if located is not None:
                return self._routes[located[0]]
        return None

    async def read_skill(self, uri: str) -> SkillFile:
        source = await self._route(uri)
        if source is None:
            raise ExtensionError(f"no skill for {uri!r}")
        return await source.read_skill(uri)

    async def skill_exists(self, uri: str) -> bool:
        try:
            source = await self._route(uri)
        except ExtensionError:
            return False
        return source is not None and await source.skill_exists(uri)

    async def catalog(self, budget_bytes: int = 50_000) -> str:
        """An `<available-skills>` block for the prompt, never over `budget_bytes` (UTF-8).

        If everything does not fit, it lists the skills that do (in precedence order) and says how
        many were left out; "" when there are no skills or not even that note fits.
        """
        entries = await self.list_skills()
        if not entries:
            return ""
        head, tail = "<available-skills>\n", "</available-skills>"
        lines = [
            f'<skill name="{html.escape(e.name)}" uri="{html.escape(e.uri)}">'
            f"{html.escape(' '.join(e.description.split()), quote=False)}</skill>\n"
            for e in entries
        ]
        if _size(head, *lines, tail) <= budget_bytes:
            return head + "".join(lines) + tail
        used = _size(head, tail, _left_out(len(entries)))
        kept = []
        for line in lines:
            if used + _size(line) <= budget_bytes:
                kept.append(line)
                used += _size(line)
        text = head + "".join(kept) + _left_out(len(entries) - len(kept)) + tail
        return text if _size(text) <= budget_bytes else ""


def _nested(a: str, b: str) -> bool:
    return a == b or a.startswith(f"{b}/") or b.startswith(f"{a}/")


def _left_out(count: int) -> str:
    return f"({count} more skills not shown)\n"


def _size(*parts: str) -> int:
    return sum(len(part.encode("utf-8")) for part in parts)
