"""What a session and the worker say to each other about an ACP agent's turn (pure data)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from agentwolf.workflows.contracts import HostRef
from agentwolf.workflows.workspace_tools import WorkspaceCall


class AcpSession(BaseModel):
    """An external agent's ACP session, as the workflow records it: where it lives and how to get it back."""

    session_id: str
    cwd: str
    loadable: bool
    """The agent announced `session/load`: after a worker loss the session is loaded, not lost."""


class AcpOption(BaseModel):
    option_id: str
    name: str
    kind: str


class AcpPermission(BaseModel):
    """A `session/request_permission` the agent waits on: it becomes a durable approval."""

    tool_call_id: str
    title: str
    """The agent's own words for it (shown to the person; rules never match it)."""
    kind: str = "other"
    """What it does, as ACP names it (`read`, `edit`, `execute`, `fetch`, ...): the tool rules match."""
    raw_input: Any = None
    """What it would run (the arguments rules match)."""
    options: list[AcpOption]


class AcpToolCall(BaseModel):
    call_id: str
    title: str
    status: str | None = None


class AcpTurnInput(BaseModel):
    ref: HostRef
    agent: str
    turn_id: str
    step: int
    """Each step's text streams (and is recorded) as its own: a step ends at a permission request."""
    prompt: str
    context: str = ""
    """Earlier turns as text, for an agent that lost its own state and cannot load it."""
    session: AcpSession | None = None
    answers: dict[str, str] = {}
    """This turn's permission answers so far: tool call id -> option id (None-like "" = cancelled)."""
    workspace: WorkspaceCall | None = None
    """Set when the agent has a workspace: its folder on this host (restored as the call says) serves
    the agent's `fs/*` requests."""


class AcpTurnOutput(BaseModel):
    """Either the turn's end (`permission` None) or a permission request to answer first."""

    session: AcpSession
    text: str = ""
    """This step's text (the turn's answer is every step's, joined)."""
    tool_calls: list[AcpToolCall] = []
    permission: AcpPermission | None = None
    stop_reason: str | None = None
    resumed: Literal["live", "new", "loaded", "lost"] = "live"
    """How this step found the agent: its process alive, a first session, loaded, or state lost."""
    workspace_changed: bool = False
    """The agent wrote to its workspace (`fs/write_text_file`) in this step: the turn ends with a
    snapshot."""


class AcpResume(BaseModel):
    """Heartbeat details an attempt leaves for the next one: the session it made (before the workflow
    heard of it), so a worker lost in a first turn does not leave a second session behind."""

    session: AcpSession
