"""Agents defined in Markdown files (Claude Code's `.claude/agents/*.md` convention), and in
pydantic-ai agent spec files (what `Agent.from_file` reads, config/spec_agents.py) named one by one.

A file's YAML frontmatter gives `name`, `description`, `tools` and `model`; its body is the agent's
instructions. `agents_from:` folders are read when the manifest loads (so names check, and `wolf config
show` lists them; the loaded manifest names the folders as absolute paths), and the worker reads each
file again when it compiles the agent, so an edit reaches the next turn without a reload; only a file
in the config's own folders, since a config sent to the worker may name any path.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from agentwolf.config.frontmatter import FrontmatterError, split_frontmatter
from agentwolf.config.manifest import AgentConfig

SPEC_SUFFIXES = (".yaml", ".yml", ".json")
"""pydantic-ai agent spec files, named one by one in `agents_from`."""

DEFAULT_AGENT_PATHS = [".claude/agents", "~/.claude/agents"]
"""Claude Code's project folder, then the user's (`agents_from: default`)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TOOL = re.compile(r"[^\s,(]+(?:\([^)]*\))?")
"""One `tools` item: `Read`, `mcp__github__*` or `Bash(git add:*)` (its argument pattern is dropped)."""
_ALIASES = {"Task": ["delegate"], "Agent": ["delegate"], "Skill": ["load_skill", "read_skill_file"]}
"""Claude Code tool names with an AgentWolf counterpart."""


class AgentFileError(ValueError):
    """An agent file that cannot be used; the message names the file."""


def folders(paths: list[str] | str, base_dir: Path | None) -> list[Path]:
    """`agents_from` as folders: `default` (alone or as an item) is Claude Code's; relative ones are
    under `base_dir` (the manifest's folder) or the current directory."""
    items = [paths] if isinstance(paths, str) else paths
    listed = [p for item in items for p in (DEFAULT_AGENT_PATHS if item == "default" else [item])]
    base = base_dir or Path.cwd()
    return [(base / Path(os.path.expanduser(p))).resolve() for p in listed]


def load_folders(
    paths: Iterable[Path], aliases: Collection[str], servers: Collection[str]
) -> tuple[dict[str, dict[str, Any]], list[str], list[str]]:
    """(agents by name as manifest data, problems naming their file, notes on names an earlier folder
    took). Every file is read, so one load reports every bad file; a missing folder holds no agents."""
    agents: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    notes: list[str] = []
    for folder in paths:
        files = sorted(folder.glob("*.md")) if folder.is_dir() else [folder] if folder.is_file() else []
        for path in files:
            try:
                name, config = parse_file(path, aliases, servers)
            except AgentFileError as exc:
                problems.append(str(exc))
                continue
            if name in agents:
                notes.append(f"{path}: agent {name!r} is defined in {agents[name]['file']} already; ignored")
                continue
            agents[name] = config
    return agents, problems, notes


def parse_file(path: Path, aliases: Collection[str], servers: Collection[str]) -> tuple[str, dict[str, Any]]:
    """A Markdown agent, or a pydantic-ai agent spec (`.yaml`, `.yml`, `.json`)."""
    if path.suffix in SPEC_SUFFIXES:
        from agentwolf.config.spec_agents import SpecFileError, parse_spec_file  # pydantic-ai: spec files

        try:
            return parse_spec_file(path)
        except SpecFileError as exc:
            raise AgentFileError(str(exc)) from None
    return parse_agent_file(path, aliases, servers)


def parse_agent_file(
    path: Path, aliases: Collection[str], servers: Collection[str]
) -> tuple[str, dict[str, Any]]:
    """(name, the agent as manifest data) of one file; `aliases` and `servers` are the manifest's model
    aliases and MCP server names."""
    try:
        meta, body = split_frontmatter(path.read_text(encoding="utf-8"), "an agent file")
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentFileError(f"{path}: cannot read it: {exc}") from None
    except FrontmatterError as exc:
        raise AgentFileError(f"{path}: {exc}") from None
    name = _text(path, meta, "name")
    if not _NAME.fullmatch(name):
        raise AgentFileError(
            f"{path}: name {name!r} is invalid: 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    config: dict[str, Any] = {
        "description": _text(path, meta, "description").strip(),
        "instructions": body.strip(),
        "file": str(path),
    }
    model = meta.get("model")
    if model is not None and not isinstance(model, str):
        raise AgentFileError(f"{path}: model must be a string, not {type(model).__name__}")
    if model and model != "inherit":
        if ":" not in model and model not in aliases:
            raise AgentFileError(
                f"{path}: model {model!r} is neither an alias in host.models.aliases (known: "
                f"{sorted(aliases) or 'none'}) nor a `provider:model` spec; add the alias, or write "
                "`model: inherit` for the default model"
            )
        config["model"] = model
    tools = _tools(path, meta.get("tools"))
    if tools is not None:
        config["tools"] = tools
    # Every server of the host: `tools` filters what the agent is offered at compile, so an edit to
    # `tools` never needs a server the agent did not register.
    config["capabilities"] = [{"mcp": s} for s in sorted(servers)]
    return name, config


def reread(
    name: str,
    config: AgentConfig,
    agents_from: list[str] | str,
    aliases: Collection[str],
    servers: Collection[str],
) -> AgentConfig:
    """The agent as its file says now (the worker's view of an edit); the loaded copy when the file is
    not on this machine (a config pushed from elsewhere). A file now bad raises AgentFileError.

    `file` is manifest data, and whoever sends a config may name any path: only a `*.md` file
    directly in one of the config's own `agents_from` folders, or a spec file `agents_from` names,
    as this machine resolves them, is read; another is refused before anything reads or watches it."""
    if config.file is None:
        return config
    allowed = folders(agents_from, None) if agents_from else []
    path = Path(config.file).resolve()
    in_folder = config.file.endswith(".md") and path.parent in allowed
    named = path.suffix in SPEC_SUFFIXES and path in allowed
    if not (in_folder or named):
        raise AgentFileError(
            f"agents.{name}.file: {config.file} is not in a folder of this config's `agents_from` "
            f"({', '.join(map(str, allowed)) or 'none'}, as this worker resolves them); the worker "
            "reads agent files only there"
        )
    if not Path(config.file).is_file():
        return config
    _, data = parse_file(Path(config.file), aliases, servers)
    return AgentConfig.model_validate({**config.model_dump(exclude={"tools", "model"}), **data})


def _text(path: Path, meta: dict[Any, Any], key: str) -> str:
    value = meta.get(key)
    if not isinstance(value, str) or not value.strip():
        found = "missing" if value is None else f"a {type(value).__name__}"
        raise AgentFileError(f"{path}: frontmatter `{key}` must be a non-empty string, but it is {found}")
    return value


def _tools(path: Path, value: Any) -> list[str] | None:
    """Claude Code `tools` as AgentWolf tool-name patterns: `mcp__server__tool` is `server:tool`,
    `Task` is `delegate`, `Skill` the skill tools; other names match tool names as they are."""
    if value is None:
        return None
    if isinstance(value, str):
        items = _TOOL.findall(value)
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        items = [item.strip() for item in value if item.strip()]
    else:
        raise AgentFileError(f"{path}: tools must be a comma-separated string or a list of names: {value!r}")
    patterns: list[str] = []
    for item in (i.split("(", 1)[0] for i in items):
        if item.startswith("mcp__"):
            server, _, tool = item.removeprefix("mcp__").partition("__")
            patterns.append(f"{server}:{tool or '*'}")
        else:
            patterns.extend(_ALIASES.get(item, [item]))
    return list(dict.fromkeys(patterns))


def merge_into(data: dict[str, Any], base_dir: Path | None) -> list[str]:
    """Add the agents of raw manifest `data`'s `agents_from` folders to its `agents` (those written
    there win); returns the problems, one per bad file. Data pydantic will refuse is left to it."""
    paths = data.get("agents_from")
    agents = data.setdefault("agents", {})
    if not paths or not isinstance(agents, dict) or not isinstance(paths, list | str):
        return []
    host = _mapping(data, "host")
    aliases, servers = _mapping(_mapping(host, "models"), "aliases"), _mapping(host, "mcp_servers")
    listed = folders(paths, base_dir)
    # The folders as read here, so a worker elsewhere (another directory) holds `file` to the same ones.
    data["agents_from"] = [str(folder) for folder in listed]
    found, problems, notes = load_folders(listed, aliases, servers)
    for name, config in found.items():
        if name in agents:
            notes.append(f"{config['file']}: agent {name!r} is defined in the manifest already; ignored")
        else:
            agents[name] = config
    for note in notes:
        warnings.warn(note, stacklevel=3)
    return problems


def _mapping(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return value if isinstance(value, dict) else {}
