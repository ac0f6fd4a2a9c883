"""Code mode in the workflow: a `run_code` call runs its script in the sandbox (activities), and each
tool call the script makes runs here as the session's ordinary tool call (rules, approvals, fast path,
events nested under `run_code`), so every completed call is in history. Between calls the script is a
snapshot: a worker lost mid-script resumes from the last one and repeats no call. Under `CODE_KEPT`
the snapshot stays on the worker that made it and history records its digest only (it was in every
sandbox run's marker); a worker without it runs the script again from its start on the recorded
calls' results (extensions/code_mode.py), so still no call runs twice.

A script is bounded as a whole: `max_calls` calls (refused ones count; the next one ends the script),
hence at most as many resumes; `OUTPUT_BYTES` of printing over all its runs (`timeout_s` is the
sandbox's: its clock is carried in the snapshot, so it counts all runs). Calls answered here
(refused) or by local activities leave no workflow task boundary between resumes: every
`RUNS_PER_TASK` sandbox runs a short timer ends the task, so no task completion carries an
unbounded pile of markers (the server terminates a session whose completion passes 4 MiB).

The tool router (tools.py) permits a `run_code` call and hands it here; each call of the script goes
back to the router (`call_tool`).

Imported passed through, like tools.py: it calls only `workflow.*` and deterministic helpers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any

from pydantic_ai.messages import ToolCallPart, ToolReturnPart
from temporalio import workflow

from agentwolf.config.manifest import CodeModeSettings
from agentwolf.workflows.contracts import CompiledAgent, ToolCallOutput, ToolOutcome
from agentwolf.workflows.script import (
    OUTPUT_BYTES,
    SANDBOX_WAIT_S,
    ScriptCall,
    ScriptLimits,
    ScriptResult,
    ScriptResume,
    ScriptRound,
    ScriptStart,
    ScriptStep,
    function_name,
    parameter_order,
)
from agentwolf.workflows.session.core import SessionCore
from agentwolf.workflows.session.turn import TOOL_RETRY, all_or_cancel, short

CODE_MODE = "code-mode"  # patch: `run_code` runs a script whose tool calls are the session's own
CODE_BOUNDS = "code-mode-bounds"  # patch: a call past max_calls ends the script; printed output is the
# whole script's; every RUNS_PER_TASK sandbox runs a timer ends the workflow task
CODE_KEPT = "code-mode-kept"  # patch: the snapshot stays on the worker, history has its digest only

RUNS_PER_TASK = 10
"""Sandbox runs (each a marker with the script's snapshot) between two forced workflow task ends."""


CallTool = Callable[..., Awaitable[ToolReturnPart]]
"""The tool router's `call_tool`: a script's call runs as the session's own."""


class Scripts:
    """Runs code-mode scripts; their calls go through `call_tool`."""

    def __init__(self, core: SessionCore, call_tool: CallTool) -> None:
        self.core = core
        self.call_tool = call_tool
        self.running = 0
        """Scripts under way: a turn waiting for approval does not continue as new while one is (the
        next run would start the script again, and repeat its calls)."""
        self.gate: asyncio.Semaphore | None = None
        """One gate for the calls of every script of the session: `max_parallel_tools` at once however
        many scripts a step runs (pending activities stay far below Temporal's 2,000)."""
        self.runs = 0
        """Sandbox runs of the session's scripts under `CODE_BOUNDS` (see `_spread`)."""

    async def run(
        self, compiled: CompiledAgent, call: ToolCallPart, index: int, key: str, arguments: dict[str, Any]
    ) -> ToolCallOutput:
        """A permitted `run_code` call."""
        code = arguments.get("code")
        if not isinstance(code, str) or not code.strip():
            return ToolCallOutput(content="run_code needs `code`: a Python script", is_error=True)
        self.running += 1
        try:
            return await self._run_code(compiled, call, index, key, code)
        finally:
            self.running -= 1

    async def _run_code(
        self, compiled: CompiledAgent, call: ToolCallPart, index: int, key: str, code: str
    ) -> ToolCallOutput:
        """Start the script, then answer its calls and resume it until it ends; its printed output and
        value are the result, its traceback (or the limit it reached) an error."""
        settings = compiled.code_mode or CodeModeSettings()
        functions = {function_name(t): parameter_order(t) for t in compiled.script_tools}
        limits = ScriptLimits(memory_mb=settings.memory_mb, timeout_s=settings.timeout_s)
        bounded = workflow.patched(CODE_BOUNDS)
        keep = None
        if workflow.patched(CODE_KEPT):
            info = workflow.info()
            keep = f"{info.workflow_id}/{info.run_id}/{key}"
        start = ScriptStart(code=code, functions=functions, limits=limits, keep=keep)
        step = await self._sandbox("wolf.code_start", start, settings, bounded)
        printed, made = [step.stdout], 0
        rounds: list[ScriptRound] = []
        stopped: str | None = None
        while step.calls and (step.snapshot is not None or step.digest is not None):
            if bounded:
                stopped = _past_max_calls(settings, made + len(step.calls))
                if stopped is not None:
                    break
                output = sum(len(p.encode()) for p in printed)
                limits = limits.model_copy(update={"output_bytes": max(0, OUTPUT_BYTES - output)})
            results = await all_or_cancel(
                [
                    self._gated(
                        self._script_call(compiled, call, index, key, c, made + i + 1, settings.max_calls)
                    )
                    for i, c in enumerate(step.calls)
                ]
            )
            made += len(step.calls)
            if step.digest is not None:
                rounds.append(ScriptRound(calls=step.calls, results=results))
                resume = ScriptResume(
                    functions=functions,
                    limits=limits,
                    scope=keep,
                    digest=step.digest,
                    code=code,
                    rounds=list(rounds),
                )
            else:
                resume = ScriptResume(
                    snapshot=step.snapshot or b"",
                    packed=step.packed,
                    functions=functions,
                    results=results,
                    limits=limits,
                )
            step = await self._sandbox("wolf.code_resume", resume, settings, bounded)
            printed.append(step.stdout)
        text = "".join(printed)
        error = stopped or step.error
        ending = error if error is not None else step.output and f"-> {step.output}"
        if ending:  # on a line of its own
            text += ("" if not text or text.endswith("\n") else "\n") + ending
        if error is not None:
            return ToolCallOutput(content=text, is_error=True)
        return ToolCallOutput(content=text or "(no output: print results or end with an expression)")

    async def _gated(self, call: Coroutine[Any, Any, ScriptResult]) -> ScriptResult:
        if self.gate is None:
            self.gate = asyncio.Semaphore(self.core.limits().max_parallel_tools)
        try:
            async with self.gate:
                return await call
        finally:
            call.close()  # cancelled at the gate: it never started

    async def _script_call(
        self,
        compiled: CompiledAgent,
        call: ToolCallPart,
        index: int,
        key: str,
        script_call: ScriptCall,
        number: int,
        max_calls: int,
    ) -> ScriptResult:
        """One call of the script, as the session's tool call `<run_code call id>.<number>`."""
        if number > max_calls:
            return ScriptResult(
                id=script_call.id,
                content=f"call limit: a script makes at most {max_calls} tool calls",
                outcome=ToolOutcome.DENIED,
            )
        spec = next(t for t in compiled.script_tools if function_name(t) == script_call.function)
        nested = ToolCallPart(
            tool_name=spec.name,
            args=script_call.arguments,
            tool_call_id=f"{call.tool_call_id}.{number}",
        )
        part: ToolReturnPart = await self.call_tool(
            compiled, nested, index, f"{key}.{number}", {}, parent=call.tool_call_id
        )
        return ScriptResult(id=script_call.id, content=str(part.content), outcome=ToolOutcome(part.outcome))

    async def _sandbox(
        self, activity: str, inp: ScriptStart | ScriptResume, settings: CodeModeSettings, bounded: bool
    ) -> ScriptStep:
        """A local activity: the sandbox touches nothing outside, so a run lost with its worker is
        simply run again from the same snapshot; only its result is recorded (a few ms, not a
        server round trip per call of the script). Signals wait for it: at most `timeout_s` and the
        wait for a free sandbox."""
        if bounded:
            await self._spread()
        return await workflow.execute_local_activity(
            activity,
            inp,
            result_type=ScriptStep,
            start_to_close_timeout=timedelta(seconds=settings.timeout_s + SANDBOX_WAIT_S + 30),
            retry_policy=TOOL_RETRY,
            summary=short(
                f"{activity.removeprefix('wolf.')} {self.core.running.turn_id} step {self.core.running.step}"
            ),
        )

    async def _spread(self) -> None:
        """End the workflow task (a 1 ms timer) every `RUNS_PER_TASK` sandbox runs of the session:
        runs between calls answered in the workflow or by local activities have no server round
        trip between them, and all their markers would go in one task completion. Counted, not
        detected: what a workflow could read of its task (history length, time) differs on replay
        where local activities resolve."""
        self.runs += 1
        if self.runs % RUNS_PER_TASK == 0:
            await workflow.sleep(timedelta(milliseconds=1), summary="code mode: end the workflow task")


def _past_max_calls(settings: CodeModeSettings, calls: int) -> str | None:
    """The error ending a script that waits on its `calls`-th call past `max_calls`: for the model,
    never an exception the script could catch and call again."""
    if calls <= settings.max_calls:
        return None
    return (
        f"CallLimitError: the script was stopped when it asked for tool call {calls}: a script "
        f"makes at most {settings.max_calls} tool calls (code_mode max_calls). Do the rest in "
        "another run_code call."
    )
