"""SessionWorkflow: one agent session as a durable run loop.

idle -> running -> idle | done. A turn is one prompt's work; a step is one model request and the
tool calls it asks for. Everything that touches the world runs as an activity; the workflow only
decides, records and publishes. Deterministic code only (docs/architecture.md, "Durability rules the
code relies on").

This module holds the workflow class, its run loop and its handlers (Temporal wants signals, queries
and updates as methods of the class). The parts it is composed of, made in `__init__`, hold the rest:
the session's book and events (core.py) with its transcript (transcript_log.py), the running turn
and approvals (turn.py, approvals.py), the tool router (tools.py), the context keeper (context.py),
an ACP agent's runner (acp.py), and the turn runner (loop.py), where a turn is driven and which owns
the running turn's task. The handlers change the session through the parts' methods, never their
fields. The parts are imported passed through, so only this module and stream.py run again in the
sandbox for every run.
"""

from __future__ import annotations

import asyncio
import contextvars

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic_ai.messages import ModelMessage

    # Not `from agentwolf.workflows.session import branches`: a name taken from the sandboxed package is
    # imported past the passthrough, and every run executed the module (its models) again.
    import agentwolf.workflows.session.branches as branches
    import agentwolf.workflows.session.closing as closing
    import agentwolf.workflows.session.memory as memory
    from agentwolf.config.manifest import Manifest, McpServerConfig
    from agentwolf.workflows.archive import TranscriptTail
    from agentwolf.workflows.configs.config_update import ConfigUpdate
    from agentwolf.workflows.contracts import (
        BRANCHES_QUERY,
        COMPILED_QUERY,
        MANIFEST_QUERY,
        PROMPT_LATER_SIGNAL,
        REWIND_UPDATE,
        SNAPSHOT_QUERY,
        TRANSCRIPT_QUERY,
        TRANSCRIPT_TAIL_QUERY,
        CompiledAgent,
    )
    from agentwolf.workflows.session.acp import AcpRunner
    from agentwolf.workflows.session.branches import BranchInfo, Rewound
    from agentwolf.workflows.session.context import ContextKeeper
    from agentwolf.workflows.session.core import SessionCore
    from agentwolf.workflows.session.loop import TurnRunner
    from agentwolf.workflows.session.output import structured
    from agentwolf.workflows.session.tools import ToolRouter
    from agentwolf.workflows.session_input import SessionInput
    from agentwolf.workflows.turn_settings import TurnSettings
    from agentwolf.workflows.types import (
        SESSION_WORKFLOW,
        TASK_FAILED,
        Approval,
        ExtensionsChanged,
        SessionResult,
        SessionStatus,
        tenant_of,
    )

from agentwolf.workflows.session.stream import SessionStream  # workflow code: sandboxed like this module

RELEASE_ON_CANCEL = "release-on-cancel"  # patch: a cancelled session stops its client's servers too
DETACH_AT_CLOSE = "detach-at-close"  # patch: closing answers waiting follower polls, refuses new ones
REWIND = "rewind"  # patch: the rewind update (a session goes back to a turn or a branch)
REWIND_VIEW = "rewind-view"  # patch: a rewind ends every index of the view at the cut, the fold's too,
# and measures the context anew
IDLE_CLOSE = "idle-close"  # patch: a session idle for host.sessions.idle_close_after closes
HANDED_OVER = "handed over to the next run"
"""What a query that reads the transcript says once this run let it go (`_release`); clients ask
again (client/transient.py), and reach the next run, or this one replayed."""


@workflow.defn(name=SESSION_WORKFLOW)
class SessionWorkflow:
    """The workflow: its run loop takes prompts and steers one turn at a time; its handlers are how
    clients reach it."""

    @workflow.init
    def __init__(self, inp: SessionInput) -> None:
        self.core = SessionCore(inp, SessionStream(prior_state=inp.stream_state))
        # The stream keeps its log compactly (turn.py's CompactLog); the decoded one would stay in the
        # input, which the SDK holds for the whole run: up to `events_kept` events, a second time.
        inp.stream_state = None
        self.context = ContextKeeper(self.core)
        self.runner = TurnRunner(self.core, ToolRouter(self.core), self.context, AcpRunner(self.core))
        self.turn_contexts: dict[str, contextvars.Context] = {}
        """Queued turns' prompter contexts; not carried over continue-as-new (tracing only)."""
        self.released: int | None = None
        """The transcript's length when `_release` let it go: this run has handed over."""

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
        self.core.show_details()
        try:
            while True:
                if self.core.running.resume is not None:
                    prompt = self.core.running.resume.prompt
                else:
                    if not await self._idle():
                        break
                    if self.context.compact_requested and not self.core.waiting():
                        await self.context.compact_at_idle()  # `wolf compact` between turns
                        continue
                    if not self.core.waiting() or self.runner.moving():
                        await self.runner.continue_as_new()  # prompts and steers go along to the next run
                    prompt = self.core.next_prompt()
                self.runner.start(prompt, self.turn_contexts.pop(prompt.turn_id, None))
                await self.runner.await_turn()
                if inp.background and not inp.keep:
                    break
        except workflow.ContinueAsNewError:
            if not workflow.unsafe.is_replaying():
                self._release(inp)
            raise
        except asyncio.CancelledError:
            # A Temporal cancel (the UI, `temporal workflow cancel`, a parent that stops): the turn
            # ends as interrupted, the session closes with outcome `cancelled`, the workflow is cancelled.
            await self.runner.stop("the session was cancelled")
            self._close("cancelled")
            if workflow.patched(RELEASE_ON_CANCEL):
                await closing.release(self.core, self.runner.acp)
            await workflow.wait_condition(workflow.all_handlers_finished)
            raise
        self._close(self.core.last_outcome)
        await memory.extract_at_close(self.core)
        await closing.release(self.core, self.runner.acp)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if inp.background and self.core.last_outcome == "failed":
            raise ApplicationError(  # the counters go along: a parent counts what its child spent
                f"{TASK_FAILED}{self.core.last_output}",
                self.core.counters,
                type="TurnFailed",
                non_retryable=True,
            )
        return SessionResult(
            session_id=inp.session_id,
            output=self.core.last_output,
            outcome=self.core.last_outcome,
            counters=self.core.counters,
            structured=structured(self.core.inp.output_schema, self.core.last_outcome, self.core.last_output),
        )

    def _release(self, inp: SessionInput) -> None:
        """This run has handed over: the snapshot the SDK is about to serialise holds what the next
        run needs. Its transcript and turn marks are let go here, so they are freed as soon as that is
        done: a finished run holds cycles and goes only with a full collection, which a worker runs
        rarely, and the next run decodes its own copy meanwhile (two whole copies at once, an old
        one more at every continue-as-new until that collection). Not while replaying: a query to
        this run (a closed run is replayed for it) reads them.

        A query can still reach this instance after it handed over, before the worker evicts it (the
        SDK answers a query that came during the last activation once that activation is done): the
        transcript queries refuse then (HANDED_OVER, asked again), they would read an empty one."""
        self.released = len(self.core.log.transcript)
        inp.transcript, inp.turns = [], []
        self.core.released()

    async def _idle(self) -> bool:
        """Wait for work (a prompt, a steer) or a snapshot; False when the session is to close: it
        was told to, or it stayed idle for `host.sessions.idle_close_after`."""
        limit = self.core.inp.manifest.host.sessions.idle_close_after or self.core.inp.idle_close_after
        try:
            await workflow.wait_condition(
                lambda: (
                    self.core.waiting()
                    or self.core.closing
                    or self.context.compact_requested
                    or self.runner.should_snapshot()
                ),
                timeout=limit if limit and workflow.patched(IDLE_CLOSE) else None,
                timeout_summary="idle close",
            )
        except TimeoutError:
            source = (
                "host.sessions.idle_close_after"
                if self.core.inp.manifest.host.sessions.idle_close_after
                else "the idle limit the session was started with"
            )
            self.core.publish("limit_reached", text=f"closed after {limit} idle ({source})")
            return False
        return not self.core.closing

    def _close(self, outcome: str | None) -> None:
        """Done: what never ran is said, then `session_closed`; waiting follower polls are answered
        and new ones refused, or one that came while the close released servers would keep the run
        open for ever (nothing would be published for it again)."""
        self.core.set_state("done")
        self.core.drop_waiting()
        self.core.publish("session_closed", outcome=outcome, usage=self.core.counters.usage)
        if workflow.patched(DETACH_AT_CLOSE):
            self.core.stream.detach_pollers()

    # -- inputs --------------------------------------------------------------------------------

    @workflow.update(description="Start a turn with this prompt (or queue it); returns its turn id.")
    def prompt(self, text: str, settings: TurnSettings | None = None) -> str:
        """Start a turn (or queue it); returns its turn id. `settings`: this turn's own (TurnSettings)."""
        return self._queue(text, settings)

    def _queue(self, text: str, settings: TurnSettings | None) -> str:
        if self.core.busy() and self.core.agent_config().double_texting == "interrupt":
            self.runner.interrupt("interrupted by a new prompt")
        turn_id = self.core.queue_prompt(text, settings)
        # The turn runs in its prompter's context: with tracing on, in its trace (telemetry/turns.py).
        self.turn_contexts[turn_id] = contextvars.copy_context()
        return turn_id

    @prompt.validator
    def _validate_prompt(self, text: str, settings: TurnSettings | None = None) -> None:
        if not text.strip():
            raise ValueError("empty prompt")
        if self.core.closing or self.core.state == "done":
            raise ValueError("the session is closed")
        if self.core.inp.background and not self.core.inp.keep and self.core.counters.turn_seq:
            raise ValueError(
                "this background task takes no more prompts; steer it while it runs, or submit a new "
                "task (`wolf submit --keep` keeps a task open for more prompts)"
            )
        if (self.core.busy() or self.core.queue) and self.core.agent_config().double_texting == "reject":
            raise ValueError("a turn is running and this agent's double_texting policy is 'reject'")
        limit = self.core.inp.manifest.host.sessions.max_queued
        if len(self.core.queue) >= limit:
            raise ValueError(
                f"{len(self.core.queue)} prompts already wait (host.sessions.max_queued): try again later"
            )

    @workflow.signal(
        name=PROMPT_LATER_SIGNAL,
        description="A prompt sent while no worker polled: queued as `prompt` queues it (refused: an event).",
    )
    def prompt_later(self, text: str, settings: TurnSettings | None = None) -> None:
        """`prompt` for a client that found no worker polling: a signal waits in the history until
        one does (an update needs a worker to be taken). A prompt `prompt` would refuse is dropped
        with an error event, as nobody waits for an answer."""
        try:
            self._validate_prompt(text, settings)
        except ValueError as exc:
            self.core.publish("error", text=f"prompt dropped: {exc}: {text}", outcome="dropped")
            return
        self._queue(text, settings)

    @workflow.signal(
        description="A user message for the running turn's next model request (a new turn when idle)."
    )
    def steer(self, text: str) -> None:
        """A user message for the next model request of the running turn (or a new turn when idle).
        Past `max_steers` waiting ones it is dropped with an event (clients check first:
        `WolfClient.steer`)."""
        if self.core.closing or not text.strip():
            return
        self.core.add_steer(text)

    @workflow.signal(
        description="Let a tool call waiting for approval run; `always` allows that tool for the session."
    )
    def approve(self, answer: Approval) -> None:
        """Let a tool call waiting for approval run (`always`: this tool, for the rest of the session)."""
        self._answer(answer, approved=True)

    @workflow.signal(
        description="Refuse a tool call waiting for approval; the model sees the refusal and the reason."
    )
    def deny(self, answer: Approval) -> None:
        """Refuse a tool call waiting for approval; the model sees the refusal and the reason."""
        self._answer(answer, approved=False)

    def _answer(self, answer: Approval, approved: bool) -> None:
        if not self.core.approvals.decide(answer, approved):
            workflow.logger.warning(
                "ignored an answer for call %r: no such call waits for approval", answer.call_id
            )

    @workflow.signal(
        description="A new version of this session's registry config, taken at the next turn boundary."
    )
    def config_changed(self, update: ConfigUpdate) -> None:
        """A new version of this session's config: taken at the next turn boundary (never mid-step)."""
        self.core.offer_config(update)

    @workflow.signal(
        description="Skills or MCP tool lists this agent uses changed: recompile before the next step."
    )
    def extensions_changed(self, change: ExtensionsChanged) -> None:
        """Skills or MCP lists this agent uses changed: recompile before the next model request."""
        if self.core.compiled is None or not set(change.sources) & set(self.core.compiled.sources):
            return
        self.core.running.stale.mark(change.detail or ", ".join(change.sources))
        self.core.publish("extensions_changed", text=self.core.running.stale.reason)

    @workflow.signal(description="MCP servers that join this session only (its client's), by name.")
    def join_servers(self, servers: dict[str, McpServerConfig]) -> None:
        """Servers the session's client brings (an editor reattaching): they join the session's own,
        a same-named one replaced; the agent recompiles before its next model request."""
        self.core.join_servers(servers)

    @workflow.signal(description="Cancel the running turn; the session goes idle with a valid transcript.")
    def interrupt(self, reason: str | None = None) -> None:
        self.runner.interrupt(reason or "interrupted by the user")

    @workflow.signal(
        description="Compact the working context at the next safe point (between steps or turns)."
    )
    def compact(self) -> None:
        if not self.core.closing:
            self.context.request_compaction()

    @workflow.signal(
        description="Pin a note: sent with the instructions in every model request, never compacted."
    )
    def pin(self, text: str) -> None:
        self.context.pin(text)

    @workflow.signal(description="Finish the session (a running turn is interrupted first).")
    def close(self) -> None:
        self.core.close()
        self.runner.interrupt("the session was closed")

    @workflow.query(description="State, current turn and step, counters (tokens, USD), pending approvals.")
    def status(self) -> SessionStatus:
        return SessionStatus(
            session_id=self.core.inp.session_id,
            tenant=self.core.inp.tenant,
            agent=self.core.inp.agent,
            config_id=self.core.inp.manifest.identity,
            state=self.core.state,
            turn_id=self.core.running.turn_id,
            step=self.core.running.step,
            queued=len(self.core.queue),
            steer_room=max(0, self.core.inp.manifest.host.sessions.max_steers - len(self.core.steers)),
            counters=self.core.counters,
            transcript_len=len(self.core.log.transcript) if self.released is None else self.released,
            last_output=self.core.last_output,
            last_outcome=self.core.last_outcome,
            pending_approvals=list(self.core.approvals.pending.values()),
            parent=self.core.inp.parent,
            config_name=self.core.inp.config_name,
            config_version=self.core.inp.config_version,
            context_tokens=self.context.context_tokens(self.core.compiled),
            context_window=self.context.window(self.core.compiled),
            compactions=self.context.view.compactions,
        )

    @workflow.query(name=TRANSCRIPT_QUERY, description="The whole transcript (pydantic-ai messages).")
    def get_transcript(self) -> list[ModelMessage]:
        self._check_held()
        if archived := self.core.log.archive.length:
            raise ApplicationError(
                f"{archived} of this session's messages are archived in the payload store: "
                f"read its transcript with the `{TRANSCRIPT_TAIL_QUERY}` query and the store "
                "(WolfClient.transcript does)",
                type="TranscriptArchived",
            )
        return self.core.log.transcript

    @workflow.query(
        name=TRANSCRIPT_TAIL_QUERY,
        description="The transcript as held: its archive (in the payload store) and the messages after it.",
    )
    def get_transcript_tail(self) -> TranscriptTail:
        self._check_held()
        return TranscriptTail(archive=self.core.log.archive, messages=self.core.log.tail())

    @workflow.update(
        name=REWIND_UPDATE,
        description="Go back to an earlier turn (the later ones become a branch), or to a branch (redo).",
    )
    def rewind(self, to: str) -> Rewound:
        """`to`: a turn number, or a branch's name. Nothing runs again; the effects the set-aside
        turns left are said, not undone (workflows/session/branches.py)."""
        workflow.patched(REWIND)
        whole = workflow.patched(REWIND_VIEW)
        done, view = self.core.rewind(to, self.context.view, whole_view=whole)
        self.context.cut(view, sizes_too=whole)  # before REWIND_VIEW (replayed histories) the sizes stayed
        self.core.workspace_rewound()  # the next call starts from the line's last snapshot
        return done

    @rewind.validator
    def _validate_rewind(self, to: str) -> None:
        core = self.core
        if core.closing or core.state == "done":
            raise ValueError("the session is closed")
        if core.busy() or core.queue or core.steers:
            raise ValueError("a turn is running or waits: rewind once the session is idle (or interrupt it)")
        decided = core.log.plan(to)
        archived = core.log.archive.length
        # Into the archive, or before a summary that covers archived messages (they would be lost
        # from the working context: neither summary nor fold).
        summarised = self.context.view.summary_upto if archived else 0
        if decided.keep < max(archived, summarised):
            raise ValueError(
                f"{to} lies in the part of this session archived in the payload store (its first "
                f"{archived} messages, summarised up to message {summarised}): fork from it "
                f"instead (`wolf fork ID --at {to}`)"
            )

    @workflow.query(name=BRANCHES_QUERY, description="The branches rewinds set aside (`wolf branches`).")
    def get_branches(self) -> list[BranchInfo]:
        return branches.infos(self.core.log.branches)

    @workflow.query(name=SNAPSHOT_QUERY, description="The session as a fork starts from it (see cuts.py).")
    def get_snapshot(self) -> SessionInput:
        self._check_held()
        core, log = self.core, self.core.log
        return core.inp.model_copy(
            update={
                "prompt": None,
                "transcript": log.tail(),
                "archive": log.archive if log.archive.length else None,
                "compiled": core.compiled,
                "counters": core.counters,
                "turns": log.turns,
                "context": self.context.view,
                "stream_state": None,
            }
        )

    def _check_held(self) -> None:
        if self.released is not None:
            raise ApplicationError(HANDED_OVER, type="HandedOver")

    @workflow.query(name=MANIFEST_QUERY, description="The session's manifest, placeholders unresolved.")
    def get_manifest(self) -> Manifest:
        return self.core.inp.manifest

    @workflow.query(name=COMPILED_QUERY, description="The compiled agent: models, instructions, tools.")
    def get_compiled(self) -> CompiledAgent | None:
        return self.core.compiled
