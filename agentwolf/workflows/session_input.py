"""A session's start input, and the snapshot a continue-as-new hands to the next run (transcript,
compiled agent, stream state, a turn waiting for approval). Apart from workflows/types.py because
it needs pydantic-ai's messages, which clients that only read a session never import."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field, field_serializer
from pydantic_ai.messages import ModelMessage, ModelRequestPart, ToolCallPart, ToolReturnPart
from temporalio.contrib.workflow_streams import WorkflowStreamState

from agentwolf.config.manifest import Manifest, McpServerConfig
from agentwolf.workflows.acp_types import AcpSession
from agentwolf.workflows.archive import TranscriptArchive
from agentwolf.workflows.compaction import ContextView
from agentwolf.workflows.configs.config_update import ConfigUpdate
from agentwolf.workflows.contracts import CompiledAgent
from agentwolf.workflows.evals.cases import RecordedCall
from agentwolf.workflows.memory_tools import MemoryView
from agentwolf.workflows.turn_settings import TurnSettings
from agentwolf.workflows.types import (
    Approval,
    Counters,
    PendingApproval,
    Prompt,
    TurnOutcome,
    Usage,
)
from agentwolf.workflows.workspace_tools import WorkspaceState


class TurnSnapshot(BaseModel):
    """A turn mid-step, waiting for approval: its model response (with the calls) is in the transcript;
    the rest of what the step knows is here."""

    prompt: Prompt
    step: int
    usage: Usage
    open_calls: list[ToolCallPart]
    finished: dict[int, ToolReturnPart]
    pending: list[ModelRequestPart] = []
    repeats: dict[str, int] = {}
    warned_budget: bool = False
    warnings: list[str] = []
    active_skills: list[str] = []
    pending_approvals: list[PendingApproval] = []
    decisions: dict[str, tuple[bool, Approval]] = {}


class TurnMark(BaseModel):
    """Where one turn lies in the transcript and what the session had done once it ended: what a
    fork or rewind cuts at (workflows/session/cuts.py). `end` and `counters` are unset while it runs."""

    turn_id: str
    start: int
    end: int | None = None
    config_version: int | None = None
    counters: Counters | None = None
    memory: dict[str, int] | None = Field(None, exclude_if=lambda v: v is None)
    """The revision of each memory namespace the turn's memory calls saw (workflows/session/memory.py)."""

    @field_serializer("counters")
    def _compact(self, counters: Counters | None) -> dict[str, Any] | None:
        """Without the fields at their defaults (no subagents, no unpriced requests, ...): one mark
        per turn rides every snapshot, and this leaves about a third of its bytes out."""
        return None if counters is None else counters.model_dump(mode="json", exclude_defaults=True)


class Branch(BaseModel):
    """Turns a rewind set aside (workflows/session/branches.py): readable, and the line again on a redo."""

    name: str
    base: int
    """The transcript length it continues from; `base_digest` is that prefix's chained digest."""
    base_digest: str
    point: str
    """The turn it continues (`turn-4`)."""
    messages: list[ModelMessage]
    turns: list[TurnMark]


class SessionInput(BaseModel):
    """Start arguments, and the snapshot a continue-as-new hands to the next run."""

    session_id: str
    tenant: str = "default"
    agent: str
    manifest: Manifest
    prompt: str | None = None
    prompt_settings: TurnSettings | None = None
    """The first prompt's own settings (`Prompt.settings`)."""
    idle_close_after: timedelta | None = None
    """Close after this long idle when the manifest sets no `host.sessions.idle_close_after` (the
    default of whoever started the session: `wolf serve` gives its sessions one)."""
    background: bool = False
    keep: bool = False
    depth: int = 0
    parent: str | None = None
    config_name: str | None = None
    """Set when the config came from the registry: new versions of it reach this session."""
    config_version: int | None = None
    pinned: bool = False
    """Keep this config version even when a new one is pushed."""
    output_schema: dict[str, Any] | None = None
    """A job's `output`: the answer is a JSON object valid against it (given through an output tool)."""
    session_servers: dict[str, McpServerConfig] = {}
    """MCP servers this session's client brought (an editor's, over ACP), by name: only this session
    sees them (the extension registry's SESSION scope); the worker policy decides what may run."""
    # Snapshot (empty on a fresh start).
    transcript: list[ModelMessage] = []
    compiled: CompiledAgent | None = None
    counters: Counters = Counters()
    queue: list[Prompt] = []
    steers: list[str] = []
    last_output: str | None = None
    last_outcome: TurnOutcome | None = None
    always_allowed: list[str] = []
    next_config: ConfigUpdate | None = None
    """A pushed version not yet applied (it arrived while the snapshot was being taken)."""
    stream_state: WorkflowStreamState | None = None
    resume: TurnSnapshot | None = None
    """A turn that continued as new while it waited for approval: it resumes where it was."""
    acp_home: str | None = Field(None, exclude_if=lambda v: v is None)
    """An ACP agent's home: the task queue of the host its process lives on."""
    acp_session: AcpSession | None = Field(None, exclude_if=lambda v: v is None)
    """An ACP agent's session there. Both are kept on the input (workflows/session/acp.py), so a
    continue-as-new carries them; left out of the dump when unset."""
    turns: list[TurnMark] = []
    """Each turn's place in the transcript (recorded by code from 2026-12 on)."""
    recorded: list[RecordedCall] | None = Field(None, exclude_if=lambda v: v is None)
    """An eval case's recorded tool results: calls that match get them, nothing runs (evals.py)."""
    live_tools: bool = Field(False, exclude_if=lambda v: not v)
    """With `recorded`: a divergent call with side effects runs too (else it is answered "not run")."""
    branches: list[Branch] = Field([], exclude_if=lambda v: not v)
    """Lines a rewind set aside (`wolf branches`)."""
    context: ContextView | None = None
    """The working context's view (workflows/compaction.py): stubs, summary, pinned notes."""
    memory_view: MemoryView | None = Field(None, exclude_if=lambda v: v is None)
    """A fork's view of long-term memory (workflows/session/memory.py); None: the main line, whole."""
    archive: TranscriptArchive | None = Field(None, exclude_if=lambda v: v is None)
    """Older messages in the payload store (workflows/archive.py); `transcript` holds those after."""
    workspace: WorkspaceState | None = Field(None, exclude_if=lambda v: v is None)
    """The session's workspace: its home host and snapshots by turn (workflows/session/workspace.py); a
    seeded session starts with the seed as turn 0's."""
