"""SessionWorkflow: one agent session as a durable run loop.

idle -> running -> idle | done. A turn is one prompt's work; a step is one model request and the
tool calls it asks for. Everything that touches the world runs as an activity; the workflow only
decides, records and publishes. Deterministic code only (docs/architecture.md, "Durability rules the
code relies on").

This module holds the workflow class, its run loop and its handlers (Temporal wants signals, queries
and updates as methods of the class). The layers it is built from hold the rest: state and shared
helpers (core.py), tool routing and approvals (tools.py), the turn loop (loop.py). They are imported
passed through, so only this module and stream.py run again in the sandbox for every run.
"""

from __future__ import annotations

import asyncio
import contextvars

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic_ai.messages import ModelMessage

    from agentwolf.config.manifest import Manifest, McpServerConfig
    from agentwolf.workflows.contracts import COMPILED_QUERY, MANIFEST_QUERY, TRANSCRIPT_QUERY, CompiledAgent
    from agentwolf.workflows.loop import SNAPSHOT_UNANSWERED, TurnLoop
    from agentwolf.workflows.output import structured
    from agentwolf.workflows.session_input import SessionInput
    from agentwolf.workflows.turn_settings import TurnSettings
    from agentwolf.workflows.types import (
        SESSION_WORKFLOW,
        TASK_FAILED,
        Approval,
        ConfigUpdate,
        ExtensionsChanged,
        Prompt,
        SessionResult,
        SessionStatus,
        tenant_of,
    )

from agentwolf.workflows.stream import SessionStream  # workflow code: sandboxed like this module

RELEASE_ON_CANCEL = "release-on-cancel"  # patch: a cancelled session stops its client's servers too
DETACH_AT_CLOSE = "detach-at-close"  # patch: closing answers waiting follower polls, refuses new ones
IDLE_CLOSE = "idle-close"  # patch: a session idle for host.sessions.idle_close_after closes


@workflow.defn(name=SESSION_WORKFLOW)
class SessionWorkflow(TurnLoop):
    """The workflow: its run loop takes prompts and steers one turn at a time; its handlers are how
    clients reach it."""

    @workflow.init
    def __init__(self, inp: SessionInput) -> None:
        super().__init__(inp, SessionStream(prior_state=inp.stream_state))
        self.turn_contexts: dict[str, contextvars.Context] = {}
        """Queued turns' prompter contexts; not carried over continue-as-new (tracing only)."""

    @workflow.run
    async def run(self, inp: SessionInput) -> SessionResult:
        wid = workflow.info().workflow_id
        if tenant_of(wid) != inp.tenant:
            raise ApplicationError(
                f"refused: session {wid!r} belongs to tenant {tenant_of(wid)!r}, "
                f"its input says {inp.tenant!r}",
                type="TenantMismatch",
                non_retryable=True,
            )
        self._show_details()
        try:
            while True:
                if self.resume is not None:
                    prompt = self.resume.prompt
                else:
                    if not await self._idle():
                        break
                    if self.compact_requested and not (self.queue or self.steers):
                        await self._compact_at_idle()  # `wolf compact` between turns
                        continue
                    if not (self.queue or self.steers) or self._moving():
                        await self._continue_as_new()  # prompts and steers go along to the next run
                    if self.queue:
                        prompt = self.queue.pop(0)
                    else:  # a steer while idle starts a turn
                        prompt = Prompt(turn_id=self._next_turn_id(), text="\n".join(self.steers))
                        self.steers.clear()
                context = self.turn_contexts.pop(prompt.turn_id, None)
                self.turn_task = asyncio.create_task(self._run_turn(prompt), context=context)
                await self._await_turn()
                if inp.background and not inp.keep:
                    break
        except asyncio.CancelledError:
            # A Temporal cancel (the UI, `temporal workflow cancel`, a parent that stops): the turn
            # ends as interrupted, the session closes with outcome `cancelled`, the workflow is cancelled.
            await self._stop_turn("the session was cancelled")
            self._close("cancelled")
            if workflow.patched(RELEASE_ON_CANCEL):
                await self._release_session_servers()
            await workflow.wait_condition(workflow.all_handlers_finished)
            raise
        self._close(self.last_outcome)
        await self._release_session_servers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if inp.background and self.last_outcome == "failed":
            raise ApplicationError(  # the counters go along: a parent counts what its child spent
                f"{TASK_FAILED}{self.last_output}", self.counters, type="TurnFailed", non_retryable=True
            )
        return SessionResult(
            session_id=inp.session_id,
            output=self.last_output,
            outcome=self.last_outcome,
            counters=self.counters,
            structured=structured(self.inp.output_schema, self.last_outcome, self.last_output),
        )

    async def _idle(self) -> bool:
        """Wait for work (a prompt, a steer) or a snapshot; False when the session is to close: it
        was told to, or it stayed idle for `host.sessions.idle_close_after`."""
        limit = self.inp.manifest.host.sessions.idle_close_after or self.inp.idle_close_after
        try:
            await workflow.wait_condition(
                lambda: (
                    bool(self.queue or self.steers)
                    or self.closing
                    or self.compact_requested
                    or self._should_snapshot()
                ),
                timeout=limit if limit and workflow.patched(IDLE_CLOSE) else None,
                timeout_summary="idle close",
            )
        except TimeoutError:
            source = (
                "host.sessions.idle_close_after"
                if self.inp.manifest.host.sessions.idle_close_after
                else "the idle limit the session was started with"
            )
            self._publish("limit_reached", text=f"closed after {limit} idle ({source})")
            return False
        return not self.closing

    async def _await_turn(self) -> None:
        """Wait for the running turn; an interrupt cancels it from here, not from the signal handler.

        Temporal applies an activation's signals before its results: cancelling in the handler would
        discard a tool result that completed in the same activation. Here the results are in first."""
        task = self.turn_task
        assert task is not None
        while True:
            await workflow.wait_condition(
                lambda: task.done() or self.interrupt_requested is not None or self._should_snapshot_waiting()
            )
            if task.done() or self.interrupt_requested is not None:
                break
            # Again: what ran since the condition held (the turn taking an answer) may have changed it.
            if self._should_snapshot_waiting() or not workflow.patched(SNAPSHOT_UNANSWERED):
                await self._continue_as_new(waiting=True)  # ends this run; the turn resumes in the next
        if not task.done():
            await self._stop_turn(self.interrupt_requested or "interrupted")
        self.turn_task = None

    async def _stop_turn(self, reason: str) -> None:
        """Cancel the running turn (if any) and wait until it has closed its tool calls."""
        task = self.turn_task
        self.interrupt_requested = None
        if task is None or task.done():
            return
        self.interrupt_reason = reason
        task.cancel()
        await workflow.wait([task])

    def _close(self, outcome: str | None) -> None:
        """Done: what never ran is said, then `session_closed`; waiting follower polls are answered
        and new ones refused, or one that came while the close released servers would keep the run
        open for ever (nothing would be published for it again)."""
        self._set_state("done")
        for prompt in self.queue:
            self._publish(
                "error",
                text=f"not run: the session closed before this turn started: {prompt.text}",
                outcome="dropped",
                turn=prompt.turn_id,
            )
        if self.steers:
            self._publish(
                "error", text="not applied: the session closed: " + " | ".join(self.steers), outcome="dropped"
            )
        self.queue.clear()
        self.steers.clear()
        self._publish("session_closed", outcome=outcome, usage=self.counters.usage)
        if workflow.patched(DETACH_AT_CLOSE):
            self.stream.detach_pollers()

    # -- inputs --------------------------------------------------------------------------------

    @workflow.update(description="Start a turn with this prompt (or queue it); returns its turn id.")
    def prompt(self, text: str, settings: TurnSettings | None = None) -> str:
        """Start a turn (or queue it); returns its turn id. `settings`: this turn's own (TurnSettings)."""
        if self._busy() and self._agent_config().double_texting == "interrupt":
            self._interrupt("interrupted by a new prompt")
        turn_id = self._next_turn_id()
        self.queue.append(Prompt(turn_id=turn_id, text=text, settings=settings))
        # The turn runs in its prompter's context: with tracing on, in its trace (telemetry/turns.py).
        self.turn_contexts[turn_id] = contextvars.copy_context()
        return turn_id

    @prompt.validator
    def _validate_prompt(self, text: str, settings: TurnSettings | None = None) -> None:
        if not text.strip():
            raise ValueError("empty prompt")
        if self.closing or self.state == "done":
            raise ValueError("the session is closed")
        if self.inp.background and not self.inp.keep and self.counters.turn_seq:
            raise ValueError(
                "this background task takes no more prompts; steer it while it runs, or submit a new "
                "task (`wolf submit --keep` keeps a task open for more prompts)"
            )
        if (self._busy() or self.queue) and self._agent_config().double_texting == "reject":
            raise ValueError("a turn is running and this agent's double_texting policy is 'reject'")
        limit = self.inp.manifest.host.sessions.max_queued
        if len(self.queue) >= limit:
            raise ValueError(
                f"{len(self.queue)} prompts already wait (host.sessions.max_queued): try again later"
            )

    @workflow.signal(
        description="A user message for the running turn's next model request (a new turn when idle)."
    )
    def steer(self, text: str) -> None:
        """A user message for the next model request of the running turn (or a new turn when idle).
        Past `max_steers` waiting ones it is dropped with an event (clients check first:
        `WolfClient.steer`)."""
        if self.closing or not text.strip():
            return
        if len(self.steers) >= self.inp.manifest.host.sessions.max_steers:
            self._publish(
                "error",
                text=f"steer dropped: {len(self.steers)} steers already wait (host.sessions.max_steers)",
            )
            return
        self.steers.append(text)

    @workflow.signal(
        description="Let a tool call waiting for approval run; `always` allows that tool for the session."
    )
    def approve(self, answer: Approval) -> None:
        """Let a tool call waiting for approval run (`always`: this tool, for the rest of the session)."""
        self._decide(answer, approved=True)

    @workflow.signal(
        description="Refuse a tool call waiting for approval; the model sees the refusal and the reason."
    )
    def deny(self, answer: Approval) -> None:
        """Refuse a tool call waiting for approval; the model sees the refusal and the reason."""
        self._decide(answer, approved=False)

    @workflow.signal(
        description="A new version of this session's registry config, taken at the next turn boundary."
    )
    def config_changed(self, update: ConfigUpdate) -> None:
        """A new version of this session's config: taken at the next turn boundary (never mid-step)."""
        if update.name != self.inp.config_name or self.inp.pinned:
            return
        if update.version > max(
            self.inp.config_version or 0, self.next_config.version if self.next_config else 0
        ):
            self.next_config = update

    @workflow.signal(
        description="Skills or MCP tool lists this agent uses changed: recompile before the next step."
    )
    def extensions_changed(self, change: ExtensionsChanged) -> None:
        """Skills or MCP lists this agent uses changed: recompile before the next model request."""
        if self.compiled is None or not set(change.sources) & set(self.compiled.sources):
            return
        self.stale.mark(change.detail or ", ".join(change.sources))
        self._publish("extensions_changed", text=self.stale.reason)

    @workflow.signal(description="MCP servers that join this session only (its client's), by name.")
    def join_servers(self, servers: dict[str, McpServerConfig]) -> None:
        """Servers the session's client brings (an editor reattaching): they join the session's own,
        a same-named one replaced; the agent recompiles before its next model request."""
        joined = {**self.inp.session_servers, **servers}
        if joined != self.inp.session_servers:
            self.inp = self.inp.model_copy(update={"session_servers": joined})
            self.stale.mark(f"the client's MCP servers changed ({', '.join(sorted(servers))})")

    @workflow.signal(description="Cancel the running turn; the session goes idle with a valid transcript.")
    def interrupt(self, reason: str | None = None) -> None:
        self._interrupt(reason or "interrupted by the user")

    @workflow.signal(
        description="Compact the working context at the next safe point (between steps or turns)."
    )
    def compact(self) -> None:
        if not self.closing:
            self.compact_requested = True

    @workflow.signal(
        description="Pin a note: sent with the instructions in every model request, never compacted."
    )
    def pin(self, text: str) -> None:
        if text.strip() and text not in self.view.pinned:
            self.view = self.view.model_copy(update={"pinned": [*self.view.pinned, text]})

    @workflow.signal(description="Finish the session (a running turn is interrupted first).")
    def close(self) -> None:
        self.closing = True
        self._interrupt("the session was closed")

    @workflow.query(description="State, current turn and step, counters (tokens, USD), pending approvals.")
    def status(self) -> SessionStatus:
        return SessionStatus(
            session_id=self.inp.session_id,
            tenant=self.inp.tenant,
            agent=self.inp.agent,
            config_id=self.inp.manifest.identity,
            state=self.state,
            turn_id=self.turn_id,
            step=self.step,
            queued=len(self.queue),
            steer_room=max(0, self.inp.manifest.host.sessions.max_steers - len(self.steers)),
            counters=self.counters,
            transcript_len=len(self.transcript),
            last_output=self.last_output,
            last_outcome=self.last_outcome,
            pending_approvals=list(self.pending_approvals.values()),
            parent=self.inp.parent,
            config_name=self.inp.config_name,
            config_version=self.inp.config_version,
            context_tokens=self._context_tokens(self.compiled),
            context_window=self._window(self.compiled),
            compactions=self.view.compactions,
        )

    @workflow.query(name=TRANSCRIPT_QUERY, description="The whole transcript (pydantic-ai messages).")
    def get_transcript(self) -> list[ModelMessage]:
        return self.transcript

    @workflow.query(name=MANIFEST_QUERY, description="The session's manifest, placeholders unresolved.")
    def get_manifest(self) -> Manifest:
        return self.inp.manifest

    @workflow.query(name=COMPILED_QUERY, description="The compiled agent: models, instructions, tools.")
    def get_compiled(self) -> CompiledAgent | None:
        return self.compiled
