"""The tool router: where each tool call runs (an MCP server, by mcp_calls.py; the skill reader, a
child session, a code-mode script, a web tool, the session's own transcript), under the agent's
permission rules, and the wait for a person's answer when a rule says `confirm`.

Imported passed through, like turn.py: its classes are created once per process, not re-created for
every run by the sandbox (about 10 KB per cached session as sandboxed modules). The sandbox does not
watch this code, so it calls only `workflow.*` and deterministic helpers; an import-linter contract
keeps clock, randomness, environment and I/O modules out of it (docs/architecture.md, "Durability
rules the code relies on").
"""

from __future__ import annotations

import asyncio
import fnmatch
from datetime import timedelta
from typing import Any

from pydantic_ai.messages import ToolCallPart, ToolReturnPart
from temporalio import workflow
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ChildWorkflowError, is_cancelled_exception
from temporalio.workflow import ChildWorkflowCancellationType

from agentwolf.workflows.contracts import (
    CODE,
    SESSION,
    SKILLS,
    SUBAGENTS,
    CompiledAgent,
    SkillReadInput,
    ToolCallOutput,
    ToolOutcome,
    ToolSpec,
)
from agentwolf.workflows.evals.cases import RECORDED, Recording
from agentwolf.workflows.memory_tools import MEMORY
from agentwolf.workflows.session.code import CODE_MODE, Scripts
from agentwolf.workflows.session.core import SessionCore
from agentwolf.workflows.session.mcp_calls import McpCalls
from agentwolf.workflows.session.memory import MEMORY_TOOLS, run_memory
from agentwolf.workflows.session.tool_outputs import read_tool_output
from agentwolf.workflows.session.turn import (
    BOUNDED_FAN_OUT,
    CHILD_IDS,
    HEARTBEAT_TIMEOUT,
    TOOL_RETRY,
    WAIT_CHILDREN,
    all_or_cancel,
    call_keys,
    cause_message,
    event_args,
    failed_counters,
    shared_names,
    short,
)
from agentwolf.workflows.session.web import WEB_TOOLS, run_web, web_settings
from agentwolf.workflows.session.workspace import WORKSPACES, session_call, session_settings
from agentwolf.workflows.session_input import SessionInput
from agentwolf.workflows.types import (
    AGENT_ATTR,
    PARENT_ATTR,
    SESSION_WORKFLOW,
    STATE_ATTR,
    TENANT_ATTR,
    Approval,
    Counters,
    SessionResult,
    workflow_id,
)
from agentwolf.workflows.web_tools import WEB
from agentwolf.workflows.workspace_tools import WORKSPACE


class ToolRouter:
    """Runs one tool call where it belongs and records how it ended."""

    def __init__(self, core: SessionCore) -> None:
        self.core = core
        self.recording = (
            Recording(core.inp.recorded, core.inp.live_tools) if core.inp.recorded is not None else None
        )
        """An eval's recorded tool results (evals.py), served instead of running the tools."""
        self.mcp = McpCalls(core)
        self.scripts = Scripts(core, self.call_tool)

    async def run_calls(
        self, compiled: CompiledAgent, calls: list[ToolCallPart], finished: dict[int, ToolReturnPart]
    ) -> None:
        """A step's calls not yet `finished` (results by position): skill loads first, so their
        allowed-tools already bind the calls made beside them; at most `limits.max_parallel_tools`
        at once, and calls past `limits.max_tool_calls_per_step` answer a tool error asking the
        model to batch. Temporal fails a workflow task that leaves more than 2,000 activities (or
        children) pending, and retries it for ever: an unbounded step of that size wedged the session."""
        limits = self.core.limits()
        cap, width = limits.max_tool_calls_per_step, limits.max_parallel_tools
        bounded = (len(calls) > min(cap, width)) and workflow.patched(BOUNDED_FAN_OUT)
        if bounded:
            refused = [i for i in range(cap, len(calls)) if i not in finished]
            note = (
                f"not run: this answer asked for {len(calls)} tool calls and one step runs at most "
                f"{cap} (the first {cap} ran). Batch the work: fewer calls per step, each doing more, "
                "or the rest in your next step."
            )
            for i in refused:
                finished[i] = self.core.tool_return(calls[i], note, ToolOutcome.DENIED)
            if refused:
                self.core.publish("limit_warning", text=f"{len(refused)} tool calls refused: {note}")
        keys = call_keys(calls)
        loads = {i for i, c in enumerate(calls) if (s := compiled.tool(c.tool_name)) and s.server == SKILLS}
        for group in (sorted(loads), [i for i in range(len(calls)) if i not in loads]):
            todo = [i for i in group if i not in finished]
            if todo:
                await all_or_cancel(
                    [self.call_tool(compiled, calls[i], i, keys[i], finished) for i in todo],
                    width if bounded else None,
                )

    async def call_tool(
        self,
        compiled: CompiledAgent,
        call: ToolCallPart,
        index: int,
        key: str,
        finished: dict[int, ToolReturnPart],
        parent: str | None = None,
    ) -> ToolReturnPart:
        """`parent`: the `run_code` call of a code-mode script making this call (its events say so)."""
        spec = compiled.script_tool(call.tool_name) if parent else compiled.tool(call.tool_name)
        self.core.publish(
            "tool_call_started",
            tool=call.tool_name,
            call_id=call.tool_call_id,
            args=event_args(call),
            parent=parent,
        )
        started = workflow.now()
        outcome: ToolOutcome | None = None
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
        started = self.core.approvals.answer_time(key, started)  # a person's time to answer is not the tool's
        outcome = outcome or result.outcome
        part = self.core.tool_return(call, result.content, outcome)
        finished[index] = part
        self.core.publish(
            "tool_call_finished",
            tool=call.tool_name,
            call_id=call.tool_call_id,
            duration_ms=int((workflow.now() - started).total_seconds() * 1000),
            outcome=outcome,
            text=result.content,
            parent=parent,
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
    ) -> tuple[ToolCallOutput, ToolOutcome | None]:
        """Run the call where it belongs; the outcome is `DENIED` when allowed-tools, a rule or a
        person refused it, else None (the result's own)."""
        if spec is not None and spec.server == CODE and workflow.patched(CODE_MODE):
            refusal = await self.permission(compiled, spec, call, key, arguments)
            if refusal is not None:
                return ToolCallOutput(content=refusal, is_error=True), ToolOutcome.DENIED
            return await self.scripts.run(compiled, call, index, key, arguments), None
        web = web_settings(self.core.inp.manifest.agents.get(self.core.inp.agent))
        if spec is not None and spec.server == WEB and web is not None and workflow.patched(WEB_TOOLS):
            refusal = await self.permission(compiled, spec, call, key, arguments)
            if refusal is not None:
                return ToolCallOutput(content=refusal, is_error=True), ToolOutcome.DENIED
            return await run_web(self.core.ref(), spec, arguments, web), None
        if (
            spec is not None
            and spec.server == WORKSPACE
            and (done := await self._workspace(compiled, spec, call, key, arguments))
        ):
            return done
        if spec is None:
            return ToolCallOutput(content=f"unknown tool {call.tool_name!r}", is_error=True), None
        offered = self.offered(compiled)
        if offered is not None and spec.name not in offered:
            skills = ", ".join(self.core.running.active_skills)
            return ToolCallOutput(
                content=f"{spec.name} is not allowed while {skills} is active", is_error=True
            ), ToolOutcome.DENIED
        if spec.server == SESSION:  # reads this session's own transcript: nothing to permit
            return await read_tool_output(self.core, compiled, arguments), None
        if (
            self.recording is not None
            and spec.server not in (SKILLS, SUBAGENTS)
            and workflow.patched(RECORDED)
        ):
            served = self.recording.serve(spec, arguments)  # an eval: recorded results, nothing runs
            if served is not None:
                return served, None
        refusal = await self.permission(compiled, spec, call, key, arguments)
        if refusal is not None:
            return ToolCallOutput(content=refusal, is_error=True), ToolOutcome.DENIED
        if spec.server == MEMORY and workflow.patched(MEMORY_TOOLS):
            return await run_memory(self.core, compiled, spec, call, arguments), None
        if spec.server == SKILLS:
            return await self._skill_tool(compiled, spec, arguments), None
        if spec.server == SUBAGENTS:
            return await self._delegate(compiled, call, index, arguments), None
        return await self.mcp.call(spec, call, arguments), None

    async def _workspace(
        self, compiled: CompiledAgent, spec: ToolSpec, call: ToolCallPart, key: str, arguments: dict[str, Any]
    ) -> tuple[ToolCallOutput, ToolOutcome | None] | None:
        """A workspace tool call, under the agent's rules, on the workspace's home host; None for an
        agent without a workspace (the call is then an unknown tool)."""
        settings = session_settings(self.core)
        if settings is None or not workflow.patched(WORKSPACES):
            return None
        refusal = await self.permission(compiled, spec, call, key, arguments)
        if refusal is not None:
            return ToolCallOutput(content=refusal, is_error=True), ToolOutcome.DENIED
        return await session_call(self.core, settings, spec.tool, arguments, call.tool_call_id), None

    async def _skill_tool(
        self, compiled: CompiledAgent, spec: ToolSpec, arguments: dict[str, Any]
    ) -> ToolCallOutput:
        """load_skill (activates it for the turn) or read_skill_file, read by the `wolf.read_skill`
        activity."""
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
                ref=self.core.ref(),
                agent=self.core.inp.agent,
                turn_id=self.core.running.turn_id or "",
                uri=uri,
                listing=loading,
            ),
            result_type=ToolCallOutput,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=TOOL_RETRY,
            summary=short(f"{spec.tool} {uri}"),
        )
        loaded = loading and not result.is_error and self.core.running.load_skill(skill.name)
        if loaded and skill.mcp_servers:
            self.core.running.stale.mark(f"skill {skill.name} brings MCP servers {skill.mcp_servers}")
        return result

    def offered(self, compiled: CompiledAgent) -> list[str] | None:
        """Tool names the model may use now: limited while an active skill declares `allowed-tools`."""
        limited = [s for s in self.core.active_skill_infos() if s.allowed_tools is not None]
        if not limited:
            return None
        patterns = [p.split("(", 1)[0] for s in limited for p in s.allowed_tools or ()]
        brought = tuple(f"{s.name}/" for s in self.core.active_skill_infos())
        shared = shared_names(compiled)

        def allowed(t: ToolSpec) -> bool:
            # The bare MCP name counts only while one server lists it (ambiguity fails closed).
            names = [t.name, f"{t.server}:{t.tool}", *([] if t.tool in shared else [t.tool])]
            return any(fnmatch.fnmatchcase(n, p) for n in names for p in patterns)

        return [  # the session's own readers (read_tool_output, recall) read only its transcript
            t.name
            for t in compiled.tools
            if t.server in (SKILLS, SESSION) or t.server.startswith(brought) or allowed(t)
        ]

    async def _delegate(
        self, compiled: CompiledAgent, call: ToolCallPart, index: int, arguments: dict[str, Any]
    ) -> ToolCallOutput:
        agent, task = arguments.get("agent"), arguments.get("task")
        allowed = compiled.tool("delegate").parameters["properties"]["agent"]["enum"]  # type: ignore[union-attr]
        limit = self.core.inp.manifest.host.sessions.max_subagent_depth
        if (
            not isinstance(agent, str)
            or agent not in allowed
            or not isinstance(task, str)
            or not task.strip()
        ):
            return ToolCallOutput(
                content=f"delegate needs `agent` (one of {allowed}) and a non-empty `task`", is_error=True
            )
        if self.core.inp.depth >= limit:
            return ToolCallOutput(
                content=f"subagent depth limit ({limit}) reached: do the task yourself", is_error=True
            )
        # The child's id comes from where the call sits, never from the model's call id (models repeat them).
        if workflow.patched(CHILD_IDS):
            return await self.child(
                agent,
                task,
                f"{self.core.inp.session_id}.{self.core.running.turn_id}.{self.core.running.step}.{index}",
            )
        return await self.child(agent, task, f"{self.core.inp.session_id}.{call.tool_call_id}")

    async def permission(
        self, compiled: CompiledAgent, spec: ToolSpec, call: ToolCallPart, key: str, arguments: dict[str, Any]
    ) -> str | None:
        """None when the call may run; else the refusal the model sees. `confirm` waits for a person.

        Rules and `always` answers hold on the tool's identity (server, MCP name), not on the
        model-facing name, which changes when another server lists the same name."""
        permissions = self.core.inp.manifest.permissions(self.core.inp.agent)
        approvals = self.core.approvals
        identity = (spec.server, spec.tool)
        action = permissions.decide(
            call.tool_name, arguments, identity, shared=spec.tool in shared_names(compiled)
        )
        tool = f"{spec.server}:{spec.tool}"
        # Model-facing names (no ':') in the set come from sessions that continued as new before this rule.
        if action == "allow" or (
            action == "confirm"
            and (tool in approvals.always_allowed or call.tool_name in approvals.always_allowed)
        ):
            return None
        if action == "deny":
            return f"denied by policy: {call.tool_name} is not allowed for this agent"
        call_id = key
        if approvals.ask(
            call_id, call.tool_name, arguments, workflow.now()
        ):  # else asked before a continue-as-new
            self.core.publish(
                "approval_requested", tool=call.tool_name, call_id=call_id, args=event_args(call)
            )
        self.core.set_state("waiting_approval")
        timeout = permissions.approval_timeout
        asked_at = approvals.pending[call_id].asked_at or workflow.now()
        left = timeout - (workflow.now() - asked_at).total_seconds() if timeout else None
        try:
            approved, answer = await approvals.wait(
                call_id, timedelta(seconds=max(left, 0.001)) if left is not None else None
            )
        except TimeoutError:
            approved = permissions.timeout_outcome == "allow"
            answer = Approval(call_id=call_id, reason=f"no answer within {timeout:g}s")
        except asyncio.CancelledError:  # not `finally`: an evicted run may not call workflow APIs
            self.core.approval_ended(call_id)
            raise
        self.core.approval_ended(call_id)
        approvals.answered(call_id)
        if approved and answer.always:
            approvals.allow_always(tool)
        self.core.publish(
            "approval_resolved",
            tool=call.tool_name,
            call_id=call_id,
            outcome="approved" if approved else "denied",
            text=answer.reason,
        )
        if approved:
            return None
        return "denied by the user" + (f": {answer.reason}" if answer.reason else "")

    async def child(self, agent: str, task: str, session_id: str) -> ToolCallOutput:
        """Run `agent` on `task` as a child session and wait for its answer."""
        self.core.publish("child_started", tool=agent, call_id=session_id, text=task)
        inp = self.core.inp
        tenant = inp.tenant
        try:
            result = await workflow.execute_child_workflow(
                SESSION_WORKFLOW,
                SessionInput(
                    session_id=session_id,
                    tenant=tenant,
                    agent=agent,
                    manifest=self.core.inp.manifest,
                    prompt=task,
                    background=True,
                    depth=self.core.inp.depth + 1,
                    parent=self.core.inp.session_id,
                ),
                id=workflow_id(tenant, session_id),
                result_type=SessionResult,
                static_summary=short(f"{agent}: {task}"),
                static_details=f"subagent of {inp.session_id} ({inp.agent}), {self.core.running.turn_id}",
                search_attributes=TypedSearchAttributes(
                    [
                        SearchAttributePair(TENANT_ATTR, tenant),
                        SearchAttributePair(AGENT_ATTR, agent),
                        SearchAttributePair(STATE_ATTR, "idle"),
                        SearchAttributePair(PARENT_ATTR, self.core.inp.session_id),
                    ]
                ),
                # A stopping parent waits until its children have stopped: a child left to the
                # parent-close policy is terminated mid-turn and looks alive forever.
                cancellation_type=ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED
                if workflow.patched(WAIT_CHILDREN)
                else ChildWorkflowCancellationType.TRY_CANCEL,
            )
            output = ToolCallOutput(content=result.output or "", is_error=result.outcome != "completed")
            spent: Counters | None = result.counters
        except ChildWorkflowError as err:
            if is_cancelled_exception(err):
                raise asyncio.CancelledError() from err
            output = ToolCallOutput(content=f"{agent} failed: {cause_message(err)}", is_error=True)
            spent = failed_counters(err)
        turn = self.core.running.turn
        if spent is not None and turn is not None:  # the child's spending is this turn's too
            self.core.count(turn, spent.total, delegated=True)
        self.core.publish(
            "child_finished",
            tool=agent,
            call_id=session_id,
            outcome=output.outcome,
            text=output.content,
        )
        return output
