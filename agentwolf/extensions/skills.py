"""Skills: skill folders on disk and one agent's merged view (SKILL.md parsing: skills_md.py).

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
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

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
from agentwolf.extensions.skills_md import ParsedSkill, parse_skill_md
from agentwolf.extensions.types import (
    CommandArgument,
    CommandEntry,
    ExtensionError,
    SkillEntry,
    SkillFile,
    SkillResource,
)

_PLACEHOLDER = re.compile(r"\$ARGUMENTS|\$(\d+)")


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
