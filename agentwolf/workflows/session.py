"""SessionWorkflow: one agent session as a durable run loop.

idle -> running -> idle | done. A turn is one prompt's work; a step is one model request and the
tool calls it asks for. Everything that touches the world runs as an activity; this module only
decides, records and publishes. Deterministic code only (see DESIGN.md, "Rules that keep it durable").
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError, is_cancelled_exception
from temporalio.workflow import ChildWorkflowCancellationType

with workflow.unsafe.imports_passed_through():
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from temporalio.contrib.workflow_streams import WorkflowStreamState

    from agentwolf.activities.types import (
        COMPILED_QUERY,
        EMPTY_DIGEST,
        MANIFEST_QUERY,
        SESSION,
        SKILLS,
        SUBAGENTS,
        TRANSCRIPT_QUERY,
        CommandInput,
        CommandOutput,
        CompiledAgent,
        CompileInput,
        HostRef,
        ModelRequestInput,
        ModelRequestOutput,
        SkillReadInput,
        ToolCallInput,
        ToolCallOutput,
        ToolSpec,
        chain_digest,
    )
    from agentwolf.config.manifest import AgentConfig, Limits, Manifest, Team
    from agentwolf.workflows.turn import (
        CHILD_IDS,
        COMPILE_RETRY,
        CUT_MARK,
        EVENT_TEXT_LIMIT,
        HEARTBEAT_TIMEOUT,
        LOCAL_TOOL_CALLS,
        MODEL_RETRY,
        MODEL_TEXT_LIMIT,
        MODEL_TIMEOUT,
        PAGE_HEADER,
        SAFE_LOCAL_CALLS,
        SLASH_COMMANDS,
        TOOL_RETRY,
        WAIT_CHILDREN,
        WAITING_SNAPSHOT_EVENTS,
        Staleness,
        Turn,
        TurnStopped,
        call_keys,
        cause_message,
        event_args,
        shared,
        shared_names,
    )
    from agentwolf.workflows.types import (
        AGENT_ATTR,
        EVENTS_TOPIC,
        PARENT_ATTR,
        STATE_ATTR,
        TENANT_ATTR,
        Approval,
        ConfigUpdate,
        Event,
        ExtensionsChanged,
        PendingApproval,
        Prompt,
        SessionInput,
        SessionResult,
        SessionState,
        SessionStatus,
        TurnOutcome,
        Usage,
        tenant_of,
        workflow_id,
    )

from agentwolf.workflows.stream import SessionStream  # workflow code: sandboxed like this module

T = TypeVar("T")


@workflow.defn(name="SessionWorkflow")
class SessionWorkflow:
    @workflow.init
    def __init__(self, inp: SessionInput) -> None:
        # Sessions of one config share its manifest and compiled agent (`shared`). Replaced in the
        # input itself: the SDK and `run` hold it for the whole run.
        inp.manifest = shared(inp.manifest)
        if inp.compiled is not None:
            inp.compiled = shared(inp.compiled)
        self.inp = inp
        self.stream = SessionStream(prior_state=inp.stream_state)
        self.events = self.stream.topic(EVENTS_TOPIC, type=Event)
        self.transcript: list[ModelMessage] = list(inp.transcript)
        self.digest = chain_digest(EMPTY_DIGEST, self.transcript)
        # What the workers were last sent: the next model request carries only what follows.
        self.synced_len = len(self.transcript)
        self.synced_digest = self.digest
        self.compiled: CompiledAgent | None = inp.compiled
        self.counters = inp.counters.model_copy(deep=True)
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
        self.tool_ms: dict[str, int] = {}  # each tool's last call duration (workflow time: replay-safe)
        self.resume = inp.resume
        """A turn to resume first: it continued as new while waiting for approval."""
        self.turn: Turn | None = None
        self.prompt_running: Prompt | None = None
        self.pending_approvals = {p.call_id: p for p in inp.resume.pending_approvals} if inp.resume else {}
        self.decisions = dict(inp.resume.decisions) if inp.resume else {}
        self.always_allowed: set[str] = set(inp.always_allowed)
        self.next_config: ConfigUpdate | None = inp.next_config
        self.stale = Staleness()
        """Why the compiled agent is out of date (recompiled before the next model request)."""
        self.active_skills: list[str] = list(inp.resume.active_skills) if inp.resume else []
        """Skills loaded this turn: their `allowed-tools` limit the tools, their MCP servers join."""
        if inp.prompt is not None and not inp.transcript and self.counters.turns == 0 and not self.queue:
            self.queue.append(Prompt(turn_id=self._next_turn_id(), text=inp.prompt))

    # -- run loop ------------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: SessionInput) -> SessionResult:
        wid = workflow.info().workflow_id
        if tenant_of(wid) != inp.tenant:
            raise ApplicationError(
                f"refused: session {wid!r} belongs to tenant {tenant_of(wid)!r}, its input says {inp.tenant!r}",
                type="TenantMismatch",
                non_retryable=True,
            )
        try:
            while True:
                if self.resume is not None:
                    prompt = self.resume.prompt
                else:
                    await workflow.wait_condition(
                        lambda: bool(self.queue or self.steers) or self.closing or self._should_snapshot()
                    )
                    if self.closing:
                        break
                    if not (self.queue or self.steers):
                        await self._continue_as_new()
                    if self.queue:
                        prompt = self.queue.pop(0)
                    else:  # a steer while idle starts a turn
                        prompt = Prompt(turn_id=self._next_turn_id(), text="\n".join(self.steers))
                        self.steers.clear()
                self.turn_task = asyncio.create_task(self._run_turn(prompt))
                await self._await_turn()
                if inp.background and not inp.keep:
                    break
        except asyncio.CancelledError:
            # A Temporal cancel (the UI, `temporal workflow cancel`, a parent that stops): the turn
            # ends as interrupted, the session closes with outcome `cancelled`, the workflow is cancelled.
            await self._stop_turn("the session was cancelled")
            self._close("cancelled")
            await workflow.wait_condition(workflow.all_handlers_finished)
            raise
        self._close(self.last_outcome)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if inp.background and self.last_outcome == "failed":
            raise ApplicationError(
                f"the task failed: {self.last_output}", type="TurnFailed", non_retryable=True
            )
        return SessionResult(
            session_id=inp.session_id,
            output=self.last_output,
            outcome=self.last_outcome,
            counters=self.counters,
        )

    async def _await_turn(self) -> None:
        """Wait for the running turn; an interrupt cancels it from here, not from the signal handler.

        Temporal applies an activation's signals before its results: cancelling in the handler would
        discard a tool result that completed in the same activation. Here the results are in first."""
        task = self.turn_task
        assert task is not None
        await workflow.wait_condition(
            lambda: task.done() or self.interrupt_requested is not None or self._should_snapshot_waiting()
        )
        if not task.done() and self.interrupt_requested is None:
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
        self._set_state("done")
        self._publish("session_closed", outcome=outcome, usage=self.counters.usage)

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
        # Close every dangling tool call so the transcript stays valid for the next turn.
        closing_note = {"interrupted": "interrupted by the user", "limit": f"not run: {output}"}.get(
            outcome, "not run"
        )
        for index, call in enumerate(turn.open_calls):
            turn.finished.setdefault(index, self._tool_return(call, closing_note, "interrupted"))
        pending = [*(turn.finished[i] for i in range(len(turn.open_calls))), *turn.pending]
        if outcome != "completed":  # steers this turn never reached the model: keep them on record
            pending.extend(UserPromptPart(text, timestamp=workflow.now()) for text in self.steers)
            self.steers.clear()
        if pending:
            self._append(ModelRequest(parts=pending, timestamp=workflow.now()))
        if any(s.mcp_servers for s in self._active_skill_infos()):
            self.stale.mark("the turn's skills released their MCP servers")
        self.active_skills = []
        self.counters.turns += 1
        self.last_output, self.last_outcome = output, outcome
        self._publish("turn_finished", text=output, outcome=outcome, usage=turn.usage)
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
                for text in self.steers:
                    turn.pending.append(UserPromptPart(text, timestamp=workflow.now()))
                    self._publish("steer_applied", text=text)
                self.steers.clear()
                self._append(ModelRequest(parts=turn.pending, timestamp=workflow.now()))
                turn.pending = []
                self.step += 1
                self.counters.steps += 1
                compiled = await self._current_compiled()
                response = await self._model_request(compiled)
                self._append(response)
                turn.open_calls = response.tool_calls
                self._check_interrupted()
                step_usage = Usage(
                    requests=1,
                    input_tokens=response.usage.input_tokens or 0,
                    output_tokens=response.usage.output_tokens or 0,
                )
                turn.usage = turn.usage.plus(step_usage)
                self.counters.usage = self.counters.usage.plus(step_usage)
                if response.text:
                    self._publish("model_text", text=response.text)
                if not turn.open_calls:
                    return response.text
                self._check_limits(turn, limits)
            calls = turn.open_calls
            keys = call_keys(calls)
            # Skills load first, so their allowed-tools already bind the calls made beside them.
            loads = [
                i for i, c in enumerate(calls) if (s := compiled.tool(c.tool_name)) and s.server == SKILLS
            ]
            for group in (loads, [i for i in range(len(calls)) if i not in loads]):
                todo = [i for i in group if i not in turn.finished]
                if todo:
                    await _all([self._call_tool(compiled, calls[i], i, keys[i], turn.finished) for i in todo])
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

    def _check_limits(self, turn: Turn, limits: Limits) -> None:
        """The token budget and the loop guard, once a step's calls are known."""
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
            results = await _all(
                [self._child(m, task, f"{prefix}.{i}-{m}") for i, m in enumerate(team.members)]
            )
            failed = [f"{m}: {r.content}" for m, r in zip(team.members, results, strict=True) if r.is_error]
            if failed:
                raise TurnStopped("failed", "team members failed: " + "; ".join(failed))
            output = "\n\n".join(f"## {m}\n{r.content}" for m, r in zip(team.members, results, strict=True))
        self._append(ModelResponse(parts=[TextPart(output)], timestamp=workflow.now()))
        return output

    async def _child(self, agent: str, task: str, session_id: str) -> ToolCallOutput:
        """Run `agent` on `task` as a child session and wait for its answer."""
        self._publish("child_started", tool=agent, call_id=session_id, text=task)
        tenant = self.inp.tenant
        try:
            result = await workflow.execute_child_workflow(
                SessionWorkflow.run,
                SessionInput(
                    session_id=session_id,
                    tenant=tenant,
                    agent=agent,
                    manifest=self.inp.manifest,
                    prompt=task,
                    background=True,
                    depth=self.inp.depth + 1,
                    parent=self.inp.session_id,
                ),
                id=workflow_id(tenant, session_id),
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(TENANT_ATTR, tenant),
                        SearchAttributePair(AGENT_ATTR, agent),
                        SearchAttributePair(STATE_ATTR, "idle"),
                        SearchAttributePair(PARENT_ATTR, self.inp.session_id),
                    ]
                ),
                # A stopping parent waits until its children have stopped: a child left to the
                # parent-close policy is terminated mid-turn and looks alive forever.
                cancellation_type=ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED
                if workflow.patched(WAIT_CHILDREN)
                else ChildWorkflowCancellationType.TRY_CANCEL,
            )
            output = ToolCallOutput(content=result.output or "", is_error=result.outcome != "completed")
        except ChildWorkflowError as err:
            if is_cancelled_exception(err):
                raise asyncio.CancelledError() from err
            output = ToolCallOutput(content=f"{agent} failed: {cause_message(err)}", is_error=True)
        self._publish(
            "child_finished",
            tool=agent,
            call_id=session_id,
            outcome="failed" if output.is_error else "success",
            text=output.content,
        )
        return output

    # -- activities ----------------------------------------------------------------------------

    def _ref(self) -> HostRef:
        return HostRef(
            config_id=self.inp.manifest.identity,
            tenant=self.inp.tenant,
            workflow_id=workflow.info().workflow_id,
        )

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
            ),
            result_type=CompiledAgent,
            start_to_close_timeout=timedelta(seconds=90),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,  # a worker lost mid-compile is noticed in seconds
            retry_policy=COMPILE_RETRY,
        )
        self.compiled = shared(compiled)
        tools = ", ".join(t.name for t in self.compiled.tools) or "none"
        text = f"{self.compiled.agent} is ready: model {' -> '.join(self.compiled.models)}; tools {tools}"
        self._publish("compiled", text=f"{text} (recompiled: {reason})" if reason else text)
        return self.compiled

    async def _model_request(self, compiled: CompiledAgent) -> ModelResponse:
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
            ),
            result_type=ModelRequestOutput,
            start_to_close_timeout=MODEL_TIMEOUT,
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=MODEL_RETRY,
        )
        # After this response is appended the worker holds exactly our transcript.
        self.synced_len = len(self.transcript) + 1
        self.synced_digest = chain_digest(self.digest, [out.response])
        return out.response

    async def _call_tool(
        self,
        compiled: CompiledAgent,
        call: ToolCallPart,
        index: int,
        key: str,
        finished: dict[int, ToolReturnPart],
    ) -> ToolReturnPart:
        spec = compiled.tool(call.tool_name)
        self._publish(
            "tool_call_started", tool=call.tool_name, call_id=call.tool_call_id, args=event_args(call)
        )
        started = workflow.now()
        outcome: str | None = None
        try:
            arguments = call.args_as_dict(raise_if_invalid=True)
        except ValueError as exc:
            result = ToolCallOutput(content=f"invalid JSON arguments: {exc}", is_error=True)
        except AssertionError:  # JSON, but not an object
            result = ToolCallOutput(
                content=f"arguments must be a JSON object, not {call.args!r:.200}", is_error=True
            )
        else:
            result, outcome = await self._route_call(compiled, spec, call, index, key, arguments)
        outcome = outcome or ("failed" if result.is_error else "success")
        part = self._tool_return(call, result.content, outcome)
        finished[index] = part
        self._publish(
            "tool_call_finished",
            tool=call.tool_name,
            call_id=call.tool_call_id,
            duration_ms=int((workflow.now() - started).total_seconds() * 1000),
            outcome=outcome,
            text=result.content,
        )
        return part

    async def _route_call(
        self,
        compiled: CompiledAgent,
        spec: ToolSpec | None,
        call: ToolCallPart,
        index: int,
        key: str,
        arguments: dict[str, Any],
    ) -> tuple[ToolCallOutput, str | None]:
        """Run the call where it belongs; outcome `denied` when allowed-tools, a rule or a person refused it."""
        if spec is None:
            return ToolCallOutput(content=f"unknown tool {call.tool_name!r}", is_error=True), None
        offered = self._offered(compiled)
        if offered is not None and spec.name not in offered:
            refusal = f"{spec.name} is not allowed while {', '.join(self.active_skills)} is active"
            return ToolCallOutput(content=refusal, is_error=True), "denied"
        if spec.server == SESSION:  # reads this session's own transcript: nothing to permit
            return self._read_tool_output(compiled, arguments), None
        refusal = await self._permission(compiled, spec, call, key, arguments)
        if refusal is not None:
            return ToolCallOutput(content=refusal, is_error=True), "denied"
        if spec.server == SKILLS:
            return await self._skill_tool(compiled, spec, arguments), None
        if spec.server == SUBAGENTS:
            return await self._delegate(compiled, call, index, arguments), None
        return await self._mcp_call(spec, call, arguments), None

    def _read_tool_output(self, compiled: CompiledAgent, arguments: dict[str, Any]) -> ToolCallOutput:
        """A page of a tool result the model was sent cut (the transcript holds it whole)."""
        call_id, offset = arguments.get("call_id"), arguments.get("offset", 0)
        if not isinstance(offset, int) or offset < 0:
            return ToolCallOutput(
                content="read_tool_output needs a non-negative integer `offset`", is_error=True
            )
        found = [
            p
            for m in self.transcript
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_call_id == call_id
        ]
        if not found:
            return ToolCallOutput(
                content=f"no tool result with call_id {call_id!r} in this session", is_error=True
            )
        content = str(found[-1].content)
        end = min(
            offset + compiled.tool_output_chars - PAGE_HEADER, len(content)
        )  # the page is not cut again
        page = content[offset:end]
        more = f"; read on with offset={end}" if end < len(content) else "; that is the end"
        return ToolCallOutput(content=f"[characters {offset}-{end} of {len(content)}{more}]\n{page}")

    async def _skill_tool(
        self, compiled: CompiledAgent, spec: ToolSpec, arguments: dict[str, Any]
    ) -> ToolCallOutput:
        """load_skill (activates it for the turn) or read_skill_file, read by the `wolf.read_skill` activity."""
        name, path = arguments.get("name"), arguments.get("path")
        skill = compiled.skill(name) if isinstance(name, str) else None
        if skill is None:
            return ToolCallOutput(
                content=f"unknown skill {name!r} (skills: {[s.name for s in compiled.skills]})", is_error=True
            )
        if spec.tool == "read_skill_file" and (not isinstance(path, str) or not path):
            return ToolCallOutput(content="read_skill_file needs `path`", is_error=True)
        loading = spec.tool == "load_skill"
        uri = skill.uri if loading else f"{skill.uri.rsplit('/', 1)[0]}/{path}"
        result = await workflow.execute_activity(
            "wolf.read_skill",
            SkillReadInput(
                ref=self._ref(), agent=self.inp.agent, turn_id=self.turn_id or "", uri=uri, listing=loading
            ),
            result_type=ToolCallOutput,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=TOOL_RETRY,
        )
        if loading and not result.is_error and skill.name not in self.active_skills:
            self.active_skills.append(skill.name)
            if skill.mcp_servers:
                self.stale.mark(f"skill {skill.name} brings MCP servers {skill.mcp_servers}")
        return result

    def _active_skill_infos(self) -> list[Any]:
        compiled = self.compiled
        return [info for n in self.active_skills if compiled and (info := compiled.skill(n))]

    def _offered(self, compiled: CompiledAgent) -> list[str] | None:
        """Tool names the model may use now: limited while an active skill declares `allowed-tools`."""
        limited = [s for s in self._active_skill_infos() if s.allowed_tools is not None]
        if not limited:
            return None
        patterns = [p.split("(", 1)[0] for s in limited for p in s.allowed_tools or ()]
        brought = tuple(f"{s.name}/" for s in self._active_skill_infos())
        shared = shared_names(compiled)

        def allowed(t: ToolSpec) -> bool:
            # The bare MCP name counts only while one server lists it (ambiguity fails closed).
            names = [t.name, f"{t.server}:{t.tool}", *([] if t.tool in shared else [t.tool])]
            return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)

        return [
            t.name for t in compiled.tools if t.server == SKILLS or t.server.startswith(brought) or allowed(t)
        ]

    async def _mcp_call(
        self, spec: ToolSpec, call: ToolCallPart, arguments: dict[str, Any]
    ) -> ToolCallOutput:
        compiled_server = self.compiled.skill_servers.get(spec.server) if self.compiled else None
        server = compiled_server or self.inp.manifest.host.mcp_servers[spec.server]
        inp = ToolCallInput(
            ref=self._ref(),
            server=spec.server,
            tool=spec.tool,
            arguments=arguments,
            call_id=call.tool_call_id,
            agent=self.inp.agent,
            turn_id=self.turn_id or "",
        )
        started = workflow.now()
        last_ms = self.tool_ms.get(call.tool_name)
        fast = last_ms is not None and last_ms < server.fast_call_ms and workflow.patched(LOCAL_TOOL_CALLS)
        if fast and workflow.patched(SAFE_LOCAL_CALLS):
            # A local activity's result is durable only when the workflow task completes: a worker
            # lost meanwhile runs the call again. Only tools safe to repeat take that path.
            fast = spec.repeat_safe
        if fast:
            # Known-fast tool: a local activity skips the server round trip (its input is not
            # recorded, so it carries the manifest). Signals wait for it, which is fine at this speed.
            result = await workflow.execute_local_activity(
                "wolf.call_tool",
                inp.model_copy(update={"manifest": self.inp.manifest}),
                result_type=ToolCallOutput,
                start_to_close_timeout=timedelta(seconds=server.call_timeout + 30),
                retry_policy=TOOL_RETRY,
            )
        else:
            result = await workflow.execute_activity(
                "wolf.call_tool",
                inp,
                result_type=ToolCallOutput,
                start_to_close_timeout=timedelta(seconds=server.call_timeout + 30),
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=TOOL_RETRY,
            )
        self.tool_ms[call.tool_name] = int((workflow.now() - started).total_seconds() * 1000)
        if result.changed:
            self.stale.mark(f"{spec.server} changed its lists during {spec.tool}")
            self._publish(
                "extensions_changed", text=self.stale.reason, tool=call.tool_name, call_id=call.tool_call_id
            )
        return result

    async def _delegate(
        self, compiled: CompiledAgent, call: ToolCallPart, index: int, arguments: dict[str, Any]
    ) -> ToolCallOutput:
        agent, task = arguments.get("agent"), arguments.get("task")
        allowed = compiled.tool("delegate").parameters["properties"]["agent"]["enum"]  # type: ignore[union-attr]
        limit = self.inp.manifest.host.sessions.max_subagent_depth
        if agent not in allowed or not isinstance(task, str) or not task.strip():
            return ToolCallOutput(
                content=f"delegate needs `agent` (one of {allowed}) and a non-empty `task`", is_error=True
            )
        if self.inp.depth >= limit:
            return ToolCallOutput(
                content=f"subagent depth limit ({limit}) reached: do the task yourself", is_error=True
            )
        # The child's id comes from where the call sits, never from the model's call id (models repeat them).
        if workflow.patched(CHILD_IDS):
            return await self._child(agent, task, f"{self.inp.session_id}.{self.turn_id}.{self.step}.{index}")
        return await self._child(agent, task, f"{self.inp.session_id}.{call.tool_call_id}")

    async def _permission(
        self, compiled: CompiledAgent, spec: ToolSpec, call: ToolCallPart, key: str, arguments: dict[str, Any]
    ) -> str | None:
        """None when the call may run; else the refusal the model sees. `confirm` waits for a person.

        Rules and `always` answers hold on the tool's identity (server, MCP name), not on the
        model-facing name, which changes when another server lists the same name."""
        permissions = self.inp.manifest.permissions(self.inp.agent)
        identity = (spec.server, spec.tool)
        action = permissions.decide(
            call.tool_name, arguments, identity, shared=spec.tool in shared_names(compiled)
        )
        tool = f"{spec.server}:{spec.tool}"
        # Model-facing names (no ':') in the set come from sessions that continued as new before this rule.
        if action == "allow" or (
            action == "confirm" and (tool in self.always_allowed or call.tool_name in self.always_allowed)
        ):
            return None
        if action == "deny":
            return f"denied by policy: {call.tool_name} is not allowed for this agent"
        call_id = key
        if call_id not in self.pending_approvals:  # else asked before the session continued as new
            self.pending_approvals[call_id] = PendingApproval(
                call_id=call_id, tool=call.tool_name, args=arguments, asked_at=workflow.now()
            )
            self._publish("approval_requested", tool=call.tool_name, call_id=call_id, args=event_args(call))
        self._set_state("waiting_approval")
        timeout = permissions.approval_timeout
        asked_at = self.pending_approvals[call_id].asked_at or workflow.now()
        left = timeout - (workflow.now() - asked_at).total_seconds() if timeout else None
        try:
            await workflow.wait_condition(
                lambda: call_id in self.decisions,
                timeout=timedelta(seconds=max(left, 0.001)) if left is not None else None,
            )
            approved, answer = self.decisions.pop(call_id)
        except TimeoutError:
            approved = permissions.timeout_outcome == "allow"
            answer = Approval(call_id=call_id, reason=f"no answer within {timeout:g}s")
        finally:
            del self.pending_approvals[call_id]
            if not self.pending_approvals and self.state == "waiting_approval":
                self._set_state("running")
        if approved and answer.always:
            self.always_allowed.add(tool)
        self._publish(
            "approval_resolved",
            tool=call.tool_name,
            call_id=call_id,
            outcome="approved" if approved else "denied",
            text=answer.reason,
        )
        if approved:
            return None
        return "denied by the user" + (f": {answer.reason}" if answer.reason else "")

    # -- inputs --------------------------------------------------------------------------------

    @workflow.update
    def prompt(self, text: str) -> str:
        """Start a turn (or queue it); returns its turn id."""
        if self._busy() and self._agent_config().double_texting == "interrupt":
            self._interrupt("interrupted by a new prompt")
        turn_id = self._next_turn_id()
        self.queue.append(Prompt(turn_id=turn_id, text=text))
        return turn_id

    @prompt.validator
    def _validate_prompt(self, text: str) -> None:
        if not text.strip():
            raise ValueError("empty prompt")
        if self.closing or self.state == "done":
            raise ValueError("the session is closed")
        if (self._busy() or self.queue) and self._agent_config().double_texting == "reject":
            raise ValueError("a turn is running and this agent's double_texting policy is 'reject'")
        limit = self.inp.manifest.host.sessions.max_queued
        if len(self.queue) >= limit:
            raise ValueError(
                f"{len(self.queue)} prompts already wait (host.sessions.max_queued): try again later"
            )

    @workflow.signal
    def steer(self, text: str) -> None:
        """A user message for the next model request of the running turn (or a new turn when idle).
        Past `max_steers` waiting ones it is dropped with an event (clients check first: `WolfClient.steer`)."""
        if self.closing or not text.strip():
            return
        if len(self.steers) >= self.inp.manifest.host.sessions.max_steers:
            self._publish(
                "error",
                text=f"steer dropped: {len(self.steers)} steers already wait (host.sessions.max_steers)",
            )
            return
        self.steers.append(text)

    @workflow.signal
    def approve(self, answer: Approval) -> None:
        """Let a tool call waiting for approval run (`always`: this tool, for the rest of the session)."""
        self._decide(answer, approved=True)

    @workflow.signal
    def deny(self, answer: Approval) -> None:
        """Refuse a tool call waiting for approval; the model sees the refusal and the reason."""
        self._decide(answer, approved=False)

    def _decide(self, answer: Approval, approved: bool) -> None:
        if answer.call_id in self.pending_approvals:
            self.decisions[answer.call_id] = (approved, answer)
        else:
            workflow.logger.warning(
                "ignored an answer for call %r: no such call waits for approval", answer.call_id
            )

    @workflow.signal
    def config_changed(self, update: ConfigUpdate) -> None:
        """A new version of this session's config: taken at the next turn boundary (never mid-step)."""
        if update.name != self.inp.config_name or self.inp.pinned:
            return
        if update.version > max(
            self.inp.config_version or 0, self.next_config.version if self.next_config else 0
        ):
            self.next_config = update

    @workflow.signal
    def extensions_changed(self, change: ExtensionsChanged) -> None:
        """Skills or MCP lists this agent uses changed: recompile before the next model request."""
        if self.compiled is None or not set(change.sources) & set(self.compiled.sources):
            return
        self.stale.mark(change.detail or ", ".join(change.sources))
        self._publish("extensions_changed", text=self.stale.reason)

    @workflow.signal
    def interrupt(self, reason: str | None = None) -> None:
        self._interrupt(reason or "interrupted by the user")

    @workflow.signal
    def close(self) -> None:
        self.closing = True
        self._interrupt("the session was closed")

    @workflow.query
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
        )

    @workflow.query(name=TRANSCRIPT_QUERY)
    def get_transcript(self) -> list[ModelMessage]:
        return self.transcript

    @workflow.query(name=MANIFEST_QUERY)
    def get_manifest(self) -> Manifest:
        return self.inp.manifest

    @workflow.query(name=COMPILED_QUERY)
    def get_compiled(self) -> CompiledAgent | None:
        return self.compiled

    # -- helpers -------------------------------------------------------------------------------

    def _apply_config(self) -> None:
        """Switch to a pushed config version; recompile only if this agent's effective config changed."""
        update, self.next_config = self.next_config, None
        if update is None:
            return
        old = self.inp.manifest
        agent = self.inp.agent
        if agent not in update.manifest.agents and agent not in update.manifest.teams:
            self._publish(
                "config_changed",
                text=f"config {update.name} v{update.version} has no agent {agent!r}: staying on v{self.inp.config_version}",
                outcome="refused",
            )
            return
        self.inp = self.inp.model_copy(
            update={"manifest": shared(update.manifest), "config_version": update.version}
        )
        changed = old.agent_identity(self.inp.agent) != update.manifest.agent_identity(self.inp.agent)
        if changed:
            self.compiled = None
        self._publish(
            "config_changed",
            text=f"config {update.name} v{update.version}: "
            + ("this agent changed, recompiling" if changed else "this agent is unchanged"),
            outcome="recompile" if changed else "unchanged",
        )

    def _interrupt(self, reason: str) -> None:
        """Ask the run loop to cancel the running turn (`_await_turn`), after this activation's results."""
        if self.turn_task is not None and not self.turn_task.done():
            self.interrupt_requested = reason

    def _check_interrupted(self) -> None:
        """An interrupt whose cancel an operation outlived (it completed anyway) still ends the turn."""
        if self.interrupt_reason is not None:
            raise asyncio.CancelledError()

    def _append(self, message: ModelMessage) -> None:
        self.transcript.append(message)
        self.digest = chain_digest(self.digest, [message])

    def _tool_return(self, call: ToolCallPart, content: str, outcome: str) -> ToolReturnPart:
        return ToolReturnPart(
            tool_name=call.tool_name,
            content=content,
            tool_call_id=call.tool_call_id,
            timestamp=workflow.now(),
            outcome=outcome,  # type: ignore[arg-type]
        )

    def _publish(self, kind: str, text: str | None = None, **fields: object) -> None:
        """Events stay small whatever the payloads: texts are cut; the transcript has them whole.
        A model's text is the answer followers render (its deltas must join to it): cut far later.
        (Every follower's poll records the events it reads in history: the turn's output, which
        repeats the last model text, keeps the short cut; `result`/status have it whole.)"""
        limit = MODEL_TEXT_LIMIT if kind == "model_text" else EVENT_TEXT_LIMIT
        if text is not None and len(text) > limit:
            text = f"{text[:limit]}{CUT_MARK.format(len(text))}"
        event = Event(kind=kind, at=workflow.now(), turn_id=self.turn_id, step=self.step, text=text, **fields)  # type: ignore[arg-type]
        self.events.publish(event)

    def _set_state(self, state: SessionState) -> None:
        if state != self.state:
            workflow.upsert_search_attributes([STATE_ATTR.value_set(state)])
        self.state = state

    def _next_turn_id(self) -> str:
        self.counters.turn_seq += 1
        return f"turn-{self.counters.turn_seq}"

    def _busy(self) -> bool:
        """A turn is under way (running, or waiting for a person's approval)."""
        return self.state in ("running", "waiting_approval")

    def _agent_config(self) -> AgentConfig:
        return self.inp.manifest.agents.get(self.inp.agent) or AgentConfig()

    def _limits(self) -> Limits:
        return self._agent_config().limits

    def _should_snapshot_waiting(self) -> bool:
        """Continue as new while a turn waits for approval (for days, under steers, pushes and follower
        polls), once this run's history has grown: only when nothing of the step is in flight."""
        turn = self.turn
        if self.state != "waiting_approval" or turn is None or self.turn_task is None:
            return False
        waiting = len(turn.open_calls) - len(turn.finished)
        if waiting != len(self.pending_approvals) or self.stale.reason:
            return False
        info = workflow.info()
        limit = self.inp.manifest.host.sessions.continue_as_new_bytes
        grown = info.get_current_history_length() >= WAITING_SNAPSHOT_EVENTS
        return grown and (info.is_continue_as_new_suggested() or info.get_current_history_size() > limit)

    def _should_snapshot(self) -> bool:
        """At idle: when Temporal suggests it (also in a run without turns: idle followers' polls grow
        history too), or past the byte limit once this run has run a turn."""
        if self.state != "idle":
            return False
        info = workflow.info()
        if info.is_continue_as_new_suggested():
            return True
        return (
            bool(self.turns_this_run)
            and info.get_current_history_size() > self.inp.manifest.host.sessions.continue_as_new_bytes
        )

    async def _continue_as_new(self, waiting: bool = False) -> None:
        """At idle, or (`waiting`) while the running turn waits for approval: then the turn goes along
        in `resume`, and a pushed config waits for the next turn boundary in `next_config`."""
        self.counters.continued_as_new += 1
        if not waiting:
            self._apply_config()
        resume = None
        if waiting and self.turn is not None and self.prompt_running is not None:
            resume = self.turn.snapshot(self.prompt_running, self.step).model_copy(
                update={
                    "active_skills": self.active_skills,
                    "pending_approvals": list(self.pending_approvals.values()),
                    "decisions": self.decisions,
                }
            )
        keep = self.inp.manifest.host.sessions.events_kept

        def snapshot(stream_state: WorkflowStreamState) -> list[SessionInput]:
            dropped = max(0, len(stream_state.log) - keep)
            stream_state.log = stream_state.log[dropped:]
            stream_state.base_offset += dropped
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
                    }
                )
            ]

        await self.stream.continue_as_new(snapshot)


async def _all(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run in parallel; if one fails for good, cancel the others (asyncio.gather would not)."""
    tasks = [asyncio.create_task(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
