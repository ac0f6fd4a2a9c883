"""SessionWorkflow: one agent session as a durable run loop.

idle -> running -> idle | done. A turn is one prompt's work; a step is one model request and the
tool calls it asks for. Everything that touches the world runs as an activity; this module only
decides, records and publishes. Deterministic code only (see DESIGN.md, "Rules that keep it durable").
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelRequestPart,
        ModelResponse,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState

    from agentwolf.activities.types import (
        COMPILED_QUERY,
        EMPTY_DIGEST,
        MANIFEST_QUERY,
        TRANSCRIPT_QUERY,
        CompiledAgent,
        CompileInput,
        HostRef,
        ModelRequestInput,
        ModelRequestOutput,
        ToolCallInput,
        ToolCallOutput,
        chain_digest,
    )
    from agentwolf.config.manifest import AgentConfig, Limits, Manifest
    from agentwolf.workflows.types import (
        EVENTS_TOPIC,
        STATE_ATTR,
        Event,
        Prompt,
        SessionInput,
        SessionResult,
        SessionState,
        SessionStatus,
        TurnOutcome,
        Usage,
    )

COMPILE_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30), maximum_attempts=6
)
TOOL_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3)
HEARTBEAT_TIMEOUT = timedelta(seconds=5)
LOCAL_TOOL_CALLS = "local-tool-calls"  # patch: known-fast tools run as local activities
MODEL_TIMEOUT = timedelta(minutes=10)


class _TurnStopped(Exception):
    """A limit or a failure ended the turn; `outcome` says which."""

    def __init__(self, outcome: TurnOutcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome


@workflow.defn(name="SessionWorkflow")
class SessionWorkflow:
    @workflow.init
    def __init__(self, inp: SessionInput) -> None:
        self.inp = inp
        self.stream = WorkflowStream(prior_state=inp.stream_state)
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
        self.tool_ms: dict[str, int] = {}  # each tool's last call duration (workflow time: replay-safe)
        if inp.prompt is not None and not inp.transcript and self.counters.turns == 0 and not self.queue:
            self.queue.append(Prompt(turn_id=self._next_turn_id(), text=inp.prompt))

    # -- run loop ------------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: SessionInput) -> SessionResult:
        while True:
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
            await self.turn_task
            self.turn_task = None
            if inp.background and not inp.keep:
                break
        self._set_state("done")
        self._publish("session_closed", outcome=self.last_outcome, usage=self.counters.usage)
        await workflow.wait_condition(workflow.all_handlers_finished)
        if inp.background and self.last_outcome == "failed":
            raise ApplicationError(f"the task failed: {self.last_output}", type="TurnFailed", non_retryable=True)
        return SessionResult(
            session_id=inp.session_id, output=self.last_output, outcome=self.last_outcome, counters=self.counters
        )

    async def _run_turn(self, prompt: Prompt) -> None:
        self.turn_id, self.step, self.interrupt_reason = prompt.turn_id, 0, None
        self.turns_this_run += 1
        self._set_state("running")
        self._publish("turn_started", text=prompt.text)
        pending: list[ModelRequestPart] = [UserPromptPart(prompt.text, timestamp=workflow.now())]
        finished: dict[str, ToolReturnPart] = {}
        open_calls: list[ToolCallPart] = []
        usage = Usage()
        outcome: TurnOutcome = "completed"
        output: str | None = None
        try:
            compiled = self.compiled or await self._compile()
            limits = self._limits()
            repeats: Counter[str] = Counter()
            warned_budget = False
            while True:
                if self.step >= limits.max_steps:
                    raise _TurnStopped("limit", f"max_steps ({limits.max_steps}) reached")
                for text in self.steers:
                    pending.append(UserPromptPart(text, timestamp=workflow.now()))
                    self._publish("steer_applied", text=text)
                self.steers.clear()
                self._append(ModelRequest(parts=pending, timestamp=workflow.now()))
                pending = []
                self.step += 1
                self.counters.steps += 1
                response = await self._model_request(compiled)
                self._append(response)
                step_usage = Usage(
                    requests=1,
                    input_tokens=response.usage.input_tokens or 0,
                    output_tokens=response.usage.output_tokens or 0,
                )
                usage = usage.plus(step_usage)
                self.counters.usage = self.counters.usage.plus(step_usage)
                if response.text:
                    self._publish("model_text", text=response.text)
                open_calls = response.tool_calls
                if not open_calls:
                    output = response.text
                    break
                if limits.token_budget:
                    if usage.total_tokens >= limits.token_budget:
                        raise _TurnStopped("limit", f"token budget ({limits.token_budget}) reached")
                    if not warned_budget and usage.total_tokens >= 0.8 * limits.token_budget:
                        warned_budget = True
                        self._publish("limit_warning", text=f"80% of the token budget used ({usage.total_tokens})")
                warnings = []
                for call in open_calls:
                    key = f"{call.tool_name}:{json.dumps(call.args_as_dict(), sort_keys=True, default=str)}"
                    repeats[key] += 1
                    if repeats[key] >= limits.loop_stop:
                        raise _TurnStopped("limit", f"loop guard: {call.tool_name} called {repeats[key]} times with the same arguments")
                    if repeats[key] == limits.loop_warn:
                        warnings.append(call.tool_name)
                pending.extend(await self._call_tools(compiled, open_calls, finished))
                usage = usage.plus(Usage(tool_calls=len(open_calls)))
                self.counters.usage.tool_calls += len(open_calls)
                open_calls, finished = [], {}
                for tool in warnings:
                    text = (
                        f"You have called {tool} {limits.loop_warn} times with the same arguments. "
                        f"Change approach; the turn stops at {limits.loop_stop} repeats."
                    )
                    pending.append(UserPromptPart(text, timestamp=workflow.now()))
                    self._publish("limit_warning", text=text, tool=tool)
        except (asyncio.CancelledError, ActivityError) as err:
            if self.interrupt_reason is not None and is_cancelled_exception(err):
                outcome, output = "interrupted", None
                self._publish("interrupted", text=self.interrupt_reason)
            elif isinstance(err, ActivityError):
                outcome, output = "failed", _cause_message(err)
                self._publish("error", text=output)
            else:
                raise
        except _TurnStopped as stop:
            outcome, output = stop.outcome, str(stop)
            self._publish("limit_reached", text=str(stop))
        # Close every dangling tool call so the transcript stays valid for the next turn.
        closing_note = {"interrupted": "interrupted by the user", "limit": f"not run: {output}"}.get(outcome, "not run")
        for call in open_calls:
            finished.setdefault(call.tool_call_id, self._tool_return(call, closing_note, "interrupted"))
        pending = [*(finished[c.tool_call_id] for c in open_calls), *pending]
        if outcome != "completed":  # steers this turn never reached the model: keep them on record
            pending.extend(UserPromptPart(text, timestamp=workflow.now()) for text in self.steers)
            self.steers.clear()
        if pending:
            self._append(ModelRequest(parts=pending, timestamp=workflow.now()))
        self.counters.turns += 1
        self.last_output, self.last_outcome = output, outcome
        self._publish("turn_finished", text=output, outcome=outcome, usage=usage)
        self.turn_id = None
        self._set_state("idle")

    # -- activities ----------------------------------------------------------------------------

    def _ref(self) -> HostRef:
        return HostRef(
            config_id=self.inp.manifest.identity, tenant=self.inp.tenant, workflow_id=workflow.info().workflow_id
        )

    async def _compile(self) -> CompiledAgent:
        self.compiled = await workflow.execute_activity(
            "wolf.compile",
            CompileInput(ref=self._ref(), manifest=self.inp.manifest, agent=self.inp.agent),
            result_type=CompiledAgent,
            start_to_close_timeout=timedelta(seconds=90),
            retry_policy=COMPILE_RETRY,
        )
        tools = ", ".join(t.name for t in self.compiled.tools) or "no tools"
        self._publish("compiled", text=f"{self.compiled.agent}: {' -> '.join(self.compiled.models)}; {tools}")
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

    async def _call_tools(
        self, compiled: CompiledAgent, calls: list[ToolCallPart], finished: dict[str, ToolReturnPart]
    ) -> list[ToolReturnPart]:
        """Run the step's tool calls in parallel; if one fails for good, the others are cancelled."""
        tasks = [asyncio.create_task(self._call_tool(compiled, c, finished)) for c in calls]
        try:
            return await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise

    async def _call_tool(
        self, compiled: CompiledAgent, call: ToolCallPart, finished: dict[str, ToolReturnPart]
    ) -> ToolReturnPart:
        spec = compiled.tool(call.tool_name)
        self._publish("tool_call_started", tool=call.tool_name, call_id=call.tool_call_id, args=_args(call))
        started = workflow.now()
        try:
            arguments = call.args_as_dict(raise_if_invalid=True)
        except ValueError as exc:
            spec, result = None, ToolCallOutput(content=f"invalid JSON arguments: {exc}", is_error=True)
        else:
            result = ToolCallOutput(content=f"unknown tool {call.tool_name!r}", is_error=True)
        if spec is not None:
            server = self.inp.manifest.host.mcp_servers[spec.server]
            inp = ToolCallInput(
                ref=self._ref(), server=spec.server, tool=spec.tool, arguments=arguments, call_id=call.tool_call_id
            )
            last_ms = self.tool_ms.get(call.tool_name)
            if last_ms is not None and last_ms < server.fast_call_ms and workflow.patched(LOCAL_TOOL_CALLS):
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
        elapsed = workflow.now() - started
        self.tool_ms[call.tool_name] = int(elapsed.total_seconds() * 1000)
        outcome = "failed" if result.is_error else "success"
        part = self._tool_return(call, result.content, outcome)
        finished[call.tool_call_id] = part
        self._publish(
            "tool_call_finished",
            tool=call.tool_name,
            call_id=call.tool_call_id,
            duration_ms=self.tool_ms[call.tool_name],
            outcome=outcome,
            text=result.content[:2000],
        )
        return part

    # -- inputs --------------------------------------------------------------------------------

    @workflow.update
    def prompt(self, text: str) -> str:
        """Start a turn (or queue it); returns its turn id."""
        if self.state == "running" and self._agent_config().double_texting == "interrupt":
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
        busy = self.state == "running" or bool(self.queue)
        if busy and self._agent_config().double_texting == "reject":
            raise ValueError("a turn is running and this agent's double_texting policy is 'reject'")

    @workflow.signal
    def steer(self, text: str) -> None:
        """A user message for the next model request of the running turn (or a new turn when idle)."""
        if not self.closing and text.strip():
            self.steers.append(text)

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
            counters=self.counters,
            transcript_len=len(self.transcript),
            last_output=self.last_output,
            last_outcome=self.last_outcome,
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

    def _interrupt(self, reason: str) -> None:
        if self.turn_task is not None and not self.turn_task.done():
            self.interrupt_reason = reason
            self.turn_task.cancel()

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

    def _publish(self, kind: str, **fields: object) -> None:
        self.events.publish(Event(kind=kind, at=workflow.now(), turn_id=self.turn_id, step=self.step, **fields))  # type: ignore[arg-type]

    def _set_state(self, state: SessionState) -> None:
        if state != self.state:
            workflow.upsert_search_attributes([STATE_ATTR.value_set(state)])
        self.state = state

    def _next_turn_id(self) -> str:
        self.counters.turn_seq += 1
        return f"turn-{self.counters.turn_seq}"

    def _agent_config(self) -> AgentConfig:
        return self.inp.manifest.agents.get(self.inp.agent) or AgentConfig()

    def _limits(self) -> Limits:
        return self._agent_config().limits

    def _should_snapshot(self) -> bool:
        if not self.turns_this_run or self.state != "idle":
            return False
        info = workflow.info()
        limit = self.inp.manifest.host.sessions.continue_as_new_bytes
        return info.is_continue_as_new_suggested() or info.get_current_history_size() > limit

    async def _continue_as_new(self) -> None:
        self.counters.continued_as_new += 1
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
                        "compiled": self.compiled,
                        "counters": self.counters,
                        "queue": self.queue,
                        "steers": self.steers,
                        "last_output": self.last_output,
                        "last_outcome": self.last_outcome,
                        "stream_state": stream_state,
                    }
                )
            ]

        await self.stream.continue_as_new(snapshot)


def _args(call: ToolCallPart) -> dict[str, object]:
    try:
        return call.args_as_dict(raise_if_invalid=True)
    except ValueError:
        return {"_raw": str(call.args)}


def _cause_message(err: BaseException) -> str:
    """The innermost error message (an ActivityError wraps the activity's ApplicationError)."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err)
