"""The turn loop: a turn's steps (compile when stale, model request, the tool calls it asks for),
its limits (steps, token budget, loop guard), teams, and when the session continues as new.

Imported passed through, like turn.py: its classes are created once per process, not re-created for
every run by the sandbox (about 10 KB per cached session as sandboxed modules). The sandbox does not
watch this code, so it calls only `workflow.*` and deterministic helpers; an import-linter contract
keeps clock, randomness, environment and I/O modules out of it (docs/architecture.md, "Durability
rules the code relies on").
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from temporalio import workflow
from temporalio.contrib.workflow_streams import WorkflowStreamState
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

from agentwolf.config.manifest import Limits, Team
from agentwolf.telemetry import metrics
from agentwolf.workflows.acp import AcpTurns
from agentwolf.workflows.code import CodeRouting
from agentwolf.workflows.compaction import ContextView
from agentwolf.workflows.context import ContextKeeping
from agentwolf.workflows.contracts import (
    CommandInput,
    CommandOutput,
    CompiledAgent,
    CompileInput,
    ModelRequestInput,
    ModelRequestOutput,
    ToolOutcome,
    chain_digest,
)
from agentwolf.workflows.output import judge
from agentwolf.workflows.session_input import SessionInput
from agentwolf.workflows.turn import (
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
    shared,
    short,
)
from agentwolf.workflows.types import Prompt, TurnOutcome, Usage

TURN_TASK_RAISED = "turn-task-raised"  # patch: an unexpected error in the turn fails the turn, not silently
RELEASE_FAILURE_SAID = "release-failure-said"  # patch: a failed release at close is an event, not a failure
TURN_END_CLEARS_APPROVALS = "turn-end-clears-approvals"  # patch: a turn's end drops its waits and answers
SNAPSHOT_UNANSWERED = "snapshot-unanswered"  # patch: no waiting snapshot while an answer waits to be taken
SNAPSHOT_STALE = "snapshot-stale"  # patch: a waiting turn continues as new with a stale agent too
UPGRADE_AT_IDLE = "upgrade-at-idle"  # patch: an idle session continues as new onto the current build


class TurnLoop(AcpTurns, CodeRouting, ContextKeeping):
    """Runs a turn to its end, whatever ends it, and decides when the session continues as new."""

    async def _run_turn(self, prompt: Prompt) -> None:
        resume, self.resume = self.resume, None
        if resume is None:
            self._apply_config()
        self.turn_id, self.step, self.interrupt_reason = prompt.turn_id, resume.step if resume else 0, None
        self.prompt_running = prompt
        self.turns_this_run += 1
        self._set_state("running")
        if resume is None:
            self._publish("turn_started", text=prompt.text)
        turn = (
            Turn.resumed(resume)
            if resume
            else Turn(pending=[UserPromptPart(prompt.text, timestamp=workflow.now())])
        )
        self.turn = turn
        outcome: TurnOutcome = "completed"
        output: str | None = None
        try:
            text = prompt.text
            if resume is None and text.startswith("/") and workflow.patched(SLASH_COMMANDS):
                text = await self._expand_command(text)
                turn.pending = [UserPromptPart(text, timestamp=workflow.now())]
            team = self.inp.manifest.teams.get(self.inp.agent)
            output = await (
                self._run_team(team, text, turn)
                if team
                else self._run_acp(text, turn)
                if self._runs_acp()
                else self._run_steps(turn, resuming=resume is not None)
            )
        except (asyncio.CancelledError, ActivityError, ApplicationError) as err:
            # A local activity (a known-fast tool call) that fails for good raises a bare ApplicationError.
            if is_cancelled_exception(err):  # an interrupt, or the workflow itself was cancelled
                outcome, output = "interrupted", None
                self._publish("interrupted", text=self.interrupt_reason or "cancelled")
            elif isinstance(err, (ActivityError, ApplicationError)):
                outcome, output = "failed", cause_message(err)
                self._publish("error", text=output)
            else:
                raise
        except TurnStopped as stop:
            outcome, output = stop.outcome, str(stop)
            self._publish("error" if stop.outcome == "failed" else "limit_reached", text=str(stop))
        except Exception as err:
            # Anything else (a bug, a schema jsonschema cannot resolve) fails this turn, not the
            # session: re-raised, it would end the task silently (asyncio keeps the error) and leave
            # the session `running` for good; failing the workflow task instead would retry the same
            # code on the same input for ever. Runs recorded before kept the old silence.
            if not workflow.patched(TURN_TASK_RAISED):
                raise
            workflow.logger.exception("turn %s failed on an unexpected error", self.turn_id)
            outcome, output = "failed", f"internal error: {type(err).__name__}: {err}"
            self._publish("error", text=output)
        # Close every dangling tool call so the transcript stays valid for the next turn.
        closing_note = {"interrupted": "interrupted by the user", "limit": f"not run: {output}"}.get(
            outcome, "not run"
        )
        for index, call in enumerate(turn.open_calls):
            turn.finished.setdefault(index, self._tool_return(call, closing_note, ToolOutcome.INTERRUPTED))
        pending = [*(turn.finished[i] for i in range(len(turn.open_calls))), *turn.pending]
        if outcome != "completed":  # steers this turn never reached the model: keep them on record
            pending.extend(UserPromptPart(text, timestamp=workflow.now()) for text in self.steers)
            self.steers.clear()
        if pending:
            self._append(ModelRequest(parts=pending, timestamp=workflow.now()))
        if any(s.mcp_servers for s in self._active_skill_infos()):
            self.stale.mark("the turn's skills released their MCP servers")
        self.active_skills = []
        # A turn that ended while its calls waited (an interrupt as it resumed) leaves none waiting,
        # nor an answer a later call with the same id would take (runs before the patch kept them).
        if (self.pending_approvals or self.decisions) and workflow.patched(TURN_END_CLEARS_APPROVALS):
            self.pending_approvals.clear()
            self.decisions.clear()
        self.counters.turns += 1
        self.last_output, self.last_outcome = output, outcome
        self._publish("turn_finished", text=output, outcome=outcome, usage=turn.usage)
        metrics.count(metrics.TURNS, outcome=outcome)
        self.turn_id = None
        self._set_state("idle")

    async def _run_steps(self, turn: Turn, resuming: bool = False) -> str | None:
        """Model request -> tool calls, until an answer without tool calls or a limit. `resuming`: the
        step's calls are known already (the turn continued as new while they waited for approval)."""
        limits = self._limits()
        while True:
            if resuming:
                compiled = await self._current_compiled()
                resuming = False
            else:
                if self.step >= limits.max_steps:
                    raise TurnStopped("limit", f"max_steps ({limits.max_steps}) reached")
                self._check_usd_budgets(turn, limits)  # subagents may have spent it, or earlier turns
                for text in self.steers:
                    turn.pending.append(UserPromptPart(text, timestamp=workflow.now()))
                    self._publish("steer_applied", text=text)
                self.steers.clear()
                self._append(ModelRequest(parts=turn.pending, timestamp=workflow.now()))
                turn.pending = []
                self.step += 1
                self.counters.steps += 1
                self._show_details()
                compiled = await self._current_compiled()
                out = await self._request_fitting(compiled, turn)
                response = out.response
                self._append(response)
                turn.open_calls = response.tool_calls
                self._count_request(turn, out)  # spent, even if an interrupt ends the turn now
                self._check_interrupted()
                if response.text:
                    self._publish("model_text", text=response.text)
                if self.inp.output_schema is not None:  # a job's typed result (workflows/output.py)
                    verdict = judge(response, self.inp.output_schema, workflow.now())
                    if verdict.parts is not None:
                        turn.open_calls = []
                        turn.pending.extend(verdict.parts)
                        if verdict.result is not None:
                            return json.dumps(verdict.result)
                        self._publish("error", text=f"result refused, the model retries: {verdict.problems}")
                        continue
                if not turn.open_calls:
                    return response.text
                self._check_limits(turn, limits)
            calls = turn.open_calls
            await self._run_calls(compiled, calls, turn.finished)
            self._check_interrupted()  # every result is in: an interrupt now keeps them all
            turn.pending.extend(turn.finished[i] for i in range(len(calls)))
            turn.usage = turn.usage.plus(Usage(tool_calls=len(calls)))
            self.counters.usage.tool_calls += len(calls)
            turn.open_calls, turn.finished = [], {}
            for tool in turn.warnings:
                text = (
                    f"You have called {tool} {limits.loop_warn} times with the same arguments. "
                    f"Change approach; the turn stops at {limits.loop_stop} repeats."
                )
                turn.pending.append(UserPromptPart(text, timestamp=workflow.now()))
                self._publish("limit_warning", text=text, tool=tool)
            turn.warnings = []

    def _count_request(self, turn: Turn, out: ModelRequestOutput) -> None:
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
        self._count(turn, usage)

    def _check_usd_budgets(self, turn: Turn, limits: Limits) -> None:
        """Stop the turn once it, or the session, has spent its USD budget (subagents included)."""
        for scope, budget, spent in (
            ("turn", limits.usd_budget_turn, turn.usage.spent),
            ("session", limits.usd_budget_session, self.counters.total.spent),
        ):
            if budget and spent >= budget:
                raise TurnStopped("limit", f"USD budget of the {scope} (${budget:g}) reached: ${spent:.6f}")

    def _check_limits(self, turn: Turn, limits: Limits) -> None:
        """The budgets and the loop guard, once a step's calls are known."""
        self._check_usd_budgets(turn, limits)
        if limits.token_budget:
            if turn.usage.total_tokens >= limits.token_budget:
                raise TurnStopped("limit", f"token budget ({limits.token_budget}) reached")
            if not turn.warned_budget and turn.usage.total_tokens >= 0.8 * limits.token_budget:
                turn.warned_budget = True
                self._publish(
                    "limit_warning", text=f"80% of the token budget used ({turn.usage.total_tokens})"
                )
        for call in turn.open_calls:
            key = f"{call.tool_name}:{json.dumps(call.args_as_dict(), sort_keys=True, default=str)}"
            turn.repeats[key] += 1
            if turn.repeats[key] >= limits.loop_stop:
                raise TurnStopped(
                    "limit",
                    f"loop guard: {call.tool_name} called {turn.repeats[key]} times with the same arguments",
                )
            if turn.repeats[key] == limits.loop_warn:
                turn.warnings.append(call.tool_name)

    async def _run_team(self, team: Team, task: str, turn: Turn) -> str:
        """Members as child sessions: each gets the previous one's output, or all get the task."""
        self._append(ModelRequest(parts=turn.pending, timestamp=workflow.now()))
        turn.pending = []
        prefix = f"{self.inp.session_id}.{self.turn_id}"
        if team.mode == "sequential":
            output = task
            for i, member in enumerate(team.members):
                result = await self._child(member, output, f"{prefix}.{i}-{member}")
                if result.is_error:
                    raise TurnStopped("failed", f"team member {member}: {result.content}")
                output = result.content
        else:
            results = await all_or_cancel(
                [self._child(m, task, f"{prefix}.{i}-{m}") for i, m in enumerate(team.members)]
            )
            failed = [f"{m}: {r.content}" for m, r in zip(team.members, results, strict=True) if r.is_error]
            if failed:
                raise TurnStopped("failed", "team members failed: " + "; ".join(failed))
            output = "\n\n".join(f"## {m}\n{r.content}" for m, r in zip(team.members, results, strict=True))
        self._append(ModelResponse(parts=[TextPart(output)], timestamp=workflow.now()))
        return output

    async def _release_session_servers(self) -> None:
        """The session closes: the MCP servers its client brought stop (on the worker this runs on;
        another that started one stops it when idle). Only sessions that have such servers run it.

        A release that fails for good is said (log, event), not raised: the session has closed
        already (`session_closed` is out), and the pool's idle reaper stops the servers anyway."""
        await self._release_acp()
        if not (self.inp.session_servers and workflow.patched(RELEASE_SESSION_SERVERS)):
            return
        try:
            await workflow.execute_activity(
                "wolf.release_session",
                self._ref(),
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=TOOL_RETRY,
            )
        except ActivityError as err:
            if not workflow.patched(RELEASE_FAILURE_SAID):
                raise  # runs recorded before failed here
            workflow.logger.warning("releasing the client's MCP servers failed: %s", cause_message(err))
            self._publish("error", text=f"the client's MCP servers were not released: {cause_message(err)}")

    async def _current_compiled(self) -> CompiledAgent:
        """The compiled agent, recompiled first if the config or the agent's extensions changed."""
        if self.compiled is None or self.stale.reason:
            generation = self.stale.generation
            compiled = await self._compile(self.stale.reason)
            self.stale.compiled(generation)  # stays stale when a newer change came in meanwhile
            return compiled
        return self.compiled

    async def _expand_command(self, text: str) -> str:
        """`/name args` -> the prompt it stands for; an unknown command fails the turn, no model call."""
        out = await workflow.execute_activity(
            "wolf.expand_command",
            CommandInput(ref=self._ref(), agent=self.inp.agent, turn_id=self.turn_id or "", text=text),
            result_type=CommandOutput,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=TOOL_RETRY,
            summary=short(f"expand_command {text.split()[0]}"),
        )
        if out.text is None:
            raise TurnStopped("failed", out.error or f"cannot expand {text.split()[0]}")
        if out.skill and out.skill not in self.active_skills:
            self.active_skills.append(out.skill)
            info = self.compiled.skill(out.skill) if self.compiled else None
            if info is not None and info.mcp_servers:
                self.stale.mark(f"/{out.skill} brings MCP servers {info.mcp_servers}")
        self._publish("command_expanded", text=out.text, tool=text.split()[0])
        return out.text

    async def _compile(self, reason: str | None = None) -> CompiledAgent:
        compiled = await workflow.execute_activity(
            "wolf.compile",
            CompileInput(
                ref=self._ref(),
                manifest=self.inp.manifest,
                agent=self.inp.agent,
                turn_id=self.turn_id or "",
                active_skills=self.active_skills,
                session_servers=self.inp.session_servers,
            ),
            result_type=CompiledAgent,
            start_to_close_timeout=timedelta(seconds=90),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,  # a worker lost mid-compile is noticed in seconds
            retry_policy=COMPILE_RETRY,
            summary=short(f"compile {self.inp.agent}" + (f" ({reason})" if reason else "")),
        )
        self.compiled = shared(compiled)
        tools = ", ".join(t.name for t in self.compiled.tools) or "none"
        models = " -> ".join(self.compiled.labels or self.compiled.models)
        text = f"{self.compiled.agent} is ready: model {models}; tools {tools}"
        self._publish("compiled", text=f"{text} (recompiled: {reason})" if reason else text)
        return self.compiled

    async def _model_request(self, compiled: CompiledAgent) -> ModelRequestOutput:
        delta = self.transcript[self.synced_len :]
        out = await workflow.execute_activity(
            "wolf.model_request",
            ModelRequestInput(
                ref=self._ref(),
                compiled_digest=compiled.digest,
                base_len=self.synced_len,
                base_digest=self.synced_digest,
                delta=delta,
                tool_names=self._offered(compiled),
                turn_id=self.turn_id or "",
                step=self.step,
                output=self.inp.output_schema,
                settings=self.prompt_running.settings if self.prompt_running else None,
                view=self._sent_view(),
            ),
            result_type=ModelRequestOutput,
            start_to_close_timeout=MODEL_TIMEOUT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=MODEL_RETRY,
            summary=f"model_request {model_name(compiled)} step {self.step}",
        )
        # After this response is appended the worker holds exactly our transcript.
        self.synced_len = len(self.transcript) + 1
        self.synced_digest = chain_digest(self.digest, [out.response])
        return out

    def _should_snapshot_waiting(self) -> bool:
        """Continue as new while a turn waits for approval (for days, under steers, pushes and follower
        polls), once this run's history has grown: only when nothing of the step is in flight.

        Never while an answer waits to be taken: the turn takes it in this activation (it runs on
        past the snapshot, and the next run would wait for that call again). A stale agent no longer
        blocks it: the next run recompiles before the calls go on. Both checks come last and are
        patched only where they change the answer, so runs recorded before replay."""
        turn = self.turn
        if self.state != "waiting_approval" or turn is None or self.turn_task is None:
            return False
        waiting = len(turn.open_calls) - len(turn.finished)
        if waiting != len(self.pending_approvals) or self.running_scripts:
            return False
        info = workflow.info()
        limit = self.inp.manifest.host.sessions.continue_as_new_bytes
        grown = info.get_current_history_length() >= WAITING_SNAPSHOT_EVENTS
        if not (grown and (info.is_continue_as_new_suggested() or info.get_current_history_size() > limit)):
            return False
        if self.decisions.keys() & self.pending_approvals.keys() and workflow.patched(SNAPSHOT_UNANSWERED):
            return False
        return not self.stale.reason or workflow.patched(SNAPSHOT_STALE)

    def _should_snapshot(self) -> bool:
        """At idle: when Temporal suggests it (also in a run without turns: idle followers' polls grow
        history too), when a newer build is current, or past the byte limit once this run has run a turn."""
        if self.state != "idle":
            return False
        info = workflow.info()
        if info.is_continue_as_new_suggested() or self._moving():
            return True
        return (
            bool(self.turns_this_run)
            and info.get_current_history_size() > self.inp.manifest.host.sessions.continue_as_new_bytes
        )

    def _moving(self) -> bool:
        """Worker Versioning made another build current than the one this pinned run is on: at idle,
        the session continues as new onto it (a turn in flight finishes on its own build first)."""
        return workflow.info().is_target_worker_deployment_version_changed() and workflow.patched(
            UPGRADE_AT_IDLE
        )

    async def _continue_as_new(self, waiting: bool = False) -> None:
        """At idle, or (`waiting`) while the running turn waits for approval: then the turn goes along
        in `resume`, and a pushed config waits for the next turn boundary in `next_config`. At idle
        the next run starts on the current build (waiting, it stays on this one: the turn's build)."""
        if not waiting:
            await self._compact_at_idle()
        self.counters.continued_as_new += 1
        if not waiting:
            self._apply_config()
        keep = self.inp.manifest.host.sessions.events_kept

        def snapshot(stream_state: WorkflowStreamState) -> list[SessionInput]:
            """Taken when the run hands over (after its handlers finished), of copies: the turn
            and the answers are what the next run resumes from, whatever this one still does."""
            dropped = max(0, len(stream_state.log) - keep)
            stream_state.log = stream_state.log[dropped:]
            stream_state.base_offset += dropped
            resume = None
            if waiting and self.turn is not None and self.prompt_running is not None:
                resume = self.turn.snapshot(self.prompt_running, self.step).model_copy(
                    update={
                        "active_skills": list(self.active_skills),
                        "pending_approvals": list(self.pending_approvals.values()),
                        "decisions": dict(self.decisions),
                    },
                    deep=True,
                )
            return [
                self.inp.model_copy(
                    update={
                        "prompt": None,
                        "transcript": self.transcript,
                        "compiled": None if self.stale.reason else self.compiled,
                        "counters": self.counters,
                        "queue": self.queue,
                        "steers": self.steers,
                        "last_output": self.last_output,
                        "last_outcome": self.last_outcome,
                        "always_allowed": sorted(self.always_allowed),
                        "next_config": self.next_config,
                        "stream_state": stream_state,
                        "resume": resume,
                        "context": None if self.view == ContextView() else self.view,
                    }
                )
            ]

        upgrade = workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE
        behavior = upgrade if not waiting and self._moving() else None
        # WorkflowStream.continue_as_new's recipe, with the versioning behaviour it cannot pass.
        self.stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(args=snapshot(self.stream.get_state()), initial_versioning_behavior=behavior)
