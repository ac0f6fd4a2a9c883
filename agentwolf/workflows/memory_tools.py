"""Long-term memory as the model sees it (the `memory` file tool, `remember`, `search_memory`,
`forget`) and what a call sends to the `wolf.memory` activity: the owner recorded at the session's
start, the view a fork has of memory, and the call's idempotency key. Pure data: the store lives in
agentwolf/memory/, reached only from the activity (docs/guides/memory.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agentwolf.config.manifest import MemorySettings
from agentwolf.workflows.contracts import HostRef, ToolCallInput, ToolCallOutput, ToolSpec

MEMORY = "@memory"
"""The `server` of the memory tools: they run in the worker (`wolf.memory`)."""
KINDS = ("user", "feedback", "project", "reference")
"""What a record is about: the person, feedback on the agent's work, the project, a pointer elsewhere."""
Source = Literal["user_stated", "inferred", "tool", "extracted", "imported", "operator"]


class MemoryCut(BaseModel):
    """Rows of one line of memory a fork still sees: those of `branch` ('' is the main line) up to
    `revisions` (per namespace key; a namespace not named is seen whole), without what `writer`
    (the session forked from) wrote after its turn number `after_turn`."""

    branch: str = ""
    revisions: dict[str, int] = {}
    writer: str = ""
    after_turn: int | None = None


class MemoryView(BaseModel):
    """What a session sees of memory: its own line (`branch`: '' for an ordinary session, its own
    workflow id for a fork, whose writes the source never sees) and the cut lines it came from."""

    branch: str = ""
    cuts: list[MemoryCut] = []


class Provenance(BaseModel):
    """Where a row came from, to the exact call."""

    session: str = ""
    """The writing session's workflow id (empty: an operator's import)."""
    turn: str = ""
    turn_seq: int = 0
    call: str = ""
    model: str = ""
    source: Source = "inferred"


class MemoryCall(BaseModel):
    ref: HostRef
    tool: str
    arguments: dict[str, Any]
    agent: str
    owner: str
    """Who started the session (recorded at its start), never a model argument."""
    settings: MemorySettings
    store: str | None = None
    """`host.memory.store` as written (placeholders resolved on the worker)."""
    view: MemoryView = MemoryView()
    key: str
    """The call's idempotency key: workflow id, turn, step and call id."""
    provenance: Provenance

    def as_tool_call(self) -> ToolCallInput:
        """The call as the agent's tool hooks see it."""
        return ToolCallInput(
            ref=self.ref,
            server=MEMORY,
            tool=self.tool,
            arguments=self.arguments,
            call_id=self.provenance.call,
            agent=self.agent,
            turn_id=self.provenance.turn,
        )


class MemoryOutput(ToolCallOutput):
    seen: dict[str, int] = {}
    """The revision of each namespace the call read or wrote: what a fork at this turn cuts at."""


def fork_view(
    source_view: MemoryView | None, source_wid: str, seen: dict[str, int], after_turn: int, wid: str
) -> MemoryView:
    """A fork's view of memory: its own line (its writes, which the source never sees), the lines its
    source saw, and the source's line as of the cut (`seen`: what the source had seen by then; its
    own rows after turn `after_turn` left out)."""
    view = source_view or MemoryView()
    cut = MemoryCut(branch=view.branch, revisions=seen, writer=source_wid, after_turn=after_turn)
    return MemoryView(branch=wid, cuts=[*view.cuts, cut])


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    schema = {"type": "object", "properties": properties, "required": required}
    return ToolSpec(name=name, server=MEMORY, tool=name, description=description, parameters=schema)


FILE_TOOL = _tool(
    "memory",
    "Your long-term memory, kept across sessions as files under /memories. Check it before a task; "
    "record what you learn that should outlive this session. Commands: view (a directory listing or a "
    "file with line numbers, `view_range` [start, end]), create (`path`, `file_text`), str_replace "
    "(`path`, `old_str` once in the file, `new_str`), insert (`path`, `insert_line`, `insert_text`), "
    "delete (`path`), rename (`old_path`, `new_path`).",
    {
        "command": {
            "type": "string",
            "enum": ["view", "create", "str_replace", "insert", "delete", "rename"],
        },
        "path": {"type": "string", "description": "A path under /memories."},
        "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
        "file_text": {"type": "string"},
        "old_str": {"type": "string"},
        "new_str": {"type": "string"},
        "insert_line": {"type": "integer", "minimum": 0},
        "insert_text": {"type": "string"},
        "old_path": {"type": "string"},
        "new_path": {"type": "string"},
    },
    ["command"],
)
REMEMBER = _tool(
    "remember",
    "Keep one fact for later sessions with this person: `kind` user (about them), feedback (on your "
    "work), project, or reference (where to find something). `supersedes`: the id of a memory this "
    "corrects. Returns its id.",
    {
        "text": {"type": "string"},
        "kind": {"type": "string", "enum": list(KINDS)},
        "about": {"type": "string", "description": "Who or what it is about (a name, a topic)."},
        "supersedes": {"type": "string", "description": "The id of a memory this one corrects."},
        "stated_by_user": {"type": "boolean", "description": "The person said it (else you inferred it)."},
        "layer": {"type": "string", "enum": ["own", "agent", "tenant"], "default": "own"},
    },
    ["text", "kind"],
)
SEARCH = _tool(
    "search_memory",
    "Search your long-term memories of this person (and shared layers): the best matches with id, kind "
    "and when they were kept.",
    {"query": {"type": "string"}, "k": {"type": "integer", "minimum": 1, "maximum": 50}},
    ["query"],
).model_copy(update={"repeat_safe": True})
FORGET = _tool(
    "forget",
    "Forget a memory by id (it no longer comes back in searches); say why.",
    {"id": {"type": "string"}, "reason": {"type": "string"}},
    ["id", "reason"],
)


def memory_tools(settings: MemorySettings) -> list[ToolSpec]:
    """The memory tools the agent's `memory` block offers."""
    tools = [FILE_TOOL] if settings.tools in ("file", "both") else []
    if settings.tools in ("record", "both"):
        tools += [REMEMBER, SEARCH, FORGET]
    return tools


class MemoryExtract(BaseModel):
    """One extraction pass (`memory.extract`) at a session's close: the session's messages as text
    (`messages`), what the model must not echo back as a fact (`templates`: instructions, tool
    descriptions), the agent's models, and the pass's idempotency key (workflow id and pass)."""

    ref: HostRef
    agent: str
    owner: str
    settings: MemorySettings
    store: str | None = None
    models: list[str]
    messages: list[str]
    templates: list[str]
    key: str
    provenance: Provenance
