"""The session workflow's state and the helpers every part of it uses.

`SessionWorkflow` (workflow.py) is composed of parts made in its `@workflow.init`: this core (the
session's book, events, config), which holds its transcript (transcript_log.py), the running turn
(turn.py's RunningTurn, written by the turn runner) and its approvals (approvals.py); the tool router
(tools.py), the context keeper (context.py), an ACP agent's runner (acp.py) and the turn runner
(loop.py), which drives a turn and hands its end to the core (`end_turn`). Each part gets the core
and the parts it calls; the core calls none of them. Its fields are written here only.

Imported passed through, like turn.py: its classes are created once per process, not re-created for
every run by the sandbox (about 10 KB per cached session as sandboxed modules). The sandbox does not
watch this code, so it calls only `workflow.*` and deterministic helpers; an import-linter contract
keeps clock, randomness, environment and I/O modules out of it (docs/architecture.md, "Durability
rules the code relies on").
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelRequest, ToolCallPart, ToolReturnPart, UserPromptPart
from temporalio import workflow
from temporalio.common import SearchAttributeUpdate
from temporalio.contrib.workflow_streams import WorkflowStreamState

import agentwolf.workflows.session.branches as branches
from agentwolf.config.manifest import AgentConfig, Limits, McpServerConfig
from agentwolf.telemetry import metrics
from agentwolf.workflows.compaction import ContextView
from agentwolf.workflows.configs.config_update import ConfigUpdate
from agentwolf.workflows.contracts import CompiledAgent, HostRef, ModelRequestOutput, SkillInfo, ToolOutcome
from agentwolf.workflows.session.approvals import Approvals
from agentwolf.workflows.session.branches import Rewound
from agentwolf.workflows.session.transcript_log import TranscriptLog
from agentwolf.workflows.session.turn import (
    CUT_MARK,
    EVENT_TEXT_LIMIT,
    MODEL_TEXT_LIMIT,
    RunningTurn,
    Turn,
    TurnEnd,
    shared,
    tool_return,
)
from agentwolf.workflows.session.turn_limits import LimitGuard
from agentwolf.workflows.session_input import SessionInput
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

LAST_ACTIVITY = "last-activity"  # patch: a state change also sets WolfActive (the console's last activity)
TURN_END_CLEARS_APPROVALS = "turn-end-clears-approvals"  # patch: a turn's end drops its waits and answers

if TYPE_CHECKING:
    from agentwolf.workflows.session.stream import SessionStream


class SessionCore:
    """A session's book, kept across its turns and carried over by continue-as-new: its input and
    compiled agent, spending, prompts and steers waiting, its state, the last turn's output, the
    next config, approvals; its transcript (`log`, the TranscriptLog) and the running turn
    (`running`, written by the turn runner). And what every part does with it: events, the session's
    state, spending. Each field is written here only (its `__init__` and methods); the parts read
    them and call the methods."""

    def __init__(self, inp: SessionInput, stream: SessionStream) -> None:
        # Sessions of one config share its manifest and compiled agent (`shared`). Replaced in the
        # input itself: the SDK and `run` hold it for the whole run.
        inp.manifest = shared(inp.manifest)
        if inp.compiled is not None:
            inp.compiled = shared(inp.compiled)
        self.inp = inp
        self.stream = stream
        self.events = stream.topic(EVENTS_TOPIC, type=Event)
        self.log = TranscriptLog(inp)
        self.running = RunningTurn.restored(inp.resume)
        self.compiled: CompiledAgent | None = inp.compiled
        self.counters = inp.counters.model_copy(deep=True)
        self.queue: list[Prompt] = list(inp.queue)
        self.steers: list[str] = list(inp.steers)
        self.last_output = inp.last_output
        self.last_outcome: TurnOutcome | None = inp.last_outcome
        self.state: SessionState = "idle"
        self.closing = False
        self.approvals = Approvals(inp.resume, inp.always_allowed)
        self.next_config: ConfigUpdate | None = inp.next_config
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

    def check_interrupted(self) -> None:
        """An interrupt whose cancel an operation outlived (it completed anyway) still ends the turn."""
        if self.running.interrupt_reason is not None:
            raise asyncio.CancelledError()

    def tool_return(self, call: ToolCallPart, content: str, outcome: ToolOutcome) -> ToolReturnPart:
        return tool_return(call, content, outcome, workflow.now())

    def end_turn(self, end: TurnEnd) -> None:
        """Record how the runner's turn ended: its last request (with the steers it never sent, kept
        on record), no approvals left waiting, counters, its turn mark, the last output and
        `turn_finished` (stamped with the turn, still running)."""
        parts = list(end.closing)
        if end.outcome != "completed":  # steers this turn never reached the model: keep them on record
            parts.extend(UserPromptPart(text, timestamp=workflow.now()) for text in self.take_steers())
        if parts:
            self.log.append(ModelRequest(parts=parts, timestamp=workflow.now()))
        # A turn that ended while its calls waited (an interrupt as it resumed) leaves none waiting,
        # nor an answer a later call with the same id would take (runs before the patch kept them).
        approvals = self.approvals
        if (approvals.pending or approvals.decisions) and workflow.patched(TURN_END_CLEARS_APPROVALS):
            approvals.clear()
        self.counters.turns += 1
        self.log.turn_ended(end.turn_id, self.counters)
        self.last_output, self.last_outcome = end.output, end.outcome
        self.publish("turn_finished", text=end.output, outcome=end.outcome, usage=end.usage)
        metrics.count(metrics.TURNS, outcome=end.outcome)

    def take_steers(self) -> list[str]:
        """The steers waiting, now taken (applied to a request, a turn, or said dropped)."""
        steers, self.steers = self.steers, []
        return steers

    def offer_config(self, update: ConfigUpdate) -> None:
        """A pushed config version, taken at the next turn boundary if newer than any known."""
        if update.name != self.inp.config_name or self.inp.pinned:
            return
        if update.version > max(
            self.inp.config_version or 0, self.next_config.version if self.next_config else 0
        ):
            self.next_config = update

    def use(self, compiled: CompiledAgent) -> CompiledAgent:
        """The agent as just compiled (shared with the other sessions of its config)."""
        self.compiled = shared(compiled)
        return self.compiled

    def join_servers(self, servers: dict[str, McpServerConfig]) -> None:
        """The client's MCP servers join the session's own (a same-named one replaced)."""
        joined = {**self.inp.session_servers, **servers}
        if joined != self.inp.session_servers:
            self.inp = self.inp.model_copy(update={"session_servers": joined})
            self.running.stale.mark(f"the client's MCP servers changed ({', '.join(sorted(servers))})")

    def close(self) -> None:
        """Asked to finish: the run loop closes the session at its next idle."""
        self.closing = True

    def rewind(self, to: str, view: ContextView, *, whole_view: bool) -> tuple[Rewound, ContextView]:
        """Go back to a turn or a branch (TranscriptLog.rewound); the last output is the new line's."""
        done, cut = self.log.rewound(to, view, self.compiled, whole_view=whole_view)
        self.last_output = branches.last_text(self.log.transcript)
        return done, cut

    def released(self) -> None:
        """This run handed over: its input's and its log's messages and turn marks are let go."""
        self.inp = self.inp.model_copy(update={"transcript": [], "turns": []})
        self.log.released()

    def snapshot(
        self, stream_state: WorkflowStreamState, view: ContextView, *, waiting: bool
    ) -> SessionInput:
        """The next run's input (continue-as-new): the core's book, the log, the running turn when
        it goes along (`waiting`: it waits for approval) with its approvals. Its shape is the start
        input's: snapshots of runs before still load."""
        running, resume = self.running, None
        if waiting and running.turn is not None and running.prompt is not None:
            resume = running.turn.snapshot(running.prompt, running.step).model_copy(
                update={
                    "active_skills": list(running.active_skills),
                    "pending_approvals": list(self.approvals.pending.values()),
                    "decisions": dict(self.approvals.decisions),
                },
                deep=True,
            )
        return self.inp.model_copy(
            update={
                "prompt": None,
                "transcript": self.log.tail(),
                "archive": self.log.archive if self.log.archive.length else None,
                "compiled": None if running.stale.reason else self.compiled,
                "counters": self.counters,
                "queue": self.queue,
                "steers": self.steers,
                "last_output": self.last_output,
                "last_outcome": self.last_outcome,
                "always_allowed": sorted(self.approvals.always_allowed),
                "next_config": self.next_config,
                "stream_state": stream_state,
                "resume": resume,
                "context": None if view == ContextView() else view,
                "turns": self.log.turns,
                "branches": self.log.branches,
            }
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
            kind=kind,
            at=workflow.now(),
            turn_id=turn or self.running.turn_id,
            step=self.running.step,
            text=text,
            **fields,
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
        running = self.running
        lines = [
            f"**{self.state}**" + (f" · {running.turn_id} step {running.step}" if running.turn_id else "")
        ]
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

    def count_step(self) -> None:
        """A step (a model request) began: counted for the session, shown in the UI's details."""
        self.counters.steps += 1
        self.show_details()

    def next_turn_id(self) -> str:
        self.counters.turn_seq += 1
        return f"turn-{self.counters.turn_seq}"

    def busy(self) -> bool:
        """A turn is under way (running, waiting for a person's approval, or about to resume: this run
        continued as new while it waited)."""
        return self.state in ("running", "waiting_approval") or self.running.resume is not None

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
        return [info for n in self.running.active_skills if compiled and (info := compiled.skill(n))]
