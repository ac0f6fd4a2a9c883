"""Manifest models: the RFC-0050 layout (`host:` + `agents:`), validated with pydantic.

Values keep their `${VAR}` placeholders: the manifest travels through workflow history and must
never carry a secret. Placeholders are resolved on the worker (`placeholders.resolve`).

Over 500 lines on purpose: the schema reads top to bottom as a manifest does, each field documented
where it is declared (the JSON Schema's descriptions); its parts with rules of their own live beside
it (quotas.py, jobs.py, origins.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    RootModel,
    Tag,
    field_validator,
    model_validator,
)

from agentwolf.config.jobs import Hook, Job
from agentwolf.config.quotas import EndpointQuota, renamed
from agentwolf.config.suggest import did_you_mean, listing


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ProviderConfig(_Strict):
    """How to reach one model provider: its key and, for OpenAI-compatible servers, its endpoint."""

    api_key: str | None = None
    """The provider's API key, as a placeholder (`${OPENAI_API_KEY}`): the worker resolves it, within its
    policy."""
    base_url: str | None = None
    """The provider's endpoint, for OpenAI-compatible servers (Ollama, vLLM, a proxy). A manifest that sets
    it gets only the `api_key` it names, never the worker's own key."""


class FallbackAlias(_Strict):
    """An alias that names a chain of models: when one fails, the next answers."""

    type: Literal["fallback"]
    """Always `fallback`."""
    models: list[str] = Field(min_length=1)
    """Model specs or aliases tried in order: the next one answers when one fails."""


class ModelDefaults(_Strict):
    """Model settings for agents that set none themselves."""

    model: str | None = None
    """The model of agents that name none: a spec (`openai:gpt-4o-mini`) or an alias."""
    temperature: float | None = None
    """Sampling temperature of agents that set none."""
    max_tokens: int | None = None
    """Most tokens of a model answer, for agents that set none."""


class ModelPrice(_Strict):
    """USD per million tokens, for models genai-prices does not know (local or private ones) or to
    override its figure."""

    input_per_mtok: float = Field(ge=0)
    """USD per million input tokens."""
    output_per_mtok: float = Field(ge=0)
    """USD per million output tokens."""


class ModelsConfig(_Strict):
    """The models this config may use: providers, aliases, defaults, prices, context windows and
    provider quotas."""

    providers: dict[str, ProviderConfig] = {}
    """Provider settings by provider name (`openai`, `anthropic`...): key and endpoint. A provider without
    an entry reads its usual variable (OPENAI_API_KEY...) on the worker."""
    aliases: dict[str, str | FallbackAlias] = {}
    """Names for model specs (`fast: openai:gpt-4o-mini`) or fallback chains, usable wherever a model is
    named."""
    defaults: ModelDefaults = ModelDefaults()
    """Model settings for agents that set none."""
    # Left out of the dump when empty, so configs written before it keep their identity.
    prices: dict[str, ModelPrice] = Field({}, exclude_if=lambda v: not v)
    """Prices by model spec (`local:demo`) or alias, for models genai-prices does not know or to
    override its figure."""
    context_windows: dict[str, int] = Field({}, exclude_if=lambda v: not v)
    """Tokens a model takes, by model spec or alias name (its models), for models genai-prices does
    not know or to override its figure: compaction keeps requests under it."""
    quotas: list[EndpointQuota] = Field([], exclude_if=lambda v: not v)
    """Provider quotas (requests, tokens per window, concurrency) by model pattern; the worker
    policy's win. Formerly `limits:` (still read, with a deprecation warning)."""

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, data: Any) -> Any:
        return renamed(data, "limits", "quotas", "models.")


class McpServerConfig(_Strict):
    """One tool source: an MCP server (a stdio `command` or a streamable HTTP `url`), or a worker
    `plugin`'s Python function tools."""

    command: str | None = None
    """The program of a stdio MCP server (it must be allowed by the worker's policy and
    `allowed_commands`)."""
    args: list[str] = []
    """Its arguments."""
    env: dict[str, str] = {}
    """Environment variables for the server (placeholders allowed); of the worker's own it sees only
    basic ones such as HOME and PATH."""
    cwd: str | None = None
    """Its working directory."""
    url: str | None = None
    """The URL of a streamable HTTP MCP server."""
    headers: dict[str, str] = {}
    """HTTP headers sent to a `url` server (placeholders allowed, e.g. an Authorization header)."""
    connect_timeout: float = 15.0
    """Seconds to wait for the server to start and answer."""
    call_timeout: float = 300.0
    """Seconds a tool call may take."""
    # Local activities: no server round trip; a result is durable only when the workflow task
    # completes, so a worker lost meanwhile runs the call again (hence: only repeat-safe tools).
    fast_call_ms: int = 200
    """Milliseconds: a tool safe to run twice whose last call took less runs next time without a
    round trip through Temporal; 0: never."""
    repeat_safe: list[str] | None = None
    """Tool names (globs) safe to run twice; None trusts the server's annotations (`readOnlyHint`,
    `idempotentHint`); `[]` declares none safe."""
    # Left out of the dump when unset, so configs written before it keep their identity.
    plugin: str | None = Field(None, exclude_if=lambda v: v is None)
    """A plugin loaded on the worker (its module or entry point name), instead of a server: its
    function tools run in the worker."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if sum(v is not None for v in (self.command, self.url, self.plugin)) != 1:
            raise ValueError(
                "an MCP server needs exactly one of `command` (stdio), `url` (streamable HTTP) or "
                "`plugin` (a worker plugin's function tools)"
            )
        return self


class SessionSettings(_Strict):
    """Limits of each session, and when it snapshots itself into a fresh run (at idle points only)."""

    continue_as_new_bytes: int = 4_000_000
    """History size (bytes) past which an idle session snapshots itself into a fresh run."""
    events_kept: int = Field(1000, ge=0)
    """Events a continue-as-new carries over; older offsets are truncated."""
    max_queued: int = Field(100, ge=1)
    """Prompts waiting behind a running turn; more are refused."""
    max_steers: int = Field(100, ge=1)
    """Steers waiting for the next model request; more are refused."""
    max_subagent_depth: int = Field(3, ge=0)
    """How deep subagents may delegate to their own subagents."""
    # Left out of the dump when unset, so configs written before it keep their identity.
    idle_close_after: timedelta | None = Field(None, gt=timedelta(0), exclude_if=lambda v: v is None)
    """Close a session that has been idle this long (seconds or ISO 8601, `PT8H`); unset: never. The
    count starts again after each turn and each snapshot."""


class McpCapability(_Strict):
    """`{mcp: name}`: the agent gets the tools of a server declared under `host.mcp_servers`."""

    mcp: str
    """The name of a server under `host.mcp_servers`: the agent gets its tools."""


class SubagentCapability(_Strict):
    """`{subagent: [reviewer, tester]}`: a `delegate(agent, task)` tool running them as child sessions."""

    subagent: list[str] = Field(min_length=1)
    """Agents this agent may delegate tasks to."""


DEFAULT_SKILL_PATHS = [".claude/skills", "~/.claude/skills"]


class SkillsCapability(_Strict):
    """`{skills: [./skills, ~/.claude/skills]}` or `{skills: default}` (project, then user folder).

    Earlier folders win a name clash (reported, never silent). `${tenant}` in a path is replaced by
    the session's tenant, so tenants can have their own skills.
    """

    skills: list[str] | Literal["default"]
    """Skill folders (SKILL.md folders), or `default`."""

    @property
    def paths(self) -> list[str]:
        return DEFAULT_SKILL_PATHS if self.skills == "default" else self.skills


class CodeModeSettings(_Strict):
    """What a code-mode script may do: its tool calls, its time running in the sandbox, its memory."""

    tools: list[str] | None = None
    """Tool names (globs) the script may call; None: every tool of the agent's other capabilities."""
    max_calls: int = Field(50, ge=1, le=1000)
    """Tool calls one script may make; the next one raises inside the script."""
    timeout_s: float = Field(30.0, gt=0, le=600)
    """Seconds the script may compute (waiting for its tool calls does not count)."""
    memory_mb: int = Field(64, ge=1, le=4096)
    """Memory the script's interpreter may use, in MB."""


class CodeModeCapability(_Strict):
    """`{code_mode: {max_calls: 50}}`: the model is offered `run_code(code)` instead of the tools; the
    script calls them as Python functions, each an ordinary (recorded, permitted) tool call."""

    code_mode: CodeModeSettings = CodeModeSettings()
    """The script's limits and the tools it may call."""


class WebSearchSettings(_Strict):
    """Where `web_search` asks: an HTTP search API answering in Brave Search's JSON shape (`url`, its
    key a `${VAR}` the worker policy allows), or a tool of an MCP server taking `query`."""

    url: str | None = None
    """An HTTP search API's endpoint, answering in Brave Search's JSON shape."""
    api_key: str | None = None
    """Its key: a `${VAR}` placeholder the worker policy allows."""
    mcp: str | None = None
    """Or: an MCP server of `host.mcp_servers` with a search tool."""
    tool: str = "search"
    """That server's tool, taking `query`."""

    @model_validator(mode="after")
    def _one_provider(self) -> WebSearchSettings:
        if (self.url is None) == (self.mcp is None):
            raise ValueError("web search needs exactly one of `url` (an HTTP search API) or `mcp` (a server)")
        return self


class WebSettings(_Strict):
    """What an agent with the web capability may do: fetch pages, search, and their limits."""

    fetch: bool = True
    """Offer `web_fetch(url, max_chars)`: a page as Markdown, where the worker policy lets it go."""
    search: WebSearchSettings | None = None
    """Offer `web_search(query)` through this provider; none: no search."""
    max_bytes: int = Field(5_000_000, ge=1000)
    """A page is read up to this many bytes; the rest is left unread."""
    timeout_s: float = Field(30.0, gt=0, le=300)
    """A fetch (every redirect included) ends after this long."""


class WebCapability(_Strict):
    """`{web: {fetch: true, search: {url: ..., api_key: ${KEY}}}}`: `web_fetch(url, max_chars)` (the page as
    Markdown) and `web_search(query)`. Where a fetch may go is the worker policy's call (`web_private`)."""

    web: WebSettings = WebSettings()
    """What the agent may do on the web: fetch, search, and their limits."""


class WorkspaceSettings(_Strict):
    """`workspace: {...}`: the session gets a folder of files and a shell in a sandbox, with the
    tools `read_file`, `write_file`, `edit_file`, `list_files`, `grep` and `bash`; the folder is
    snapshotted at each turn's end, so it survives a worker loss and forks with the session."""

    bash_timeout_s: float = Field(120.0, gt=0, le=3600)
    """Seconds a `bash` command may run (the model may ask for less)."""
    cpu_s: int = Field(60, ge=1, le=3600)
    """CPU seconds each process of a command may use."""
    memory_mb: int = Field(1024, ge=16, le=65536)
    """Address space each process of a command may map, in MB."""
    processes: int = Field(64, ge=4, le=4096)
    """Processes a command may run at once."""
    file_mb: int = Field(100, ge=1, le=100_000)
    """The largest file a command may write, in MB."""
    disk_mb: int = Field(500, ge=1, le=1_000_000)
    """What the workspace may hold on disk, in MB."""


WOLF_CAPABILITIES = ("mcp", "subagent", "skills", "code_mode", "web")
"""The keys of AgentWolf's own capabilities; any other entry is a pydantic-ai capability spec."""


class PydanticCapability(RootModel[str | dict[str, Any]]):
    """A pydantic-ai capability spec, written as pydantic-ai's agent specs write it: `Thinking` (no
    arguments), `{Thinking: high}` (one positional argument) or `{Thinking: {effort: high}}` (keyword
    arguments). Its name is checked, and it is built, where the types are known: when a config loads
    (pydantic-ai's built-ins and `agentwolf.capabilities` entry points) and on the worker (plugins too)."""

    model_config = ConfigDict(frozen=True, json_schema_extra=lambda schema: _spec_schema(schema))

    @model_validator(mode="after")
    def _one_name(self) -> PydanticCapability:
        if isinstance(self.root, dict) and len(self.root) != 1:
            raise ValueError(
                f"a capability is one name with its arguments ({{Thinking: {{effort: high}}}}), got keys "
                f"{', '.join(map(str, self.root)) or 'none'}"
            )
        return self

    @property
    def name(self) -> str:
        return self.root if isinstance(self.root, str) else next(iter(self.root))


def _spec_schema(schema: dict[str, Any]) -> None:
    """A name, or one name (not one of AgentWolf's keys) with its arguments: one of `capabilities`'
    alternatives only, as the schema's `oneOf` needs."""
    schema.pop("anyOf", None)
    schema["anyOf"] = [
        {"type": "string"},
        {
            "type": "object",
            "minProperties": 1,
            "maxProperties": 1,
            "not": {"anyOf": [{"required": [key]} for key in WOLF_CAPABILITIES]},
        },
    ]


def _capability_kind(value: Any) -> str:
    """AgentWolf's own by their key (so an ill-typed one gets its own model's error), else pydantic-ai's."""
    if isinstance(value, BaseModel):
        kinds: dict[type[BaseModel], str] = {
            McpCapability: "mcp",
            SubagentCapability: "subagent",
            SkillsCapability: "skills",
            CodeModeCapability: "code_mode",
            WebCapability: "web",
            PydanticCapability: "pydantic",
        }
        return kinds[type(value)]
    own = [key for key in value if key in WOLF_CAPABILITIES] if isinstance(value, dict) else []
    return own[0] if own else "pydantic"


Capability = Annotated[
    Annotated[McpCapability, Tag("mcp")]
    | Annotated[SubagentCapability, Tag("subagent")]
    | Annotated[SkillsCapability, Tag("skills")]
    | Annotated[CodeModeCapability, Tag("code_mode")]
    | Annotated[WebCapability, Tag("web")]
    | Annotated[PydanticCapability, Tag("pydantic")],
    Discriminator(_capability_kind),
]


class MemorySettings(_Strict):
    """`memory: {tools: both}` on an agent: long-term memory across its owner's sessions
    (docs/guides/memory.md). Off unless set. What the model reads and writes is scoped by tenant, owner
    (who started the session) and agent, never by its arguments."""

    tools: Literal["file", "record", "both"] = "both"
    """`file`: one `memory` tool over a `/memories` tree (Anthropic's memory tool commands); `record`:
    `remember`, `search_memory`, `forget`; `both`."""
    shared: list[Literal["agent", "tenant"]] = []
    """Shared layers the agent also reads: `agent` (every owner of this agent), `tenant` (everyone of the
    tenant). Read-only to sessions unless `write_shared` names them; operators fill them with
    `wolf memory import --shared`."""
    write_shared: list[Literal["agent", "tenant"]] = []
    """Shared layers `remember(..., layer=...)` may write to."""
    search_results: int = Field(10, ge=1, le=50)
    """Hits `search_memory` returns when the model does not say (`k`)."""
    extract: Literal["auto", "review", "off"] = "off"
    """At session close, ask the agent's model (at background priority) for facts about the user from
    the session's turns: `auto` keeps them (source `extracted`), `review` keeps them pending (shown by
    `wolf memory ls`, never searched), `off` asks nothing."""

    @field_validator("extract", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        """YAML reads a bare `off` as false: it means `off` here."""
        return "off" if value is False else value


class MemoryStoreConfig(_Strict):
    """`host.memory: {store: postgresql://...}`: where the worker keeps long-term memory for this config."""

    store: str
    """`sqlite:///path/memory.db` or `postgresql://user@host/db` (a `${VAR}` the worker policy allows for
    credentials). Unset `host.memory`: `WOLF_MEMORY_STORE`, else SQLite in the worker's data dir."""


class SkillSettings(_Strict):
    """Skill folders every agent of the host sees (after its own), and how skills are presented."""

    paths: list[str] = []
    """Skill folders every agent sees, after its own."""
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
    """A regular expression for the tool's name (`write_file`, `git:.*`)."""
    args: dict[str, str] = {}
    """Regular expressions by argument name; the rule applies only when each matches the argument's text."""
    action: Literal["allow", "confirm", "deny"]
    """`allow` runs the call, `confirm` waits for a person (`wolf approve`/`wolf deny`), `deny` refuses it."""

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
    """The action for a call no rule matches."""
    rules: list[PermissionRule] = []
    """The rules, checked against every tool call."""
    approval_timeout: float | None = Field(None, gt=0)
    """Seconds to wait for a person; None waits for as long as it takes."""
    timeout_outcome: Literal["allow", "deny"] = "deny"
    """What happens when `approval_timeout` passes without an answer."""

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
    """What the worker runs for this config: models and providers, MCP servers, session limits, skills."""

    models: ModelsConfig = ModelsConfig()
    """Providers, aliases, defaults and prices of models."""
    mcp_servers: dict[str, McpServerConfig] = {}
    """Tool sources by name, for agents' `{mcp: name}` capabilities."""
    sessions: SessionSettings = SessionSettings()
    """Session limits and snapshots."""
    permissions: Permissions = Permissions()
    """Tool-call rules for agents without their own."""
    skills: SkillSettings = SkillSettings()
    """Skill folders for every agent, and how skills are presented."""
    allowed_commands: list[str] | None = None
    """When set, the only stdio commands MCP servers (also those skills bring) may run; it can only
    narrow the worker's policy, never widen it."""
    memory: MemoryStoreConfig | None = Field(None, exclude_if=lambda v: v is None)
    """Where agents' long-term memory lives (unset: the worker's default store)."""

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
    """`sequential`: each member gets the previous one's output; `parallel`: all at once."""
    members: list[str] = Field(min_length=1)
    """The agents of the team."""


class Limits(_Strict):
    """When a turn or a session stops, and what it may spend: steps, budgets, the loop guard, tool
    output size, context compaction."""

    max_steps: int = Field(40, ge=1)
    """Model requests a turn may make before it stops."""
    tool_output_chars: int = Field(65_536, ge=1000)
    """Longer tool results reach the model cut, with a note; the transcript keeps them whole and the
    model reads on with `read_tool_output(call_id, offset)`."""
    token_budget: int | None = Field(None, ge=1)
    """Tokens a turn may use before it stops; unset: no limit."""
    usd_budget_turn: float | None = Field(None, gt=0, exclude_if=lambda v: v is None)
    """USD a turn may spend, its subagents included (a warning at 80 %, a clean stop at 100 %)."""
    usd_budget_session: float | None = Field(None, gt=0, exclude_if=lambda v: v is None)
    """USD the session may spend over all its turns, its subagents included."""
    loop_warn: int = Field(3, ge=1)
    """The same tool call repeated this many times in a row: the model is warned."""
    loop_stop: int = Field(5, ge=1)
    """The same tool call repeated this many times in a row: the turn stops."""
    max_parallel_tools: int = Field(16, ge=1, le=256, exclude_if=lambda v: v == 16)
    """A step's tool calls (subagents included) that run at once; the others wait their turn."""
    # Temporal fails a workflow task that leaves more than 2,000 activities (or children) pending,
    # for ever; both limits keep a step far below. Defaults are left out of the dump, so configs
    # written before them keep their identity.
    max_tool_calls_per_step: int = Field(128, ge=1, le=1000, exclude_if=lambda v: v == 128)
    """Calls past this many in one model answer are not run: each answers a tool error asking the
    model to batch them."""
    compaction: Literal["auto", "off"] = Field("auto", exclude_if=lambda v: v == "auto")
    """`off`: the model is always sent the whole transcript (a request past the window fails)."""
    compact_at: float = Field(0.8, gt=0, le=1, exclude_if=lambda v: v == 0.8)
    """Compact before a request would pass this share of the model's context window."""
    compact_model: str | None = Field(None, exclude_if=lambda v: v is None)
    """The model (spec or alias) that summarises older turns; default: the agent's own."""

    @field_validator("compaction", mode="before")
    @classmethod
    def _yaml_switch(cls, value: object) -> object:
        """YAML reads a bare `off` (and `on`) as a boolean: take it as the word written."""
        return {False: "off", True: "auto"}.get(value, value) if isinstance(value, bool) else value


class AcpAgentConfig(_Strict):
    """An external agent (Claude Code, Gemini CLI, Codex, ...) driven over the Agent Client Protocol:
    the stdio command of its ACP adapter, held to the worker policy like an MCP server's."""

    command: str
    """The agent's ACP adapter (`claude-agent-acp`, `gemini`, `codex-acp`), run over stdio."""
    args: list[str] = []
    """Its arguments (`[--acp]` for Gemini CLI)."""
    env: dict[str, str] = {}
    """Variables it is given (`${VAR}` placeholders the worker policy allows), like an MCP server's."""
    cwd: str | None = None
    """The working directory of its ACP session (and process); default: the worker's. Not an
    untrusted checkout unless `project_settings` stays off and `mode` is set (docs: external agents)."""
    mode: str | None = Field("default", exclude_if=lambda v: v == "default")
    """The ACP session mode AgentWolf sets on each new or loaded session (`session/set_mode`), whatever
    the agent's own or its working directory's settings chose: `default` (Claude's adapters: ask
    before any tool the operator's settings do not allow). Another mode the agent does not offer
    fails the turn; null leaves the agent's own choice."""
    project_settings: bool = Field(False, exclude_if=lambda v: not v)
    """Let the agent read its working directory's own settings (Claude's `.claude/settings*.json`, with
    their allow lists and hooks, and CLAUDE.md): only for a checkout you trust. Off, Claude-based
    adapters are told to read only the settings in the agent's own home (`settingSources: [user]`)."""


class AgentConfig(_Strict):
    """One agent: its model, instructions, tools and capabilities, permissions and limits. Every key
    may be left out: an empty agent uses the default model with no tools."""

    model: str | None = None
    """A model spec (`openai:gpt-4o-mini`, `anthropic:claude-sonnet-4-5`) or an alias; unset:
    `host.models.defaults.model`."""
    instructions: str = ""
    """The system instructions."""
    capabilities: list[Capability] = []
    """What the agent can use: `{mcp: server}`, `{skills: [folders]}`, `{subagent: [agents]}`, `{web: ...}`,
    `{code_mode: ...}`, and pydantic-ai capabilities as its agent specs write them (`{Thinking: high}`,
    `{WebSearch: {...}}`, a plugin's or an `agentwolf.capabilities` entry point's by its name)."""
    permissions: Permissions | None = None
    """Overrides `host.permissions` for this agent."""
    limits: Limits = Limits()
    """Steps, tokens, money and tool calls a turn may use."""
    double_texting: Literal["queue", "reject", "interrupt"] = "queue"
    """A prompt that arrives while a turn runs: `queue` it, `reject` it, or `interrupt` the turn and run it
    next."""
    temperature: float | None = None
    """Sampling temperature."""
    max_tokens: int | None = None
    """Most tokens of a model answer."""
    model_settings: dict[str, Any] = Field({}, exclude_if=lambda v: not v)
    """pydantic-ai model settings laid under `temperature` and `max_tokens` (a pydantic-ai agent
    spec's `model_settings`)."""
    stream: bool = True
    """Stream model responses to followers as they come (providers that cannot stream answer whole)."""
    description: str = Field("", exclude_if=lambda v: not v)
    """What the agent is for (a Markdown agent's `description`), shown to people choosing one."""
    tools: list[str] | None = Field(None, exclude_if=lambda v: v is None)
    """Tool-name globs (the model-facing name, `server:tool` or the bare name) the agent is offered;
    None offers every tool its capabilities bring. Set by a Markdown agent's `tools`."""
    acp: AcpAgentConfig | None = Field(None, exclude_if=lambda v: v is None)
    """Set: the agent is an external ACP agent; its turns run in its process, not a model loop."""
    workspace: WorkspaceSettings | None = Field(None, exclude_if=lambda v: v is None)
    """Set: the session has a sandboxed workspace (files and a shell) and its six tools."""
    # description, tools, acp and file are left out of the dump when unset, so configs written
    # before them keep their identity.
    memory: MemorySettings | None = Field(None, exclude_if=lambda v: v is None)
    """Long-term memory tools (`{tools: both}`); unset: none."""
    file: str | None = Field(None, exclude_if=lambda v: v is None)
    """The Markdown or agent spec file the agent came from (`agents_from`): the worker reads it again
    at compile, so an edit reaches the next turn."""


class Manifest(_Strict):
    """A config (`wolf.yaml`): the agents and teams you can run, and what the worker runs them with
    (`host`). Secrets stay `${VAR}` placeholders here; the worker fills them in under its own policy."""

    host: HostConfig = HostConfig()
    """What the worker runs for this config: models, MCP servers, sessions, permissions, skills."""
    agents: dict[str, AgentConfig] = {}
    """Agents by name."""
    teams: dict[str, Team] = {}
    """Teams of agents by name; a team is started like an agent."""
    jobs: dict[str, Job] = {}
    """Prompt templates with typed variables, run by `wolf run`, schedules and hooks."""
    hooks: dict[str, Hook] = {}
    """Webhooks (`POST /hooks/<name>` on `wolf serve`) that run a job or prompt a session."""
    agents_from: list[str] | Literal["default"] = Field([], exclude_if=lambda v: not v)
    """Folders of Markdown agent files (`*.md`, Claude Code's format) and pydantic-ai agent spec files
    (`*.yaml`, `*.yml`, `*.json`: what `Agent.from_file` reads), read at load into `agents` (agents
    written here win a name clash); `default` is `.claude/agents`, then `~/.claude/agents`."""

    def job(self, name: str) -> Job:
        """The job `name`, or a ValueError listing the known ones."""
        if name not in self.jobs:
            hint = did_you_mean(name, self.jobs)
            raise ValueError(f"unknown job {name!r}{hint} (jobs in this config: {listing(self.jobs)})")
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
