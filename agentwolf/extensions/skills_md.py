"""SKILL.md parsing (Agent Skills spec, with the Claude Code keys it honours or ignores).

Skill files are untrusted input (a cloned repo, a shared folder): parsing refuses YAML aliases and
anything malformed with an `ExtensionError`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agentwolf.config.frontmatter import FrontmatterError, split_frontmatter
from agentwolf.config.manifest import McpServerConfig
from agentwolf.extensions.types import (
    ExtensionError,
    SkillEntry,
)

_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SPEC_KEYS = frozenset({"name", "description", "license", "compatibility", "metadata", "allowed-tools"})
_AGENTWOLF_KEYS = frozenset({"mcp-servers"})
_CLAUDE_CODE_USED = frozenset({"user-invocable", "argument-hint"})
_CLAUDE_CODE_IGNORED = frozenset({"disable-model-invocation", "model", "context", "agent", "hooks"})
_TOOL_PATTERN = re.compile(r"[^\s,(]+(?:\([^)]*\))?")
"""One `allowed-tools` item: `Read`, `mcp__*`, or `Bash(git add:*)` (spaces inside parentheses)."""


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
    try:
        return split_frontmatter(text, "SKILL.md")
    except FrontmatterError as exc:
        raise ExtensionError(str(exc)) from None


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
