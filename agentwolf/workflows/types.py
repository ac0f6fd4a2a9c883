"""What clients send to and read from a session: ids, search attributes, status, events and result.

Light on purpose (no pydantic-ai, no workflow streams): the client imports it for every `wolf` verb.
A session's start input, which carries a transcript, is in session_input.py."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from temporalio.common import SearchAttributeKey

from agentwolf.workflows.turn_settings import TurnSettings

SessionState = Literal["idle", "running", "waiting_approval", "done"]
TurnOutcome = Literal["completed", "interrupted", "limit", "failed"]

EVENTS_TOPIC = "events"
TASK_FAILED = "the task failed: "
"""How a background task's failure message begins (the failed turn's output follows)."""

TENANT_ATTR = SearchAttributeKey.for_keyword("WolfTenant")
AGENT_ATTR = SearchAttributeKey.for_keyword("WolfAgent")
STATE_ATTR = SearchAttributeKey.for_keyword("WolfState")
PARENT_ATTR = SearchAttributeKey.for_keyword("WolfParent")
CONFIG_ATTR = SearchAttributeKey.for_keyword("WolfConfig")
"""The registry name of the session's config (absent for a config given as a file)."""
SCHEDULE_ATTR = SearchAttributeKey.for_keyword("WolfSchedule")
"""The schedule whose firing started the session (a job run)."""
ACTIVE_ATTR = SearchAttributeKey.for_datetime("WolfActive")
"""When the session last changed state (set at start): visibility keeps no update time of its own."""
SEARCH_ATTRIBUTES = (
    TENANT_ATTR,
    AGENT_ATTR,
    STATE_ATTR,
    PARENT_ATTR,
    CONFIG_ATTR,
    SCHEDULE_ATTR,
    ACTIVE_ATTR,
)


def quote(value: str) -> str:
    """A string literal for a visibility query."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


SESSION_WORKFLOW = "SessionWorkflow"
"""The session's workflow type: clients, schedules, teams and subagents start it by this name."""
FIRE_PREFIX = "wolf-fire"


def workflow_id(tenant: str, session_id: str) -> str:
    return f"wolf/{tenant}/{session_id}"


def schedule_id(tenant: str, name: str) -> str:
    """Schedules are named like sessions: their id says whose they are."""
    return f"wolf/{tenant}/{name}"


def fire_id(tenant: str, name: str) -> str:
    return f"{FIRE_PREFIX}/{tenant}/{name}"


CONFIG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""Config names: no `.` or `/`, so the CLI can tell a name from a manifest path."""


def registry_id(tenant: str, name: str) -> str:
    return f"wolf-config/{tenant}/{name}"


def is_config_name(text: str) -> bool:
    return CONFIG_NAME.fullmatch(text) is not None


def check_config_name(name: str) -> str:
    if not is_config_name(name):
        raise ValueError(f"invalid config name {name!r}: use letters, digits, '-' and '_' (at most 64)")
    return name


OWNER_MEMO = "owner"
"""The memo field naming who a session was started for (`start_session(owner=...)`): whose memory it
uses, who may join MCP servers to it. Continue-as-new carries the memo over."""
RUN_PREFIX = "_"
"""Starts every session id the system picks (schedule and webhook job runs): no client may choose
one (WolfClient.start_session), so no session or thread named like a future run can take its id."""


def run_session_id(fire_workflow_id: str) -> str:
    """The job run's session id of a firing: `wolf-fire/<tenant>/<name>-<time>` -> `<name>-<time>`
    (`RUN_PREFIX` goes before it since the patch `fire-reserved-run-ids`)."""
    return fire_workflow_id.split("/", 2)[-1]


def tenant_of(workflow_id: str) -> str | None:
    """The tenant a session (`wolf/<tenant>/...`), registry (`wolf-config/<tenant>/...`) or schedule
    firing (`wolf-fire/<tenant>/...`) id names.

    Clients and front ends build ids from the tenant they serve, and workers derive the tenant from
    the id: a tenant field in workflow or activity input is whatever its writer chose."""
    kind, _, rest = workflow_id.partition("/")
    tenant, sep, _ = rest.partition("/")
    return tenant if kind in ("wolf", "wolf-config", "wolf-fire") and sep and tenant else None


class Usage(BaseModel):
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    cost_usd: float | None = None
    """USD of the priced requests; None when none was priced (unknown models cost null, not 0)."""
    unpriced_requests: int = 0
    """Requests whose model has no known price: `cost_usd` leaves them out."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def spent(self) -> float:
        """USD for budgets: what is known (unpriced requests count as nothing)."""
        return self.cost_usd or 0.0

    def plus(self, other: Usage) -> Usage:
        costs = [c for c in (self.cost_usd, other.cost_usd) if c is not None]
        return Usage(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            tool_calls=self.tool_calls + other.tool_calls,
            cost_usd=sum(costs) if costs else None,
            unpriced_requests=self.unpriced_requests + other.unpriced_requests,
        )


EventKind = Literal[
    "turn_started",
    "compiled",
    "model_text",
    "tool_call_started",
    "tool_call_finished",
    "tool_call_cut",
    "steer_applied",
    "limit_warning",
    "limit_reached",
    "interrupted",
    "approval_requested",
    "approval_resolved",
    "child_started",
    "child_finished",
    "config_changed",
    "extensions_changed",
    "command_expanded",
    "agent_resumed",
    "context_compacted",
    "error",
    "turn_finished",
    "session_closed",
    # Live events: read from running activities' heartbeats by the client, never in history.
    "text_delta",
    "thinking_delta",
    "attempt_superseded",
    "tool_progress",
    "rate_limited",
]
LIVE_KINDS = frozenset(
    {"text_delta", "thinking_delta", "attempt_superseded", "tool_progress", "rate_limited"}
)


class Event(BaseModel):
    """One thing that happened in a session, as `wolf follow` shows it."""

    kind: EventKind
    at: datetime
    turn_id: str | None = None
    step: int | None = None
    text: str | None = None
    tool: str | None = None
    call_id: str | None = None
    args: dict[str, Any] | None = None
    duration_ms: int | None = None
    outcome: str | None = None
    usage: Usage | None = None
    attempt: int | None = None
    """Live events: the model request's (or tool call's) attempt the event belongs to."""
    index: int | None = None
    """Deltas: where `text` starts in the step's text (or thinking) of that attempt."""
    progress: float | None = None
    total: float | None = None
    parent: str | None = Field(None, exclude_if=lambda v: v is None)
    """Tool calls a code-mode script made: the `run_code` call they are nested in."""
    tier: int | None = Field(None, exclude_if=lambda v: v is None)
    """context_compacted: 1 (old tool results stubbed) or 2 (older turns summarised)."""
    before_tokens: int | None = Field(None, exclude_if=lambda v: v is None)
    after_tokens: int | None = Field(None, exclude_if=lambda v: v is None)
    model: str | None = Field(None, exclude_if=lambda v: v is None)
    """model_text: the model that said it, when a capability chose it (a router) instead of the agent's."""


class Prompt(BaseModel):
    turn_id: str
    text: str
    settings: TurnSettings | None = None
    """What this turn alone asks of the model (an OpenAI-compatible request's settings)."""


class Approval(BaseModel):
    """A person's answer to a tool call waiting for approval."""

    call_id: str
    reason: str | None = None
    always: bool = False
    """Approve this tool for the rest of the session."""


class PendingApproval(BaseModel):
    call_id: str
    tool: str
    args: dict[str, Any]
    asked_at: datetime | None = None
    """When the approval was asked: `approval_timeout` counts from here, across continue-as-new."""


class Counters(BaseModel):
    """What a session has done so far; carried exactly across continue-as-new."""

    turns: int = 0
    turn_seq: int = 0
    steps: int = 0
    usage: Usage = Usage()
    """This session's own model requests and tool calls."""
    subagents: Usage = Usage()
    """What its subagents and team members spent (their own sessions count it as theirs too)."""
    models: dict[str, Usage] = {}
    """`usage` by the model spec that answered."""
    continued_as_new: int = 0

    @property
    def total(self) -> Usage:
        """Its own usage and its subagents': what `usd_budget_session` counts."""
        return self.usage.plus(self.subagents)


class ExtensionsChanged(BaseModel):
    """A worker saw skills or MCP lists change; `sources` match `CompiledAgent.sources`."""

    sources: list[str]
    detail: str = ""


class SessionStatus(BaseModel):
    session_id: str
    tenant: str
    agent: str
    config_id: str
    state: SessionState
    turn_id: str | None
    step: int
    queued: int
    steer_room: int = 0
    """How many more steers may wait for the next model request."""
    counters: Counters
    transcript_len: int
    last_output: str | None
    last_outcome: TurnOutcome | None
    pending_approvals: list[PendingApproval] = []
    parent: str | None = None
    config_name: str | None = None
    config_version: int | None = None
    context_tokens: int | None = None
    """About how many tokens the next model request sends (its working context)."""
    context_window: int | None = None
    """The model's context window in tokens, when known."""
    compactions: int = 0


class SessionResult(BaseModel):
    session_id: str
    output: str | None
    outcome: TurnOutcome | None
    counters: Counters
    structured: dict[str, Any] | None = None
    """A job's result, valid against its `output` schema (`output` has it as JSON text)."""
