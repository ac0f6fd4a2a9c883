"""The turn runner: where a turn is driven. `run_turn` is begin -> drive -> end: it owns the running
turn (turn.py's RunningTurn, which only it and its steps write) and the task that runs it (start,
interrupt, stop), drives a turn's steps (compile when stale, model request, the tool calls it asks
for) within its limits (turn_limits.py), a team's members or an ACP agent's turn, and hands the
turn's end, a `TurnEnd`, to the core (`SessionCore.end_turn`), as openai-agents' run loop returns
typed step results. It also decides when the session continues as new. It calls the session's
other parts: the tool router (tools.py), the context keeper (context.py), an ACP agent's runner
(acp.py); all of them share the session's core (core.py), which holds the transcript (transcript_log.py).

Imported passed through, like turn.py: its classes are created once per process, not re-created for
every run by the sandbox (about 10 KB per cached session as sandboxed modules). The sandbox does not
watch this code, so it calls only `workflow.*` and deterministic helpers; an import-linter contract
keeps clock, randomness, environment and I/O modules out of it (docs/architecture.md, "Durability
rules the code relies on").
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from datetime import timedelta

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from agentwolf.config.manifest import Team
from agentwolf.config.quotas import DEFAULT_PRIORITY, PRIORITY_MEMO
from agentwolf.payloads import THRESHOLD
from agentwolf.workflows.contracts import (
    CommandInput,
    CommandOutput,
    CompiledAgent,
    CompileInput,
    ModelRequestInput,
    ModelRequestOutput,
)
from agentwolf.workflows.session.acp import AcpRunner
from agentwolf.workflows.session.context import ContextKeeper
from agentwolf.workflows.session.core import SessionCore
from agentwolf.workflows.session.output import judge
from agentwolf.workflows.session.tools import ToolRouter
from agentwolf.workflows.session.turn import (
    COMPILE_RETRY,
    HEARTBEAT_TIMEOUT,
    MODEL_RETRY,
    MODEL_TIMEOUT,
    RELEASE_SESSION_SERVERS,
    SLASH_COMMANDS,
    TOOL_RETRY,
    WAITING_SNAPSHOT_EVENTS,
    Turn,
    TurnStopped,
    all_or_cancel,
    cause_message,
    model_name,
    short,
    turn_end,
)
from agentwolf.workflows.session.turn_limits import LimitGuard
from agentwolf.workflows.session_input import SessionInput
from agentwolf.workflows.types import Prompt, TurnOutcome, Usage

RESUME_INTERRUPT = "resume-interrupt"  # patch: an interrupt or close as a waiting turn resumes ends it
TURN_TASK_RAISED = "turn-task-raised"  # patch: an unexpected error in the turn fails the turn, not silently
RELEASE_FAILURE_SAID = "release-failure-said"  # patch: a failed release at close is an event, not a failure
SNAPSHOT_UNANSWERED = "snapshot-unanswered"  # patch: no waiting snapshot while an answer waits to be taken
SNAPSHOT_STALE = "snapshot-stale"  # patch: a waiting turn continues as new with a stale agent too
UPGRADE_AT_IDLE = "upgrade-at-idle"  # patch: an idle session continues as new onto the current build
PRIORITY_INPUT = "priority-input"  # patch: model requests carry the session's priority (no describe)
PROJECTED_SNAPSHOT = "projected-snapshot"  # patch: at idle, continue as new before the limit, not past it


class TurnRunner:
    """Runs a turn to its end, whatever ends it, and decides when the session continues as new. It
    owns the running turn (`core.running`) and the task that runs it: begin -> drive -> end, the end
    a `TurnEnd` the core records."""

    def __init__(self, core: SessionCore, router: ToolRouter, context: ContextKeeper, acp: AcpRunner) -> None:
        self.core = core
        self.running = core.running
        self.router = router
        self.context = context
        self.acp = acp
        self.task: asyncio.Task[None] | None = None
        """The running turn's task, from `start` until `await_turn` saw it end."""
        self.interrupt_requested: str | None = None
        """An interrupt or close asked for: `await_turn` cancels the turn after this activation's results."""
        self.carried = workflow.info().get_current_history_size()
        """This run's history when it started: about the snapshot it began with."""
        self.largest_turn = 0
        """The most history bytes a turn of this run added, with the idle time before it (followers'
        polls, pushes): what the next one is expected to add."""
        self.turn_ended_at: int | None = None
        """The history's size when this run's last turn ended."""

    def start(self, prompt: Prompt, context: contextvars.Context | None) -> None:
        self.task = asyncio.create_task(self.run_turn(prompt), context=context)

    async def run_turn(self, prompt: Prompt) -> None:
        """begin -> drive -> end: the turn's end is a typed record the core applies (its last
        request, approvals, counters, marks, `turn_finished`); then the running turn is closed."""
        started_at = self.turn_ended_at or workflow.info().get_current_history_size()
        turn, resuming = self._begin(prompt)
        outcome, output = await self._drive(prompt.text, turn, resuming)
        self.core.end_turn(turn_end(turn, prompt.turn_id, outcome, output, workflow.now()))
        self._end()
        self.turn_ended_at = workflow.info().get_current_history_size()
        self.largest_turn = max(self.largest_turn, self.turn_ended_at - started_at)

    def _begin(self, prompt: Prompt) -> tuple[Turn, bool]:
        """The running turn starts (or resumes: it continued as new while it waited for approval;
        its start was said and marked in the run before). True with the turn when it resumes."""
        running = self.running
        resume, running.resume = running.resume, None
        if resume is None:
            self.core.apply_config()
        running.turn_id, running.step, running.interrupt_reason = (
            prompt.turn_id,
            resume.step if resume else 0,
            None,
        )
        running.prompt = prompt
        running.turns_this_run += 1
        self.core.set_state("running")
        if resume is None:
            self.core.publish("turn_started", text=prompt.text)
            self.core.log.turn_started(prompt.turn_id, self.core.inp.config_version)
        running.turn = (
            Turn.resumed(resume)
            if resume
            else Turn(pending=[UserPromptPart(prompt.text, timestamp=workflow.now())])
        )
        return running.turn, resume is not None

    async def _drive(self, text: str, turn: Turn, resuming: bool) -> tuple[TurnOutcome, str | None]:
        """The turn's work (steps, a team's members, or an ACP agent's turn) to its outcome and
        output: whatever ends it is said as an event here."""
        try:
            if not resuming and text.startswith("/") and workflow.patched(SLASH_COMMANDS):
                text = await self._expand_command(text)
                turn.pending = [UserPromptPart(text, timestamp=workflow.now())]
            team = self.core.inp.manifest.teams.get(self.core.inp.agent)
            return "completed", await (
                self._run_team(team, text, turn)
                if team
                else self.acp.run(text, turn)
                if self.acp.runs()
                else self._run_steps(turn, resuming=resuming)
            )
        except (asyncio.CancelledError, ActivityError, ApplicationError) as err:
            # A local activity (a known-fast tool call) that fails for good raises a bare ApplicationError.
            if is_cancelled_exception(err):  # an interrupt, or the workflow itself was cancelled
                self.core.publish("interrupted", text=self.running.interrupt_reason or "cancelled")
                return "interrupted", None
            if isinstance(err, (ActivityError, ApplicationError)):
                self.core.publish("error", text=cause_message(err))
                return "failed", cause_message(err)
            raise
        except TurnStopped as stop:
            self.core.publish("error" if stop.outcome == "failed" else "limit_reached", text=str(stop))
            return stop.outcome, str(stop)
        except Exception as err:
            # Anything else (a bug, a schema jsonschema cannot resolve) fails this turn, not the
            # session: re-raised, it would end the task silently (asyncio keeps the error) and leave
            # the session `running` for good; failing the workflow task instead would retry the same
            # code on the same input for ever. Runs recorded before kept the old silence.
            if not workflow.patched(TURN_TASK_RAISED):
                raise
            workflow.logger.exception("turn %s failed on an unexpected error", self.running.turn_id)
            output = f"internal error: {type(err).__name__}: {err}"
            self.core.publish("error", text=output)
            return "failed", output

    def _end(self) -> None:
        """The running turn is over (the core recorded its end): its skills go, and the session idles."""
        if any(s.mcp_servers for s in self.core.active_skill_infos()):
            self.running.stale.mark("the turn's skills released their MCP servers")
        self.running.active_skills = []
        self.running.turn_id = None
        self.core.set_state("idle")

    def interrupt(self, reason: str) -> None:
        """Ask the run loop to cancel the running turn (`await_turn`), after this activation's results.
        A turn about to resume (this run's first activation, after a continue-as-new while it waited
        for approval) is running too: it is cancelled as soon as it has started."""
        running = self.task is not None and not self.task.done()
        if running or (self.running.resume is not None and workflow.patched(RESUME_INTERRUPT)):
            self.interrupt_requested = reason

    async def await_turn(self) -> None:
        """Wait for the running turn; an interrupt cancels it from here, not from the signal handler.

        Temporal applies an activation's signals before its results: cancelling in the handler would
        discard a tool result that completed in the same activation. Here the results are in first."""
        task = self.task
        assert task is not None
        while True:
            await workflow.wait_condition(
                lambda: task.done() or self.interrupt_requested is not None or self.should_snapshot_waiting()
            )
            if task.done() or self.interrupt_requested is not None:
                break
            # Again: what ran since the condition held (the turn taking an answer) may have changed it.
            if self.should_snapshot_waiting() or not workflow.patched(SNAPSHOT_UNANSWERED):
                await self.continue_as_new(waiting=True)  # ends this run; the turn resumes in the next
        if not task.done():
            await self.stop(self.interrupt_requested or "interrupted")
        self.task = None

    async def stop(self, reason: str) -> None:
        """Cancel the running turn (if any) and wait until it has closed its tool calls."""
        task = self.task
        self.interrupt_requested = None
        if task is None or task.done():
            return
        self.running.interrupt_reason = reason
        task.cancel()
        await workflow.wait([task])

    async def _run_steps(self, turn: Turn, resuming: bool = False) -> str | None:
        """Model request -> tool calls, until an answer without tool calls or a limit. `resuming`: the
        step's calls are known already (the turn continued as new while they waited for approval)."""
        guard = LimitGuard(self.core.limits())
        while True:
            if resuming:
                compiled = await self._current_compiled()
                resuming = False
            else:
                # Subagents may have spent a USD budget, or earlier turns.
                stop = guard.before_step(self.running.step, turn.usage.spent, self.core.counters.total.spent)
                if stop:
                    raise TurnStopped("limit", stop)
                for text in self.core.take_steers():
                    turn.pending.append(UserPromptPart(text, timestamp=workflow.now()))
                    self.core.publish("steer_applied", text=text)
                self.core.log.append(ModelRequest(parts=turn.pending, timestamp=workflow.now()))
                turn.pending = []
                self.running.step += 1
                self.core.count_step()
                compiled = await self._current_compiled()
                out = await self.context.request_fitting(compiled, turn, self._model_request)
                response = out.response
                self.core.log.append(response)
                turn.open_calls = response.tool_calls
                self.core.count_request(turn, out)  # spent, even if an interrupt ends the turn now
                self.core.check_interrupted()
                if response.text:
                    self.core.publish("model_text", text=response.text)
                if self.core.inp.output_schema is not None:  # a job's typed result (output.py)
                    verdict = judge(response, self.core.inp.output_schema, workflow.now())
                    if verdict.parts is not None:
                        turn.open_calls = []
                        turn.pending.extend(verdict.parts)
                        if verdict.result is not None:
                            return json.dumps(verdict.result)
                        self.core.publish(
                            "error", text=f"result refused, the model retries: {verdict.problems}"
                        )
                        continue
                if not turn.open_calls:
                    return response.text
                check = guard.calls_asked(turn, self.core.counters.total.spent)
                for text in check.warnings:
                    self.core.publish("limit_warning", text=text)
                if check.stop:
                    raise TurnStopped("limit", check.stop)
            calls = turn.open_calls
            await self.router.run_calls(compiled, calls, turn.finished)
            self.core.check_interrupted()  # every result is in: an interrupt now keeps them all
            turn.pending.extend(turn.finished[i] for i in range(len(calls)))
            self.core.count(turn, Usage(tool_calls=len(calls)))
            turn.open_calls, turn.finished = [], {}
            for tool in turn.warnings:
                text = guard.repeat_note(tool)
                turn.pending.append(UserPromptPart(text, timestamp=workflow.now()))
                self.core.publish("limit_warning", text=text, tool=tool)
            turn.warnings = []

    async def _run_team(self, team: Team, task: str, turn: Turn) -> str:
        """Members as child sessions: each gets the previous one's output, or all get the task."""
        self.core.log.append(ModelRequest(parts=turn.pending, timestamp=workflow.now()))
        turn.pending = []
        prefix = f"{self.core.inp.session_id}.{self.running.turn_id}"
        if team.mode == "sequential":
            output = task
            for i, member in enumerate(team.members):
                result = await self.router.child(member, output, f"{prefix}.{i}-{member}")
                if result.is_error:
                    raise TurnStopped("failed", f"team member {member}: {result.content}")
                output = result.content
        else:
            results = await all_or_cancel(
                [self.router.child(m, task, f"{prefix}.{i}-{m}") for i, m in enumerate(team.members)]
            )
            failed = [f"{m}: {r.content}" for m, r in zip(team.members, results, strict=True) if r.is_error]
            if failed:
                raise TurnStopped("failed", "team members failed: " + "; ".join(failed))
            output = "\n\n".join(f"## {m}\n{r.content}" for m, r in zip(team.members, results, strict=True))
        self.core.log.append(ModelResponse(parts=[TextPart(output)], timestamp=workflow.now()))
        return output

    async def release_session_servers(self) -> None:
        """The session closes: the MCP servers its client brought stop (on the worker this runs on;
        another that started one stops it when idle). Only sessions that have such servers run it.

        A release that fails for good is said (log, event), not raised: the session has closed
        already (`session_closed` is out), and the pool's idle reaper stops the servers anyway."""
        await self.acp.release()
        if not (self.core.inp.session_servers and workflow.patched(RELEASE_SESSION_SERVERS)):
            return
        try:
            await workflow.execute_activity(
                "wolf.release_session",
                self.core.ref(),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=TOOL_RETRY,
            )
        except ActivityError as err:
            if not workflow.patched(RELEASE_FAILURE_SAID):
                raise  # runs recorded before failed here
            workflow.logger.warning("releasing the client's MCP servers failed: %s", cause_message(err))
            self.core.publish(
                "error", text=f"the client's MCP servers were not released: {cause_message(err)}"
            )

    async def _current_compiled(self) -> CompiledAgent:
        """The compiled agent, recompiled first if the config or the agent's extensions changed."""
        stale = self.running.stale
        if self.core.compiled is None or stale.reason:
            generation = stale.generation
            compiled = await self._compile(stale.reason)
            stale.compiled(generation)  # stays stale when a newer change came in meanwhile
            return compiled
        return self.core.compiled

    async def _expand_command(self, text: str) -> str:
        """`/name args` -> the prompt it stands for; an unknown command fails the turn, no model call."""
        out = await workflow.execute_activity(
            "wolf.expand_command",
            CommandInput(
                ref=self.core.ref(), agent=self.core.inp.agent, turn_id=self.running.turn_id or "", text=text
            ),
            result_type=CommandOutput,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=TOOL_RETRY,
            summary=short(f"expand_command {text.split()[0]}"),
        )
        if out.text is None:
            raise TurnStopped("failed", out.error or f"cannot expand {text.split()[0]}")
        if out.skill and self.running.load_skill(out.skill):
            info = self.core.compiled.skill(out.skill) if self.core.compiled else None
            if info is not None and info.mcp_servers:
                self.running.stale.mark(f"/{out.skill} brings MCP servers {info.mcp_servers}")
        self.core.publish("command_expanded", text=out.text, tool=text.split()[0])
        return out.text

    async def _compile(self, reason: str | None = None) -> CompiledAgent:
        compiled = await workflow.execute_activity(
            "wolf.compile",
            CompileInput(
                ref=self.core.ref(),
                manifest=self.core.inp.manifest,
                agent=self.core.inp.agent,
                turn_id=self.running.turn_id or "",
                active_skills=self.running.active_skills,
                session_servers=self.core.inp.session_servers,
            ),
            result_type=CompiledAgent,
            start_to_close_timeout=timedelta(seconds=90),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,  # a worker lost mid-compile is noticed in seconds
            retry_policy=COMPILE_RETRY,
            summary=short(f"compile {self.core.inp.agent}" + (f" ({reason})" if reason else "")),
        )
        compiled = self.core.use(compiled)
        tools = ", ".join(t.name for t in compiled.tools) or "none"
        models = " -> ".join(compiled.labels or compiled.models)
        text = f"{compiled.agent} is ready: model {models}; tools {tools}"
        self.core.publish("compiled", text=f"{text} (recompiled: {reason})" if reason else text)
        return compiled

    async def _model_request(self, compiled: CompiledAgent) -> ModelRequestOutput:
        log, running = self.core.log, self.running
        delta = log.transcript[log.synced_len :]
        out = await workflow.execute_activity(
            "wolf.model_request",
            ModelRequestInput(
                ref=self.core.ref(),
                compiled_digest=compiled.digest,
                base_len=log.synced_len,
                base_digest=log.synced_digest,
                delta=delta,
                tool_names=self.router.offered(compiled),
                turn_id=running.turn_id or "",
                step=running.step,
                output=self.core.inp.output_schema,
                settings=running.prompt.settings if running.prompt else None,
                view=self.context.sent_view(),
                priority=workflow.memo_value(PRIORITY_MEMO, DEFAULT_PRIORITY, type_hint=int)
                if workflow.patched(PRIORITY_INPUT)
                else None,
            ),
            result_type=ModelRequestOutput,
            start_to_close_timeout=MODEL_TIMEOUT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=MODEL_RETRY,
            summary=f"model_request {model_name(compiled)} step {running.step}",
        )
        log.mark_sent(out.response)
        return out

    def should_snapshot_waiting(self) -> bool:
        """Continue as new while a turn waits for approval (for days, under steers, pushes and follower
        polls), once this run's history has grown: only when nothing of the step is in flight.

        Never while an answer waits to be taken: the turn takes it in this activation (it runs on
        past the snapshot, and the next run would wait for that call again). A stale agent no longer
        blocks it: the next run recompiles before the calls go on. Both checks come last and are
        patched only where they change the answer, so runs recorded before replay."""
        turn = self.running.turn
        if self.core.state != "waiting_approval" or turn is None or self.task is None:
            return False
        waiting = len(turn.open_calls) - len(turn.finished)
        if waiting != len(self.core.approvals.pending) or self.router.scripts.running:
            return False
        info = workflow.info()
        limit = self.core.inp.manifest.host.sessions.continue_as_new_bytes
        grown = info.get_current_history_length() >= WAITING_SNAPSHOT_EVENTS
        if not (grown and (info.is_continue_as_new_suggested() or info.get_current_history_size() > limit)):
            return False
        if self.core.approvals.unanswered() and workflow.patched(SNAPSHOT_UNANSWERED):
            return False
        return not self.running.stale.reason or workflow.patched(SNAPSHOT_STALE)

    def should_snapshot(self) -> bool:
        """At idle: when Temporal suggests it (also in a run without turns: idle followers' polls grow
        history too), when a newer build is current, or once this run has run a turn, before the byte
        limit: when the next turn (as large as this run's largest) and the snapshot that ends the run
        would pass it. Runs recorded before waited until the history itself had passed it."""
        if self.core.state != "idle":
            return False
        info = workflow.info()
        if info.is_continue_as_new_suggested() or self.moving():
            return True
        if not self.running.turns_this_run:
            return False
        size = info.get_current_history_size()
        limit = self.core.inp.manifest.host.sessions.continue_as_new_bytes
        if size > limit:
            return True
        projected = size + self.largest_turn + self.snapshot_bytes(self.largest_turn)
        return projected > limit and workflow.patched(PROJECTED_SNAPSHOT)

    def snapshot_bytes(self, more: int) -> int:
        """About what the snapshot that ends this run adds to its history once the transcript grew by
        `more` bytes (a turn adds at most its history bytes): the snapshot this run began with and what
        the run added to the transcript, inline up to the payload threshold; past it the history keeps
        a reference to the payload store."""
        inline = self.carried + self.core.log.appended_bytes + more
        return inline if inline <= THRESHOLD else 0

    def moving(self) -> bool:
        """Worker Versioning made another build current than the one this pinned run is on: at idle,
        the session continues as new onto it (a turn in flight finishes on its own build first)."""
        return workflow.info().is_target_worker_deployment_version_changed() and workflow.patched(
            UPGRADE_AT_IDLE
        )

    async def continue_as_new(self, waiting: bool = False) -> None:
        """At idle, or (`waiting`) while the running turn waits for approval: then the turn goes along
        in `resume`, and a pushed config waits for the next turn boundary in `next_config`. At idle
        the next run starts on the current build (waiting, it stays on this one: the turn's build)."""
        if not waiting:
            await self.context.compact_at_idle()
            await self.context.archive_at_idle()
        self.core.counters.continued_as_new += 1
        if not waiting:
            self.core.apply_config()
        keep = self.core.inp.manifest.host.sessions.events_kept

        def snapshot(stream_state: WorkflowStreamState) -> list[SessionInput]:
            """Taken when the run hands over (after its handlers finished), of copies: the turn
            and the answers are what the next run resumes from, whatever this one still does."""
            dropped = max(0, len(stream_state.log) - keep)
            stream_state.log = stream_state.log[dropped:]
            stream_state.base_offset += dropped
            return [self.core.snapshot(stream_state, self.context.view, waiting=waiting)]

        upgrade = workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
        behavior = upgrade if not waiting and self.moving() else None
        # WorkflowStream.continue_as_new's recipe, with the versioning behaviour it cannot pass.
        stream = self.core.stream
        stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(args=snapshot(stream.get_state()), initial_versioning_behavior=behavior)
