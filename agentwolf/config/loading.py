"""Load a manifest from YAML with errors that name the file, the line and the key path."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, get_args, get_origin

from pydantic import BaseModel, ValidationError

from agentwolf.config.aliases import AliasError, resolve_model
from agentwolf.config.manifest import (
    Manifest,
    McpCapability,
    PydanticCapability,
    SubagentCapability,
    WebCapability,
)
from agentwolf.config.suggest import did_you_mean, listing

if TYPE_CHECKING:
    import yaml

_LEGACY_KEYS = ("models", "mcp_servers", "sessions")


class ManifestError(ValueError):
    """A manifest that cannot be used; the message lists `file:line: key.path: problem` lines, and
    `problems` holds them as data (`wolf config validate --json`)."""

    def __init__(self, message: str, problems: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a manifest file: where (line, key path) and what."""

    line: int
    path: str
    message: str


def load_manifest(path: str | Path, *, anchor: bool = True) -> Manifest:
    """`anchor`: relative skill folders become relative to the file (off for registry pushes, whose
    workers run elsewhere: there they stay relative to each worker's directory)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read manifest: {exc.strerror or exc}") from exc
    return parse_manifest(text, source=str(path), base_dir=path.parent.resolve() if anchor else None)


def parse_manifest(text: str, source: str = "<manifest>", base_dir: Path | None = None) -> Manifest:
    """`base_dir`: where relative skill folders are (the manifest's folder); else the worker's directory."""
    import yaml  # on first parse: a client that only reads sessions never loads it

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(f"{source}{line}: invalid YAML: {problem}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ManifestError(f"{source}:1: the manifest must be a mapping with `host:` and `agents:`")
    lines = _line_index(node)
    legacy = [key for key in _LEGACY_KEYS if key in data]
    if legacy:
        if "host" in data:
            raise ManifestError(
                f"{source}:{lines.get((legacy[0],), 1)}: {legacy[0]}: put it under `host:`, "
                "not at the root, when the manifest has a `host:` section"
            )
        warnings.warn(
            f"{source}: the flat layout ({', '.join(legacy)} at the root) is deprecated; "
            "move these keys under `host:`",
            DeprecationWarning,
            stacklevel=2,
        )
        data = {"host": {key: data.pop(key) for key in legacy}, **data}
        lines = {(("host", *key) if key and key[0] in legacy else key): ln for key, ln in lines.items()}
    if base_dir is not None:
        _anchor_skill_paths(data, base_dir)
    refused = _file_agents(data, base_dir)
    if refused:
        raise ManifestError(f"{source}: agents_from: agent files refused:\n" + "\n".join(refused))
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            *path, last = err["loc"] or ("",)
            unknown = err["type"] == "extra_forbidden"  # `last` is the key as written: `A:` too
            loc = tuple(str(p) for p in (*path, last) if not _is_union_tag(p) or (unknown and p is last))
            if unknown:
                message = "unknown key" + did_you_mean(loc[-1], _keys_at(loc[:-1]))
            else:
                message = err["msg"].removeprefix("Value error, ")
            problems.append((loc, message))
        raise _format(source, lines, problems) from exc
    problems = _check_references(manifest)
    if problems:
        raise _format(source, lines, problems)
    return manifest


def _file_agents(data: dict[str, Any], base_dir: Path | None) -> list[str]:
    """Markdown agents of `agents_from` into `agents` (imported only then: it reads YAML frontmatter)."""
    if not data.get("agents_from"):
        return []
    from agentwolf.config import agent_files

    return agent_files.merge_into(data, base_dir)


def _anchor_skill_paths(data: dict[str, Any], base_dir: Path) -> None:
    """Make relative skill folders relative to the manifest file (`default` stays the worker's)."""

    def anchored(paths: Any) -> Any:
        if not isinstance(paths, list):
            return paths
        return [
            p if not isinstance(p, str) or p.startswith(("/", "~", "$")) else str(base_dir / p) for p in paths
        ]

    host = data.get("host")
    if isinstance(host, dict) and isinstance(host.get("skills"), dict) and "paths" in host["skills"]:
        host["skills"]["paths"] = anchored(host["skills"]["paths"])
    for agent in (data.get("agents") or {}).values() if isinstance(data.get("agents"), dict) else ():
        for cap in agent.get("capabilities") or () if isinstance(agent, dict) else ():
            if isinstance(cap, dict) and "skills" in cap:
                cap["skills"] = anchored(cap["skills"])


def reference_problems(manifest: Manifest) -> list[str]:
    """`key.path: problem` lines for a manifest that arrived already parsed (no YAML, so no lines)."""
    return [f"{'.'.join(loc)}: {message}" for loc, message in _check_references(manifest)]


Problems = list[tuple[tuple[str, ...], str]]


def _check_references(manifest: Manifest) -> Problems:
    """Cross-references pydantic cannot see: aliases (and their cycles), MCP server, agent and job names."""
    models = manifest.host.models
    specs: list[tuple[tuple[str, ...], str]] = [
        (("host", "models", "aliases", alias), alias) for alias in models.aliases
    ]
    if models.defaults.model:
        specs.append((("host", "models", "defaults", "model"), models.defaults.model))
    specs += [
        (("agents", name, "model"), agent.model) for name, agent in manifest.agents.items() if agent.model
    ]
    problems: Problems = []
    for loc, spec in specs:
        try:
            resolve_model(models, spec)
        except AliasError as exc:
            problems.append((loc, str(exc)))
    for name in manifest.agents:
        problems.extend(_capability_problems(manifest, name))
    for name, team in manifest.teams.items():
        if name in manifest.agents:
            problems.append((("teams", name), "a team and an agent share this name"))
        problems.extend(
            (
                ("teams", name, "members", str(j)),
                f"unknown agent {member!r}{did_you_mean(member, manifest.agents)}"
                " (teams have agents as members)",
            )
            for j, member in enumerate(team.members)
            if member not in manifest.agents
        )
    problems.extend(_job_problems(manifest))
    return problems


def _capability_problems(manifest: Manifest, name: str) -> Problems:
    """An agent's capabilities name MCP servers and subagents that exist."""
    problems: Problems = []
    for i, cap in enumerate(manifest.agents[name].capabilities):
        where = ("agents", name, "capabilities", str(i))
        servers: dict[tuple[str, ...], str] = {("mcp",): cap.mcp} if isinstance(cap, McpCapability) else {}
        if isinstance(cap, WebCapability) and cap.web.search and cap.web.search.mcp:
            servers[("web", "search", "mcp")] = cap.web.search.mcp
        known = manifest.host.mcp_servers
        for at, server in servers.items():
            if server not in known:
                hint = did_you_mean(server, known)
                problems.append(
                    ((*where, *at), f"unknown MCP server {server!r}{hint} (known: {listing(known)})")
                )
        if isinstance(cap, PydanticCapability):
            from agentwolf.config.capabilities import check  # pydantic-ai only for configs that use it

            if (problem := check(cap)) is not None:
                problems.append((where, problem))
        if isinstance(cap, SubagentCapability):
            problems.extend(
                ((*where, "subagent", str(j)), f"unknown agent {sub!r}{did_you_mean(sub, manifest.agents)}")
                for j, sub in enumerate(cap.subagent)
                if sub not in manifest.agents
            )
    return problems


def _job_problems(manifest: Manifest) -> Problems:
    """Jobs name an agent or team (a team's job has no `output`); hooks name a job (giving only its
    variables, and every one without a default) or a session."""
    problems: Problems = []
    runnable = [*manifest.agents, *manifest.teams]
    for name, job in manifest.jobs.items():
        if job.agent not in runnable:
            unknown = (
                f"unknown agent {job.agent!r}{did_you_mean(job.agent, runnable)} (known: {listing(runnable)})"
            )
            problems.append((("jobs", name, "agent"), unknown))
        elif job.output is not None and job.agent in manifest.teams:
            problems.append(
                (
                    ("jobs", name, "output"),
                    f"{job.agent!r} is a team: a team answers its members' text, never a checked "
                    "result; give `output` to a job of an agent (a team member, or an agent that "
                    "delegates to the team's members as subagents)",
                )
            )
    for name, hook in manifest.hooks.items():
        if hook.job is None:
            continue
        target = manifest.jobs.get(hook.job)
        if target is None:
            problems.append(
                (
                    ("hooks", name, "job"),
                    f"unknown job {hook.job!r}{did_you_mean(hook.job, manifest.jobs)}"
                    f" (known: {listing(manifest.jobs)})",
                )
            )
            continue
        for var in hook.vars:
            if var not in target.vars:
                problems.append((("hooks", name, "vars", var), f"job {hook.job!r} has no variable {var!r}"))
        missing = [v for v, spec in target.vars.items() if spec.default is None and v not in hook.vars]
        if missing:
            problems.append(
                (("hooks", name, "vars"), f"job {hook.job!r} needs {', '.join(missing)}: give them here")
            )
    return problems


def _format(source: str, lines: dict[tuple[str, ...], int], problems: Problems) -> ManifestError:
    """One `file:line: key.path: problem` line per problem, in the file's order."""
    unique = dict.fromkeys(problems)  # a union's members repeat the same complaint
    located = sorted(
        (Problem(_nearest_line(lines, loc), ".".join(loc) or "<root>", message) for loc, message in unique),
        key=lambda p: p.line,
    )
    return ManifestError("\n".join(f"{source}:{p.line}: {p.path}: {p.message}" for p in located), located)


def _keys_at(loc: tuple[str, ...]) -> set[str]:
    """The keys the manifest allows at `loc` (the fields of the models found there, walking through
    maps, lists and unions), for "did you mean"."""
    kinds: list[Any] = [Manifest]
    for part in loc:
        kinds = [inner for kind in _members(kinds) if (inner := _inside(kind, part)) is not None]
    return {name for kind in _members(kinds) if _is_model(kind) for name in kind.model_fields}


def _members(kinds: list[Any]) -> list[Any]:
    """Unions (`X | None` too) as their members; a Literal's values are dropped on the way."""
    out: list[Any] = []
    for kind in kinds:
        out += (
            [kind] if _is_model(kind) or get_origin(kind) in (dict, list) else _members(list(get_args(kind)))
        )
    return out


def _inside(kind: Any, part: str) -> Any:
    """The type at key `part` of a model, or of a map's value or a list's item."""
    if _is_model(kind):
        field = kind.model_fields.get(part)
        return field.annotation if field else None
    return get_args(kind)[-1]


def _is_model(kind: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _nearest_line(lines: dict[tuple[str, ...], int], loc: tuple[str, ...]) -> int:
    while loc and loc not in lines:
        loc = loc[:-1]
    return lines.get(loc, 1)


def _is_union_tag(part: Any) -> bool:
    """Pydantic adds union member names (`str`, `FallbackAlias`) to error locations; drop them."""
    return isinstance(part, str) and (part[:1].isupper() or part in {"str", "int", "float"})


def _line_index(node: yaml.Node | None) -> dict[tuple[str, ...], int]:
    """Map every key path in the YAML document to its 1-based line."""
    import yaml  # loaded by parse_manifest already

    index: dict[tuple[str, ...], int] = {}

    def walk(n: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(n, yaml.MappingNode):
            for key, value in n.value:
                child = (*path, str(key.value))
                index[child] = key.start_mark.line + 1
                walk(value, child)
        elif isinstance(n, yaml.SequenceNode):
            for i, item in enumerate(n.value):
                child = (*path, str(i))
                index[child] = item.start_mark.line + 1
                walk(item, child)

    if node is not None:
        index[()] = node.start_mark.line + 1
        walk(node, ())
    return index
