"""What crosses the workflow/activity boundary: small pydantic models, no live objects. They live
with the workflows, the lower layer, so the activities import them downward.

The transcript digest is the contract behind delta transcripts: the workflow and the worker chain
the same hash over the same serialized messages, so a worker can prove its cached copy is the
workflow's prefix before appending only the new messages.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field, PrivateAttr
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse

from agentwolf.config.manifest import CodeModeSettings, Manifest, McpServerConfig
from agentwolf.workflows.compaction import RECALL, ContextView
from agentwolf.workflows.turn_settings import TurnSettings

EMPTY_DIGEST = ""


def chain_digest(digest: str, messages: Sequence[ModelMessage]) -> str:
    """Extend `digest` with `messages`, one message at a time (so any split gives the same hash)."""
    return chained(digest, messages)[0]


def chained(digest: str, messages: Sequence[ModelMessage]) -> tuple[str, int]:
    """`chain_digest`, and the bytes `messages` serialise to (about what they add to a snapshot)."""
    size = 0
    for message in messages:
        body = ModelMessagesTypeAdapter.dump_json([message])
        digest = hashlib.sha256(digest.encode() + body).hexdigest()
        size += len(body)
    return digest, size


class HostRef(BaseModel):
    """Which host (config identity, tenant) serves an activity, and the session asking."""

    config_id: str
    tenant: str
    workflow_id: str


class ToolSpec(BaseModel):
    """One tool as the model sees it (`name`) and where it runs (`server`, `tool`)."""

    name: str
    server: str
    tool: str
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    repeat_safe: bool = False
    """Safe to run twice (annotations or the manifest's `repeat_safe`): may run as a local activity."""


SKILLS = "@skills"
"""The `server` of the skill tools: `load_skill` and `read_skill_file` run as `wolf.read_skill`."""
SUBAGENTS = "@subagents"
"""The `server` of the `delegate` tool: the workflow runs it as child sessions, not over MCP."""
SESSION = "@session"
"""The `server` of `read_tool_output`: the workflow answers it from the transcript."""
CODE = "@code"
"""The `server` of `run_code`: the workflow runs the script in the sandbox, its calls as tool calls."""

READ_TOOL_OUTPUT = ToolSpec(
    name="read_tool_output",
    server=SESSION,
    tool="read_tool_output",
    description="Read more of a tool result that was cut: the characters from `offset` on.",
    parameters={
        "type": "object",
        "properties": {
            "call_id": {"type": "string"},
            "offset": {"type": "integer", "minimum": 0},
            "message": {"type": "integer", "minimum": 0, "description": "As the cut note names it."},
            "part": {"type": "integer", "minimum": 0, "description": "As the cut note names it."},
        },
        "required": ["call_id", "offset"],
    },
)

RECALL_SPEC = READ_TOOL_OUTPUT.model_copy(
    update={
        "name": RECALL,
        "tool": RECALL,
        "description": "Read back, page by page from `offset`, a tool result that was put aside to save "
        "context (its stub names the call id and message) or cut.",
    }
)
"""Offered while the working context stubs a result; answered like `read_tool_output`."""


def delegate_spec(agents: list[str]) -> ToolSpec:
    return ToolSpec(
        name="delegate",
        server=SUBAGENTS,
        tool="delegate",
        description="Hand a self-contained task to another agent and get its final answer back. "
        "Several delegate calls in one step run in parallel.",
        parameters={
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": sorted(set(agents))},
                "task": {"type": "string", "description": "Everything the agent needs to know."},
            },
            "required": ["agent", "task"],
        },
    )


def skill_tools(names: list[str]) -> list[ToolSpec]:
    """Progressive disclosure: the catalog names skills; the model loads one's instructions on demand."""
    skill = {"type": "string", "enum": sorted(set(names))}
    return [
        ToolSpec(
            name="load_skill",
            server=SKILLS,
            tool="load_skill",
            description=(
                "Load a skill's instructions (and the list of its files) before doing a task it covers."
            ),
            parameters={"type": "object", "properties": {"name": skill}, "required": ["name"]},
        ),
        ToolSpec(
            name="read_skill_file",
            server=SKILLS,
            tool="read_skill_file",
            description="Read one file of a loaded skill, by its path inside the skill folder.",
            parameters={
                "type": "object",
                "properties": {"name": skill, "path": {"type": "string"}},
                "required": ["name", "path"],
            },
        ),
    ]


class SkillInfo(BaseModel):
    """What the workflow needs to know about a skill to run its tools and honour `allowed-tools`."""

    name: str
    uri: str
    allowed_tools: list[str] | None = None
    mcp_servers: list[str] = []


class CompiledAgent(BaseModel):
    """An agent ready to run: concrete model chain, instructions, tools, settings."""

    agent: str
    models: list[str]
    labels: list[str] = []
    """`models` as users see them, placeholders resolved where that shows no secret
    (`activities/observe.model_label`); empty in older histories. Left out of `digest`: derived from
    `models` on the worker."""
    instructions: str
    tools: list[ToolSpec]
    temperature: float | None = None
    max_tokens: int | None = None
    stream: bool = True
    tool_output_chars: int = 65_536
    """Tool results longer than this reach the model cut (`read_tool_output` reads on)."""
    context_window: int | None = Field(None, exclude_if=lambda v: v is None)
    """Tokens the model chain takes (its smallest member's), from the manifest or genai-prices;
    None: unknown until a provider refuses a request as too long."""
    compact_models: list[str] = Field([], exclude_if=lambda v: not v)
    """`limits.compact_model` resolved: the chain that writes summaries (empty: the agent's own)."""
    sources: list[str] = []
    """What the tools and skills came from (`mcp:<server>`, `skills:<root>`): changes to these recompile."""
    source_digests: dict[str, str] = {}
    """What each source offered at compile time: a worker new to the session compares
    (`AgentHost.recheck`)."""
    skills: list[SkillInfo] = []
    commands: dict[str, str] = {}
    """Slash commands (`/skill`, `/server:prompt`) -> description, for clients to offer."""
    skill_servers: dict[str, McpServerConfig] = {}
    """MCP servers that active skills bring (`<skill>/<server>`): tool calls carry their config."""
    session_servers: dict[str, McpServerConfig] = {}
    """The session's own servers by label (`session:<name>@<digest>`): tool calls find their config here."""
    script_tools: list[ToolSpec] = Field([], exclude_if=lambda v: not v)
    """Code mode: the tools a `run_code` script may call (offered to the model as Python signatures)."""
    code_mode: CodeModeSettings | None = Field(None, exclude_if=lambda v: v is None)

    _digest: str | None = PrivateAttr(None)

    @property
    def digest(self) -> str:
        """What the workflow asks the worker for, twice a round: dumped and hashed once per object,
        again after a field is assigned (the compile activity fills some in after construction)."""
        if self._digest is None:
            body = self.model_dump(mode="json", exclude={"labels"})
            self._digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
        return self._digest

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name in type(self).model_fields:
            self._digest = None

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> CompiledAgent:
        copied = super().model_copy(update=update, deep=deep)
        copied._digest = None
        return copied

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)

    def script_tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.script_tools if t.name == name), None)

    def skill(self, name: str) -> SkillInfo | None:
        return next((s for s in self.skills if s.name == name), None)


class CompileInput(BaseModel):
    ref: HostRef
    manifest: Manifest
    agent: str
    turn_id: str = ""
    active_skills: list[str] = []
    """Skills loaded this turn: the MCP servers they bring are connected and their tools listed."""
    session_servers: dict[str, McpServerConfig] = {}
    """The session's own MCP servers (`SessionInput.session_servers`), registered at SESSION scope."""


class SkillReadInput(BaseModel):
    """Read a skill file (`skill://...`) as the agent sees it in this turn."""

    ref: HostRef
    agent: str
    turn_id: str
    uri: str
    listing: bool = False
    """Append the skill's file list (when loading SKILL.md)."""


class CommandInput(BaseModel):
    """Expand a `/command args` prompt for an agent."""

    ref: HostRef
    agent: str
    turn_id: str
    text: str


class CommandOutput(BaseModel):
    text: str | None = None
    """The expanded prompt, or None with `error` set."""
    error: str | None = None
    skill: str | None = None
    """The local skill the command ran, active for the rest of the turn."""


class ModelRequestInput(BaseModel):
    """The transcript as a delta: `delta` follows the first `base_len` messages (digest `base_digest`)."""

    ref: HostRef
    compiled_digest: str
    base_len: int
    base_digest: str
    delta: list[ModelMessage]
    tool_names: list[str] | None = None
    """Only these tools are offered (a skill with `allowed-tools` is active); None offers all."""
    turn_id: str = ""
    step: int = 0
    """Where the request's live text belongs (see LiveText)."""
    output: dict[str, Any] | None = None
    """A job's output schema: offered as the output tool, and text answers are not allowed."""
    settings: TurnSettings | None = None
    """The turn's own settings, laid over the agent's (hosts/turn_settings.py)."""
    view: ContextView | None = None
    """The working context (workflows/compaction.py), applied on the worker to its whole copy."""
    priority: int | None = None
    """The session's priority key (its memo) for the provider's quota workflow: carried here, the worker
    need not describe the session before each request (None: sent before the patch, described)."""


class CompactInput(BaseModel):
    """Summarise messages [start, end) of the transcript the worker holds (`base_len`, `base_digest`:
    as for a model request), as `view` shows them, in at most `budget` characters of source."""

    ref: HostRef
    compiled_digest: str
    base_len: int
    base_digest: str
    view: ContextView
    start: int
    end: int
    budget: int
    turn_id: str = ""


class ModelRequestOutput(BaseModel):
    response: ModelResponse
    cache_hit: bool
    model: str | None = None
    """The label of the model that answered (of a fallback chain: the one that did), its spec with
    placeholders resolved where that shows no secret (`activities/observe.model_label`); older
    histories hold the spec itself or None."""
    cost_usd: float | None = None
    """USD for this request (activities/cost.py); None when no price is known for its model."""


class LiveText(BaseModel):
    """A streaming model request's heartbeat details: its text and thinking so far.

    Followers read them from the pending activity (describe), so live text never enters history.
    Both strings are the tail from `*_start` on (a window), redacted, and cumulative: each
    heartbeat replaces the last, and a follower shows what lies past what it has shown."""

    turn_id: str
    step: int
    attempt: int
    text: str = ""
    text_start: int = 0
    thinking: str = ""
    thinking_start: int = 0
    waiting: str | None = None
    """Set while the request waits for its provider's limits (`rate_limited: rpm`, hosts/quotas.py)."""
    resumes_at: datetime | None = None


class LiveTool(BaseModel):
    """A running tool call's heartbeat details: the last progress its MCP server reported."""

    call_id: str
    attempt: int
    progress: float
    total: float | None = None
    message: str | None = None
    tool: str | None = None
    """The tool's model-facing name: a follower may read this before the call's `tool_call_started`."""


class ToolCallInput(BaseModel):
    ref: HostRef
    server: str
    tool: str
    arguments: dict[str, Any]
    call_id: str
    manifest: Manifest | None = None
    """Set for local activities, whose input history never records, so the host is found without a query."""
    agent: str = ""
    turn_id: str = ""
    """Where a skill's server comes from: a worker new to the turn reads that skill's file itself."""
    repeat_safe: bool = False
    """The tool is safe to run twice (ToolSpec.repeat_safe): a retry after a lost worker runs it
    again; otherwise the model is told the call was cut (`ToolCallOutput.cut`)."""
    name: str | None = None
    """The model-facing name (ToolSpec.name), which live progress carries (None: `tool`)."""


CUT_NOTICE = (
    "this call was cut by a worker loss and may or may not have run; check before repeating it "
    "(its tool is not marked read-only or idempotent, so it was not run again)"
)

CUT_REPEATED = "this call was cut by a worker loss and ran again: its tool is marked read-only or idempotent"


class ToolOutcome(StrEnum):
    """How a tool call ended. The transcript's `ToolReturnPart.outcome` and the `tool_call_finished`
    and `child_finished` events carry it: a StrEnum, so on the wire it is exactly these strings."""

    SUCCESS = "success"
    FAILED = "failed"
    DENIED = "denied"
    """allowed-tools, a permission rule or a person refused it: it never ran."""
    INTERRUPTED = "interrupted"
    """The turn ended (interrupt, limit, failure) before the call finished or started."""


class ToolCallOutput(BaseModel):
    content: str
    is_error: bool = False
    changed: bool = False
    """The server announced new tool, prompt or resource lists during the call: recompile."""
    ran_ms: int | None = None
    """How long the call ran on the worker, without the queueing around it (None: not measured)."""
    cut: Literal["repeated", "not_repeated"] | None = None
    """A retry after the worker running the call was lost (the call may or may not have run):
    `repeated` ran it again (safe to repeat), `not_repeated` answers CUT_NOTICE instead."""

    @property
    def outcome(self) -> ToolOutcome:
        """The outcome of a call that ran (a refusal is `DENIED` whatever its output)."""
        return ToolOutcome.FAILED if self.is_error else ToolOutcome.SUCCESS


# Queries a session workflow answers so a worker that misses a cache can catch up.
MANIFEST_QUERY = "manifest"
COMPILED_QUERY = "compiled"
TRANSCRIPT_QUERY = "transcript"
"""The whole transcript; refused once messages are archived (workflows/archive.py)."""
TRANSCRIPT_TAIL_QUERY = "transcript_tail"
"""The transcript as the session holds it: its archive and the messages after (archive.TranscriptTail)."""
SNAPSHOT_QUERY = "snapshot"
BRANCHES_QUERY = "branches"
REWIND_UPDATE = "rewind"
"""The session's state as a continue-as-new would hand it over (forks start from it)."""
PROMPT_LATER_SIGNAL = "prompt_later"
"""A prompt sent while no worker polls (a signal waits for one; the `prompt` update needs one)."""
