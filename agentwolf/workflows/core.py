"""The session workflow's state and the helpers every part of it uses.

`SessionWorkflow` (session.py) is composed of parts made in its `@workflow.init`: this core (the
session's state, events, config), its approvals (approvals.py), the tool router (tools.py), the
context keeper (context.py), an ACP agent's runner (acp.py) and the turn runner (loop.py), which
drives a turn. Each part gets the core and the parts it calls; the core calls none of them.

Imported passed through, like turn.py: its classes are created once per process, not re-created for
every run by the sandbox (about 10 KB per cached session as sandboxed modules). The sandbox does not
watch this code, so it calls only `workflow.*` and deterministic helpers; an import-linter contract
keeps clock, randomness, environment and I/O modules out of it (docs/architecture.md, "Durability
rules the code relies on").
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelMessage, ToolCallPart, ToolReturnPart
from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

from agentwolf.config.manifest import AgentConfig, Limits
from agentwolf.telemetry import metrics
from agentwolf.workflows.approvals import Approvals
from agentwolf.workflows.archive import TranscriptArchive, restored
from agentwolf.workflows.configs.config_update import ConfigUpdate
from agentwolf.workflows.contracts import (
    CompiledAgent,
    HostRef,
    ModelRequestOutput,
    SkillInfo,
    ToolOutcome,
    chain_digest,
    chained,
)
from agentwolf.workflows.evals.cases import Recording
from agentwolf.workflows.guard import LimitGuard
from agentwolf.workflows.session_input import Branch, SessionInput, TurnMark
from agentwolf.workflows.turn import (
    CUT_MARK,
    EVENT_TEXT_LIMIT,
    MODEL_TEXT_LIMIT,
    Staleness,
    Turn,
    share_texts,
    shared,
)
from agentwolf.workflows.types import (
    ACTIVE_ATTR,
    EVENTS_TOPIC,
    STATE_ATTR,
    Event,
    Prompt,
    SessionState,
    TurnOutcome,
    Usage,
)

RESUME_INTERRUPT = "resume-interrupt"  # patch: an interrupt or close as a waiting turn resumes ends it
LAST_ACTIVITY = "last-activity"  # patch: a state change also sets WolfActive (the console's last activity)

if TYPE_CHECKING:
    from agentwolf.workflows.stream import SessionStream


class SessionCore:
    """A session's state, kept across its turns and carried over by continue-as-new, and what every
    part does with it: events, the session's state, the transcript, spending."""

    def __init__(self, inp: SessionInput, stream: SessionStream) -> None:
        # Sessions of one config share its manifest and compiled agent (`shared`). Replaced in the
        # input itself: the SDK and `run` hold it for the whole run.
        inp.manifest = shared(inp.manifest)
        if inp.compiled is not None:
            inp.compiled = shared(inp.compiled)
        self.inp = inp
        self.stream = stream
        self.events = stream.topic(EVENTS_TOPIC, type=Event)
        self.archive = inp.archive or TranscriptArchive()
        """Older messages in the payload store (archive.py): `ARCHIVED` in `transcript`."""
        share_texts(inp.transcript)  # the worker's cached copy and the previous run's hold them too
        self.transcript: list[ModelMessage] = restored(self.archive, inp.transcript)
        self.digest = chain_digest(self.archive.digest, inp.transcript)
        self.appended_bytes = 0
        """What this run added to the transcript, serialised: what its snapshot carries more."""
        # What the workers were last sent: the next model request carries only what follows.
        self.synced_len = len(self.transcript)
        self.synced_digest = self.digest
        self.compiled: CompiledAgent | None = inp.compiled
        self.counters = inp.counters.model_copy(deep=True)
        self.turns: list[TurnMark] = list(inp.turns)
        self.branches: list[Branch] = list(inp.branches)
        self.recording = Recording(inp.recorded, inp.live_tools) if inp.recorded is not None else None
        self.queue: list[Prompt] = list(inp.queue)
        self.steers: list[str] = list(inp.steers)
        self.last_output = inp.last_output
        self.last_outcome: TurnOutcome | None = inp.last_outcome
        self.state: SessionState = "idle"
        self.turn_id: str | None = None
        self.step = 0
        self.closing = False
        self.turns_this_run = 0
        self.turn_task: asyncio.Task[None] | None = None
        self.interrupt_reason: str | None = None
        self.interrupt_requested: str | None = None
        self.resume = inp.resume
        """A turn to resume first: it continued as new while waiting for approval."""
        self.turn: Turn | None = None
        self.prompt_running: Prompt | None = None
        self.approvals = Approvals(inp.resume, inp.always_allowed)
        self.next_config: ConfigUpdate | None = inp.next_config
        self.stale = Staleness()
        """Why the compiled agent is out of date (recompiled before the next model request)."""
        self.active_skills: list[str] = list(inp.resume.active_skills) if inp.resume else []
        """Skills loaded this turn: their `allowed-tools` limit the tools, their MCP servers join."""
        if inp.prompt is not None and not inp.transcript and self.counters.turns == 0 and not self.queue:
            first = Prompt(turn_id=self.next_turn_id(), text=inp.prompt, settings=inp.prompt_settings)
            self.queue.append(first)

    def apply_config(self) -> None:
        """Switch to a pushed config version; recompile only if this agent's effective config changed."""
        update, self.next_config = self.next_config, None
        if update is None:
            return
        old = self.inp.manifest
        agent = self.inp.agent
        if agent not in update.manifest.agents and agent not in update.manifest.teams:
            self.publish(
                "config_changed",
                text=f"config {update.name} v{update.version} has no agent {agent!r}: "
                f"staying on v{self.inp.config_version}",
                outcome="refused",
            )
            return
        self.inp = self.inp.model_copy(
            update={"manifest": shared(update.manifest), "config_version": update.version}
        )
        changed = old.agent_identity(self.inp.agent) != update.manifest.agent_identity(self.inp.agent)
        if changed:
            self.compiled = None
        self.publish(
            "config_changed",
            text=f"config {update.name} v{update.version}: "
            + ("this agent changed, recompiling" if changed else "this agent is unchanged"),
            outcome="recompile" if changed else "unchanged",
        )

    def interrupt(self, reason: str) -> None:
        """Ask the run loop to cancel the running turn (`_await_turn`), after this activation's results.
        A turn about to resume (this run's first activation, after a continue-as-new while it waited
        for approval) is running too: it is cancelled as soon as it has started."""
        running = self.turn_task is not None and not self.turn_task.done()
        if running or (self.resume is not None and workflow.patched(RESUME_INTERRUPT)):
            self.interrupt_requested = reason

    def check_interrupted(self) -> None:
        """An interrupt whose cancel an operation outlived (it completed anyway) still ends the turn."""
        if self.interrupt_reason is not None:
            raise asyncio.CancelledError()

    def tail(self) -> list[ModelMessage]:
        """The messages held (those after the archived ones)."""
        return self.transcript[self.archive.length :]

    def whole_digest(self) -> str:
        """The transcript's chained digest, computed anew (after a rewind)."""
        return chain_digest(self.archive.digest, self.tail())

    def append(self, message: ModelMessage) -> None:
        share_texts([message])
        self.transcript.append(message)
        self.digest, size = chained(self.digest, [message])
        self.appended_bytes += size

    def tool_return(self, call: ToolCallPart, content: str, outcome: ToolOutcome) -> ToolReturnPart:
        return ToolReturnPart(
            tool_name=call.tool_name,
            content=content,
            tool_call_id=call.tool_call_id,
            timestamp=workflow.now(),
            outcome=outcome,  # type: ignore[arg-type]
        )

    def publish(self, kind: str, text: str | None = None, turn: str | None = None, **fields: object) -> None:
        """Events stay small whatever the payloads: texts are cut; the transcript has them whole.
        A model's text is the answer followers render (its deltas must join to it): cut far later.
        (Every follower's poll records the events it reads in history: the turn's output, which
        repeats the last model text, keeps the short cut; `result`/status have it whole.)
        `turn`: the turn it is about, when not the running one (a queued prompt dropped at close)."""
        limit = MODEL_TEXT_LIMIT if kind == "model_text" else EVENT_TEXT_LIMIT
        if text is not None and len(text) > limit:
            text = f"{text[:limit]}{CUT_MARK.format(len(text))}"
        event = Event(
            kind=kind, at=workflow.now(), turn_id=turn or self.turn_id, step=self.step, text=text, **fields
        )
        self.events.publish(event)

    def set_state(self, state: SessionState) -> None:
        if state != self.state:
            updates: list[SearchAttributeUpdate[Any]] = [STATE_ATTR.value_set(state)]
            # Only a session started with WolfActive sets it: the namespace then has the attribute,
            # whereas an upsert of one it lacks fails the workflow task until someone registers it.
            if ACTIVE_ATTR in workflow.info().typed_search_attributes and workflow.patched(LAST_ACTIVITY):
                updates.append(ACTIVE_ATTR.value_set(workflow.now()))
            workflow.upsert_search_attributes(updates)
            metrics.count(metrics.SESSION_STATES, state=state)  # workflow.metric_meter(): replay-safe
        self.state = state
        self.show_details()

    def show_details(self) -> None:
        """The Temporal UI's current details: state, turn and step, approvals waiting, spending.
        Served by query, never recorded in history: free to change."""
        lines = [f"**{self.state}**" + (f" · {self.turn_id} step {self.step}" if self.turn_id else "")]
        lines += [f"waiting for approval: {p.tool} ({p.call_id})" for p in self.approvals.pending.values()]
        usage = self.counters.total
        cost = f"${usage.cost_usd:.4f}" if usage.cost_usd is not None else "cost unknown"
        lines.append(f"{self.counters.turns} turns · {usage.total_tokens} tokens · {cost}")
        workflow.set_current_details("\n\n".join(lines))

    def approval_ended(self, call_id: str) -> None:
        """A call no longer waits for a person: the session runs again when none does."""
        self.approvals.end(call_id)
        if not self.approvals.pending and self.state == "waiting_approval":
            self.set_state("running")
        self.show_details()

    def count(self, turn: Turn, usage: Usage, *, delegated: bool = False) -> None:
        """Add spending to the turn and the session (`delegated`: a subagent's), and warn once when
        a USD budget passes 80 %."""
        guard = LimitGuard(self.limits())
        before = (turn.usage.spent, self.counters.total.spent)
        turn.usage = turn.usage.plus(usage)
        if delegated:
            self.counters.subagents = self.counters.subagents.plus(usage)
        else:
            self.counters.usage = self.counters.usage.plus(usage)
        for text in guard.usd_warnings(before, (turn.usage.spent, self.counters.total.spent)):
            self.publish("limit_warning", text=text)

    def count_request(self, turn: Turn, out: ModelRequestOutput) -> None:
        """A model request's tokens and USD, for the turn, the session and its model."""
        usage = Usage(
            requests=1,
            input_tokens=out.response.usage.input_tokens or 0,
            output_tokens=out.response.usage.output_tokens or 0,
            cost_usd=out.cost_usd,
            unpriced_requests=int(out.cost_usd is None),
        )
        model = out.model or "unknown"
        self.counters.models[model] = self.counters.models.get(model, Usage()).plus(usage)
        self.count(turn, usage)

    def next_turn_id(self) -> str:
        self.counters.turn_seq += 1
        return f"turn-{self.counters.turn_seq}"

    def busy(self) -> bool:
        """A turn is under way (running, waiting for a person's approval, or about to resume: this run
        continued as new while it waited)."""
        return self.state in ("running", "waiting_approval") or self.resume is not None

    def agent_config(self) -> AgentConfig:
        return self.inp.manifest.agents.get(self.inp.agent) or AgentConfig()

    def limits(self) -> Limits:
        return self.agent_config().limits

    def ref(self) -> HostRef:
        return HostRef(
            config_id=self.inp.manifest.identity,
            tenant=self.inp.tenant,
            workflow_id=workflow.info().workflow_id,
        )

    def active_skill_infos(self) -> list[SkillInfo]:
        compiled = self.compiled
        return [info for n in self.active_skills if compiled and (info := compiled.skill(n))]
