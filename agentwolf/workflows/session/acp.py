"""An ACP agent's turn in the session workflow: the turn runs in the agent's own process on its home
host, a step at a time; each `session/request_permission` between steps is a durable approval.

Imported passed through, like loop.py: deterministic, `workflow.*` only (import-linter contract)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeout

from agentwolf.workflows.acp_types import AcpPermission, AcpTurnInput, AcpTurnOutput
from agentwolf.workflows.session.core import SessionCore
from agentwolf.workflows.session.turn import HEARTBEAT_TIMEOUT, Turn, TurnStopped
from agentwolf.workflows.session.workspace import session_settings
from agentwolf.workflows.types import Approval
from agentwolf.workflows.workspace_tools import WorkspaceCall, line_turns, turn_number

ACP_AGENTS = "acp-agents"  # patch: an agent with `acp:` runs its turns in its ACP process
ACP_RELEASE = "acp-release"  # patch: a closing session stops its ACP agent's process
ACP_OWN_APPROVALS = "acp-own-approvals"
"""patch: rules match a permission request's kind and raw input (not its title); "always" is kept in
the session's approvals and the agent is told allow_once."""
ACP_WORKSPACE = "acp-workspace"
"""patch: an ACP agent with a workspace is served `fs/*` from it; a turn it wrote in ends with a
snapshot."""
ACP_TURN_TIMEOUT = timedelta(hours=2)
ACP_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=5)
HOME_WAIT = timedelta(minutes=5)
"""A step that no worker of the agent's home host picks up this long: the host is gone, the agent
moves to another (its own state lost, unless it can load the session there)."""
CONTEXT_CHARS = 20_000


class AcpRunner:
    """Drives an ACP agent's turn; its home host and session are recorded on the session's input
    (`acp_home`, `acp_session`), which a continue-as-new carries. ACP has no way in while a prompt
    runs: steers wait, and the session sends them as the next prompt when the turn ends."""

    def __init__(self, core: SessionCore) -> None:
        self.core = core

    def runs(self) -> bool:
        config = self.core.inp.manifest.agents.get(self.core.inp.agent)
        return config is not None and config.acp is not None and workflow.patched(ACP_AGENTS)

    async def run(self, task: str, turn: Turn) -> str:
        context = self._acp_context()
        self.core.log.append(ModelRequest(parts=turn.pending, timestamp=workflow.now()))
        turn.pending = []
        answers: dict[str, str] = {}
        shown: set[str] = set()
        said: list[str] = []
        while True:
            out = await self._acp_step(task, context, answers)
            self.core.acp_session_is(out.session)
            self._workspace_used(out)
            if out.resumed in ("loaded", "lost"):
                note = (
                    "the agent's session was loaded on its host again"
                    if out.resumed == "loaded"
                    else "the external agent's own state was lost; it was prompted again with the "
                    "transcript so far"
                )
                self.core.publish("agent_resumed", text=note, outcome=out.resumed, tool=self.core.inp.agent)
            if out.text:  # before the step's tool calls: followers close the step's live text on them
                said.append(out.text)
                self.core.publish("model_text", text=out.text)
            self._publish_acp_calls(out, shown)
            if out.permission is None:
                break
            answers[out.permission.tool_call_id] = await self._acp_permission(out.permission)
            self.core.running.step += 1
        if out.stop_reason == "cancelled":
            raise asyncio.CancelledError()
        if out.stop_reason not in ("end_turn", None):
            raise TurnStopped("failed", f"{self.core.inp.agent} stopped: {out.stop_reason}")
        answer = "".join(said)
        self.core.log.append(ModelResponse(parts=[TextPart(answer)], timestamp=workflow.now()))
        return answer

    def _publish_acp_calls(self, out: AcpTurnOutput, shown: set[str]) -> None:
        """The agent's finished tool calls as events, once each whatever step (or attempt) reports
        them; at the turn's end the others too. Reported as they end: a call shown running across a
        permission step would hold back the live text of the steps after it (followers keep a step's
        text behind the running calls of the steps before)."""
        for call in out.tool_calls:
            ended = call.status in ("completed", "failed")
            if call.call_id in shown or not (ended or out.permission is None):
                continue
            shown.add(call.call_id)
            self.core.publish("tool_call_started", tool=call.title, call_id=call.call_id)
            if ended:
                outcome = "ok" if call.status == "completed" else "error"
                self.core.publish(
                    "tool_call_finished", tool=call.title, call_id=call.call_id, outcome=outcome
                )

    async def _acp_step(self, task: str, context: str, answers: dict[str, str]) -> AcpTurnOutput:
        """One step on the home host; a home nobody serves any more is replaced once."""
        for _ in range(2):
            if self.core.inp.acp_home is None:
                self.core.acp_home_is(
                    await workflow.execute_activity(
                        "wolf.acp_home", result_type=str, start_to_close_timeout=timedelta(seconds=30)
                    )
                )
            try:
                return await workflow.execute_activity(
                    "wolf.acp_turn",
                    AcpTurnInput(
                        ref=self.core.ref(),
                        agent=self.core.inp.agent,
                        turn_id=self.core.running.turn_id or "",
                        step=self.core.running.step,
                        prompt=task,
                        context=context,
                        session=self.core.inp.acp_session,
                        answers=dict(answers),
                        workspace=self._workspace_call(),
                    ),
                    result_type=AcpTurnOutput,
                    task_queue=self.core.inp.acp_home,
                    start_to_close_timeout=ACP_TURN_TIMEOUT,
                    schedule_to_start_timeout=HOME_WAIT,
                    heartbeat_timeout=HEARTBEAT_TIMEOUT,
                    retry_policy=ACP_RETRY,
                    summary=f"acp_turn {self.core.inp.agent}",
                )
            except ActivityError as err:
                cause = err.cause
                if not (isinstance(cause, ActivityTimeout) and cause.type == TimeoutType.SCHEDULE_TO_START):
                    raise
                self.core.acp_home_is(None)
        raise TurnStopped("failed", f"no worker host serves the ACP agent {self.core.inp.agent}")

    def _workspace_call(self) -> WorkspaceCall | None:
        """The session's workspace for the agent's `fs/*` requests, if its agent has one."""
        settings = session_settings(self.core)
        if settings is None or not workflow.patched(ACP_WORKSPACE):
            return None
        state = self.core.workspace()
        return WorkspaceCall(
            ref=self.core.ref(),
            tool=None,
            settings=settings,
            last=state.last(line_turns([m.turn_id for m in self.core.log.turns])),
            restore=state.restore,
            epoch=state.epoch,
            turn=turn_number(self.core.running.turn_id),
        )

    def _workspace_used(self, out: AcpTurnOutput) -> None:
        """The workspace now lives on the agent's home host; what the agent wrote is snapshotted at
        the turn's end (workspace.turn_ended)."""
        state = self.core.inp.workspace
        if state is None or session_settings(self.core) is None or not workflow.patched(ACP_WORKSPACE):
            return
        state.home, state.restore = self.core.inp.acp_home, False
        state.changed = state.changed or out.workspace_changed

    async def release(self) -> None:
        """The session closes: its ACP agent's process on the home host stops. Said, not raised, when
        that fails (the host stops it when it closes)."""
        if self.core.inp.acp_home is None or not workflow.patched(ACP_RELEASE):
            return
        try:
            await workflow.execute_activity(
                "wolf.release_session",
                self.core.ref(),
                task_queue=self.core.inp.acp_home,
                start_to_close_timeout=timedelta(seconds=30),
                schedule_to_start_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=2),
            )
        except ActivityError as err:
            workflow.logger.warning("stopping the ACP agent %s failed: %s", self.core.inp.agent, err.cause)

    async def _acp_permission(self, asked: AcpPermission) -> str:
        """A person's answer (the agent's rules first) as the option id to send; "" cancels.

        Rules match what the agent would run: the request's `kind` is the tool name, its raw input the
        arguments (its title is the agent's own text: `git status && curl ... | sh` is a title too).
        "Always" stays in the session's approvals, keyed by agent, kind and title (the request as
        the person saw it), and the agent is told allow_once: AgentWolf decides the next one too."""
        config = self.core.inp.manifest.agents[self.core.inp.agent]
        own = workflow.patched(ACP_OWN_APPROVALS)
        args = asked.raw_input if isinstance(asked.raw_input, dict) else {"input": asked.raw_input}
        always_key = f"acp:{self.core.inp.agent}:{asked.kind}:{asked.title}"
        permissions = config.permissions
        if permissions is None:
            action = "confirm"
        elif own:
            action = permissions.decide(asked.kind, args)
        else:
            action = permissions.decide(asked.title, {})
        if own and action == "confirm" and always_key in self.core.approvals.always_allowed:
            action = "allow"
        allow = next((o.option_id for o in asked.options if o.kind == "allow_once"), "")
        reject = next((o.option_id for o in asked.options if o.kind == "reject_once"), "")
        if action != "confirm":
            return allow if action == "allow" else reject
        call_id = f"{self.core.running.turn_id}.{asked.tool_call_id}"
        self.core.approvals.ask(call_id, asked.title, args, workflow.now())  # ids are new each turn
        self.core.publish("approval_requested", tool=asked.title, call_id=call_id, args=args)
        self.core.set_state("waiting_approval")
        timeout = config.permissions.approval_timeout if config.permissions else None
        try:
            approved, answer = await self.core.approvals.wait(
                call_id, timedelta(seconds=timeout) if timeout else None
            )
        except TimeoutError:
            approved = config.permissions is not None and config.permissions.timeout_outcome == "allow"
            answer = Approval(call_id=call_id, reason=f"no answer within {timeout:g}s")
        except asyncio.CancelledError:  # not `finally`: an evicted run may not call workflow APIs
            self.core.approval_ended(call_id)
            raise
        self.core.approval_ended(call_id)
        self.core.publish(
            "approval_resolved",
            tool=asked.title,
            call_id=call_id,
            outcome="approved" if approved else "denied",
            text=answer.reason,
        )
        if own:
            if approved and answer.always:
                self.core.approvals.allow_always(always_key)
            return allow if approved else reject
        always = next((o.option_id for o in asked.options if o.kind == "allow_always"), allow)
        return (always if answer.always else allow) if approved else reject

    def _acp_context(self) -> str:
        """Earlier turns as text (the last CONTEXT_CHARS), for an agent whose own state was lost."""
        lines = []
        for message in self.core.log.transcript:
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    lines.append(f"user: {part.content}")
                elif isinstance(part, TextPart):
                    lines.append(f"{self.core.inp.agent}: {part.content}")
        return "\n".join(lines)[-CONTEXT_CHARS:]
