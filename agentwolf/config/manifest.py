"""Manifest models: the RFC-0050 layout (`host:` + `agents:`), validated with pydantic.

Values keep their `${VAR}` placeholders: the manifest travels through workflow history and must
never carry a secret. Placeholders are resolved on the worker (`placeholders.resolve`).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentwolf.config.jobs import Hook, Job
from agentwolf.config.limits import EndpointLimits


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProviderConfig(_Strict):
    api_key: str | None = None
    base_url: str | None = None


class FallbackAlias(_Strict):
    type: Literal["fallback"]
    models: list[str] = Field(min_length=1)


class ModelDefaults(_Strict):
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None


class ModelPrice(_Strict):
    """USD per million tokens, for models genai-prices does not know (local or private ones) or to
    override its figure."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)


class ModelsConfig(_Strict):
    providers: dict[str, ProviderConfig] = {}
    aliases: dict[str, str | FallbackAlias] = {}
    defaults: ModelDefaults = ModelDefaults()
    prices: dict[str, ModelPrice] = Field({}, exclude_if=lambda v: not v)
    """By model spec (`local:demo`) or alias name (its models); left out of the dump when empty, so
    configs written before it keep their identity."""
    limits: list[EndpointLimits] = Field([], exclude_if=lambda v: not v)
    """Provider limits by model pattern (agentwolf/config/limits.py); the worker policy's win."""


class McpServerConfig(_Strict):
    """One tool source: an MCP server (a stdio `command` or a streamable HTTP `url`), or a worker
    `plugin`'s Python function tools (agentwolf/plugins.py)."""

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = {}
    connect_timeout: float = 15.0
    call_timeout: float = 300.0
    fast_call_ms: int = 200
    """A tool safe to run twice whose last call took less than this runs next time as a local
    activity (no server round trip; its result is durable only when the workflow task completes, so
    a worker lost meanwhile runs it again); 0 always uses regular activities."""
    repeat_safe: list[str] | None = None
    """Tool names (globs) safe to run twice; None trusts the server's annotations (`readOnlyHint`,
    `idempotentHint`); `[]` declares none safe."""
    plugin: str | None = Field(None, exclude_if=lambda v: v is None)
    """A plugin loaded on the worker (its module or entry point name): its function tools run in the
    worker. Left out of the dump when unset, so configs written before it keep their identity."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if sum(v is not None for v in (self.command, self.url, self.plugin)) != 1:
            raise ValueError(
                "an MCP server needs exactly one of `command` (stdio), `url` (streamable HTTP) or "
                "`plugin` (a worker plugin's function tools)"
            )
        return self


class SessionSettings(_Strict):
    """When a session snapshots itself with continue-as-new (at idle points only)."""

    continue_as_new_bytes: int = 4_000_000
    events_kept: int = Field(1000, ge=0)
    """Events a continue-as-new carries over; older offsets are truncated."""
    max_queued: int = Field(100, ge=1)
    """Prompts waiting behind a running turn; more are refused."""
    max_steers: int = Field(100, ge=1)
    """Steers waiting for the next model request; more are refused."""
    max_subagent_depth: int = Field(3, ge=0)
    idle_close_after: timedelta | None = Field(None, gt=timedelta(0), exclude_if=lambda v: v is None)
    """Close a session that has been idle this long (seconds or ISO 8601, `PT8H`); unset: never. Counted
    by a timer while no turn runs or waits; a continue-as-new starts the count again. Left out of the
    dump when unset, so configs written before it keep their identity."""


class McpCapability(_Strict):
    mcp: str


class SubagentCapability(_Strict):
    """`{subagent: [reviewer, tester]}`: a `delegate(agent, task)` tool running them as child sessions."""

    subagent: list[str] = Field(min_length=1)


DEFAULT_SKILL_PATHS = [".claude/skills", "~/.claude/skills"]


class SkillsCapability(_Strict):
    """`{skills: [./skills, ~/.claude/skills]}` or `{skills: default}` (project, then user folder).

    Earlier folders win a name clash (reported, never silent). `${tenant}` in a path is replaced by
    the session's tenant, so tenants can have their own skills.
    """

    skills: list[str] | Literal["default"]

    @property
    def paths(self) -> list[str]:
        return DEFAULT_SKILL_PATHS if self.skills == "default" else self.skills


Capability = McpCapability | SubagentCapability | SkillsCapability


class SkillSettings(_Strict):
    """Skill folders every agent of the host sees (after its own), and how skills are presented."""

    paths: list[str] = []
    catalog_bytes: int = Field(50_000, ge=200)
    """Budget of the `<available-skills>` catalog in the instructions."""
    max_composition_depth: int = Field(3, ge=1)
    """Warn when a chain of extensions (a skill bringing an MCP server serving skills...) is deeper."""
    allow_mcp_servers: bool = False
    """Let skills start the MCP servers their frontmatter declares (`allowed_commands` still applies;
    `${VAR}` is never resolved for them, so a skill cannot read the worker's secrets)."""


class PermissionRule(_Strict):
    """`tool` (and each `args` value, as text) must fully match its regular expression."""

    tool: str
    args: dict[str, str] = {}
    action: Literal["allow", "confirm", "deny"]

    @field_validator("tool")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return _regex(value)

    @field_validator("args")
    @classmethod
    def _args_compile(cls, value: dict[str, str]) -> dict[str, str]:
        return {k: _regex(v) for k, v in value.items()}


def _regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern


class Permissions(_Strict):
    """Ordered rules; of the rules that match, deny beats confirm beats allow; else `default`."""

    default: Literal["allow", "confirm", "deny"] = "allow"
    rules: list[PermissionRule] = []
    approval_timeout: float | None = Field(None, gt=0)
    """Seconds to wait for a person; None waits for as long as it takes."""
    timeout_outcome: Literal["allow", "deny"] = "deny"

    def decide(
        self,
        tool: str,
        arguments: dict[str, object],
        identity: tuple[str, str] | None = None,
        shared: bool = False,
    ) -> str:
        """The action for a call of the model-facing name `tool`, whose `identity` is (server, MCP name).

        Rules match any of the names `tool`, `server:name` and the bare MCP name, so a rule keeps
        holding when a second server listing the same name renames the tool to `server__name`.
        Ambiguity fails closed: an allow that only the bare name matched while several servers list
        that name (`shared`) becomes confirm."""
        bare = identity[1] if identity else tool
        names = dict.fromkeys([tool, *([f"{identity[0]}:{identity[1]}", bare] if identity else [])])
        qualified: dict[str, bool] = {}
        for rule in self.rules:
            if not all(
                key in arguments and re.fullmatch(pattern, str(arguments[key]))
                for key, pattern in rule.args.items()
            ):
                continue
            hits = [name for name in names if re.fullmatch(rule.tool, name)]
            if hits:
                qualified[rule.action] = qualified.get(rule.action, False) or any(
                    name != bare for name in hits
                )
        for action in ("deny", "confirm", "allow"):
            if action in qualified:
                return "confirm" if action == "allow" and shared and not qualified[action] else action
        return self.default


SERVER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class HostConfig(_Strict):
    models: ModelsConfig = ModelsConfig()
    mcp_servers: dict[str, McpServerConfig] = {}
    sessions: SessionSettings = SessionSettings()
    permissions: Permissions = Permissions()
    skills: SkillSettings = SkillSettings()
    allowed_commands: list[str] | None = None
    """When set, the only stdio commands MCP servers (also those skills bring) may run; it can only
    narrow the worker's policy, never widen it."""

    @field_validator("mcp_servers")
    @classmethod
    def _server_names(cls, value: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        # `/` and `@` are kept for the servers skills bring (`<skill>/<server>@<digest>`).
        bad = [name for name in value if not SERVER_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"invalid MCP server names {bad}: use letters, digits, '.', '_' and '-'")
        return value


class Team(_Strict):
    """Members run as child sessions: in turn (each gets the previous output) or all at once."""

    mode: Literal["sequential", "parallel"] = "sequential"
    members: list[str] = Field(min_length=1)


class Limits(_Strict):
    max_steps: int = Field(40, ge=1)
    tool_output_chars: int = Field(65_536, ge=1000)
    """Longer tool results reach the model cut, with a note; the transcript keeps them whole and the
    model reads on with `read_tool_output(call_id, offset)`."""
    token_budget: int | None = Field(None, ge=1)
    usd_budget_turn: float | None = Field(None, gt=0, exclude_if=lambda v: v is None)
    """USD a turn may spend, its subagents included (a warning at 80 %, a clean stop at 100 %)."""
    usd_budget_session: float | None = Field(None, gt=0, exclude_if=lambda v: v is None)
    """USD the session may spend over all its turns, its subagents included."""
    loop_warn: int = Field(3, ge=1)
    loop_stop: int = Field(5, ge=1)
    max_parallel_tools: int = Field(16, ge=1, le=256, exclude_if=lambda v: v == 16)
    """A step's tool calls (subagents included) that run at once; the others wait their turn."""
    max_tool_calls_per_step: int = Field(128, ge=1, le=1000, exclude_if=lambda v: v == 128)
    """Calls past this many in one model answer are not run: each answers a tool error asking the model
    to batch. Temporal fails a workflow task that leaves more than 2,000 activities (or children)
    pending, for ever; both limits keep a step far below. Defaults are left out of the dump, so
    configs written before them keep their identity."""


class AgentConfig(_Strict):
    model: str | None = None
    instructions: str = ""
    capabilities: list[Capability] = []
    permissions: Permissions | None = None
    """Overrides `host.permissions` for this agent."""
    limits: Limits = Limits()
    double_texting: Literal["queue", "reject", "interrupt"] = "queue"
    temperature: float | None = None
    max_tokens: int | None = None
    stream: bool = True
    """Stream model responses to followers as they come (providers that cannot stream answer whole)."""


class Manifest(_Strict):
    host: HostConfig = HostConfig()
    agents: dict[str, AgentConfig] = {}
    teams: dict[str, Team] = {}
    jobs: dict[str, Job] = {}
    hooks: dict[str, Hook] = {}

    def job(self, name: str) -> Job:
        """The job `name`, or a ValueError listing the known ones."""
        if name not in self.jobs:
            raise ValueError(f"unknown job {name!r} (jobs in this config: {sorted(self.jobs) or 'none'})")
        return self.jobs[name]

    def permissions(self, agent: str) -> Permissions:
        config = self.agents.get(agent)
        return config.permissions if config and config.permissions else self.host.permissions

    @cached_property
    def identity(self) -> str:
        """Content hash of the canonical form: the config's identity (a manifest without jobs or
        hooks keeps the identity it had before they existed)."""
        return _digest(self, omit_empty=("jobs", "hooks"))

    @cached_property
    def host_identity(self) -> str:
        """Hash of the `host:` section only: editing an agent must not restart MCP servers."""
        return _digest(self.host)

    def agent_identity(self, agent: str) -> str:
        """Hash of what one agent (or team) runs with: its own section and the host section."""
        own = self.agents.get(agent) or self.teams.get(agent)
        return _digest(_AgentView(host=self.host, agent=own))


class _AgentView(_Strict):
    host: HostConfig
    agent: AgentConfig | Team | None


def _digest(model: BaseModel, omit_empty: tuple[str, ...] = ()) -> str:
    data = model.model_dump(mode="json")
    for key in omit_empty:
        if not data[key]:
            del data[key]
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
