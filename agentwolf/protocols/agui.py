"""AG-UI: `POST /agui/{agent}` runs a turn of a durable session and streams it as AG-UI events.

A thread is a session (`threadId` = session id, started on first use with the served config), a run
is a turn: the last user message is its prompt. The stream translates the session's events
(agentwolf/client/live.py): RUN_STARTED; STEP_STARTED/FINISHED around each model step;
TEXT_MESSAGE_START/CONTENT/END from the streamed text (one message per step and attempt: a
superseded attempt's message ends with `metadata.agentwolf.superseded`); TOOL_CALL_START/ARGS/END
when a call starts and TOOL_CALL_RESULT when it returns; RUN_FINISHED (cancelled when the turn was
interrupted) or RUN_ERROR. A tool call waiting for approval (a `confirm` rule) ends the run with
RUN_FINISHED's interrupt outcome, one interrupt per waiting call (its id is the call id); the next
run answers them in `resume` (`payload`: true/false or `{"approved", "always", "reason"}`; a
cancelled entry denies) and streams the rest of the turn.

Nothing lives in this process: the turn runs in the session whatever happens to the connection; a
run on a thread whose turn is still going, with that turn's prompt as its last user message, streams
that turn (from its start) instead of prompting again; a new message is a turn of its own, which the
session queues or refuses (409) as its double-texting policy says (409 while approvals wait). A
thread runs one agent of one config: another agent's or config's session is as unknown as a missing
one. Every event's SSE id says where the client is (`Where`), so `Last-Event-ID` resumes the run
in any `wolf serve` process with nothing lost or repeated."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from agentwolf.client.wolf_client import InvalidSessionId, SessionNotFound, WolfClient
from agentwolf.protocols import turns
from agentwolf.protocols.cursor import Cursor, events_after
from agentwolf.protocols.served import (
    ApiError,
    Target,
    json_body,
    principal_of,
    served_of,
    session_errors,
    session_of,
)
from agentwolf.workflows.types import Event, PendingApproval, SessionStatus

log = logging.getLogger(__name__)

PING = 15.0
"""Seconds between heartbeat comments (`: ping`) on an idle stream."""

APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean"},
        "always": {"type": "boolean", "description": "allow this tool for the rest of the session"},
        "reason": {"type": "string"},
    },
    "required": ["approved"],
}

_STEPPED = frozenset({"text_delta", "model_text", "tool_call_started", "tool_call_finished"})


@dataclass(frozen=True)
class Where:
    """What a client of a run has: the session events it has (`Cursor`), its turn, and what its
    AG-UI stream has open. An event's SSE id; from it the rest of the run follows exactly."""

    cursor: Cursor
    turn: str
    step: int | None = None
    """The open step."""
    message: int | None = None
    """The attempt whose text message is open (in `step`)."""
    tool: int = 0
    """How many of a starting tool call's events (START, ARGS) were sent."""
    ended: bool = False

    def __str__(self) -> str:
        if self.ended:
            return f"{self.cursor}~{self.turn}~end"
        step, message = ("-" if v is None else str(v) for v in (self.step, self.message))
        return f"{self.cursor}~{self.turn}~{step}~{message}~{self.tool}"

    @classmethod
    def parse(cls, value: str) -> Where:
        parts = value.strip().split("~")
        try:
            if len(parts) == 3 and parts[2] == "end":
                return cls(Cursor.parse(parts[0]), parts[1], ended=True)
            if len(parts) != 5 or not parts[1]:
                raise ValueError
            step, message = (None if v == "-" else int(v) for v in parts[2:4])
            return cls(Cursor.parse(parts[0]), parts[1], step, message, int(parts[4]))
        except ValueError:
            raise ValueError(f"not an event id of an AG-UI run: {value[:60]!r}") from None


@dataclass
class Context:
    thread_id: str
    run_id: str
    session_id: str
    waiting: list[PendingApproval] | None = None
    """For an `approval_requested`: the calls waiting for a person now (none: answered already)."""


def _message_id(w: Where, step: int, attempt: int) -> str:
    return f"{w.turn}.{step}.{attempt}"


Step = tuple[BaseEvent, Where, bool]


def _next(w: Where, e: Event, ctx: Context) -> Step | None:
    """The next AG-UI event `e` makes the client see, given what it has (`w`); `True` when it is
    `e`'s last. A function of `w` and `e` alone: a resumed stream carries on exactly."""
    if w.ended or e.turn_id != w.turn:
        return None
    step = e.step or 0
    if e.kind == "turn_finished" or (e.kind == "approval_requested" and ctx.waiting):
        closing = _close(w)
        if closing is not None:
            return (*closing, False)
        return _finish(w, e, ctx), replace(w, ended=True), True
    if e.kind not in _STEPPED or (e.kind == "model_text" and w.message is None):
        return _superseded(w, e, step) if e.kind == "attempt_superseded" else None
    if e.kind == "text_delta" and not e.text:
        return None
    if not (e.kind == "tool_call_started" and w.tool):
        entering = _enter(w, step)
        if entering is not None:
            return (*entering, False)
    if e.kind == "model_text":
        return _end_message(w, step, w.message or 0, last=True)
    if e.kind == "text_delta":
        return _text(w, e, step)
    if e.kind == "tool_call_finished":
        call_id = e.call_id or ""
        result = ToolCallResultEvent(
            message_id=f"{w.turn}.{step}.result.{call_id}",
            tool_call_id=call_id,
            content=e.text or "",
            role="tool",
        )
        return result, w, True
    return _tool_call(w, e, step)


def _end_message(w: Where, step: int, attempt: int, *, last: bool) -> Step:
    return TextMessageEndEvent(message_id=_message_id(w, step, attempt)), replace(w, message=None), last


def _superseded(w: Where, e: Event, step: int) -> Step | None:
    """An attempt's open message ends, marked superseded: its retry's text follows."""
    if w.message is None or w.message != (e.attempt or 0) or w.step != step:
        return None
    end = TextMessageEndEvent(
        message_id=_message_id(w, step, w.message), metadata={"agentwolf": {"superseded": True}}
    )
    return end, replace(w, message=None), True


def _text(w: Where, e: Event, step: int) -> Step:
    # No attempt: the step's text as it ended, past what was streamed of it (live.py): it goes on
    # whichever message is open.
    attempt = (w.message if e.attempt is None else e.attempt) or 0
    if w.message is not None and w.message != attempt:
        return _end_message(w, step, w.message, last=False)
    if w.message is None:
        start = TextMessageStartEvent(message_id=_message_id(w, step, attempt), role="assistant")
        return start, replace(w, message=attempt), False
    return TextMessageContentEvent(message_id=_message_id(w, step, attempt), delta=e.text or ""), w, True


def _tool_call(w: Where, e: Event, step: int) -> Step:
    """tool_call_started: the call whole (a model's arguments are known by the time the call starts)."""
    call_id = e.call_id or ""
    if w.message is not None:
        return _end_message(w, step, w.message, last=False)
    if w.tool == 0:
        return (
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=e.tool or ""),
            replace(w, tool=1),
            False,
        )
    if w.tool == 1:
        return (
            ToolCallArgsEvent(tool_call_id=call_id, delta=json.dumps(e.args or {})),
            replace(w, tool=2),
            False,
        )
    return ToolCallEndEvent(tool_call_id=call_id), replace(w, tool=0), True


def _close(w: Where) -> tuple[BaseEvent, Where] | None:
    """The next event that ends what is open (the text message, then the step)."""
    if w.message is not None and w.step is not None:
        return TextMessageEndEvent(message_id=_message_id(w, w.step, w.message)), replace(w, message=None)
    if w.step is not None:
        return StepFinishedEvent(step_name=f"step {w.step}"), replace(w, step=None, message=None)
    return None


def _enter(w: Where, step: int) -> tuple[BaseEvent, Where] | None:
    if w.step == step:
        return None
    closing = _close(w)
    if closing is not None:
        return closing
    return StepStartedEvent(step_name=f"step {step}"), replace(w, step=step)


def _finish(w: Where, e: Event, ctx: Context) -> BaseEvent:
    if e.kind == "approval_requested":
        interrupts = [
            Interrupt(
                id=p.call_id,
                reason="tool_approval",
                message=f"Allow {p.tool}({json.dumps(p.args)[:500]})?",
                tool_call_id=p.call_id,
                response_schema=APPROVAL_SCHEMA,
                metadata={"agentwolf": {"tool": p.tool, "args": p.args}},
            )
            for p in ctx.waiting or []
        ]
        return RunFinishedEvent(
            thread_id=ctx.thread_id,
            run_id=ctx.run_id,
            outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
        )
    usage = (
        [
            TokenUsage(
                input_tokens=e.usage.input_tokens,
                output_tokens=e.usage.output_tokens,
                total_tokens=e.usage.total_tokens,
            )
        ]
        if e.usage
        else None
    )
    if e.outcome == "completed":
        return RunFinishedEvent(thread_id=ctx.thread_id, run_id=ctx.run_id, result=e.text, usage=usage)
    if e.outcome == "interrupted":
        return RunFinishedEvent(
            thread_id=ctx.thread_id, run_id=ctx.run_id, outcome=RunFinishedCancelledOutcome(), usage=usage
        )
    return RunErrorEvent(message=e.text or f"the turn ended: {e.outcome}", code=e.outcome, usage=usage)


def translate(w: Where, after: Cursor, e: Event, ctx: Context) -> tuple[list[tuple[BaseEvent, Where]], Where]:
    """The AG-UI events for session event `e` (which moved the session cursor to `after`), each with
    the position that follows it; and the position after them all."""
    out: list[tuple[BaseEvent, Where]] = []
    while (step := _next(w, e, ctx)) is not None:
        event, w, last = step
        if last:
            w = replace(w, cursor=after)
            out.append((event, w))
            return out, w
        out.append((event, w))
    return out, replace(w, cursor=after)


_ENCODER = EventEncoder()


def _sse(event: BaseEvent, where: Where) -> ServerSentEvent:
    data = _ENCODER.encode(event).removeprefix("data: ").rstrip("\n")
    return ServerSentEvent(data=data, id=str(where), sep="\n")


async def _stream(
    wolf: WolfClient, ctx: Context, where: Where, started: bool
) -> AsyncIterator[ServerSentEvent]:
    if started:
        yield _sse(
            RunStartedEvent(
                thread_id=ctx.thread_id,
                run_id=ctx.run_id,
                protocol_version=PROTOCOL_VERSION,
                metadata={"agentwolf": {"session_id": ctx.session_id, "turn_id": where.turn}},
            ),
            where,
        )
    if where.ended:
        return
    try:
        async for after, event in events_after(wolf, ctx.session_id, where.cursor):
            ctx.waiting = None
            if event.kind == "approval_requested" and event.turn_id == where.turn:
                ctx.waiting = await _waiting(wolf, ctx.session_id, event)
            events, where = translate(where, after, event, ctx)
            for out, position in events:
                yield _sse(out, position)
            if where.ended:
                return
        message = "the session ended before the turn did"
    except Exception as exc:  # noqa: BLE001 - any failure ends the run with RUN_ERROR, not a cut stream
        log.warning("AG-UI run on %r lost the session's events: %r", ctx.session_id, exc)
        message = "lost the session's events; run again with Last-Event-ID to carry on"
    for out, position in _abort(where, message):
        yield _sse(out, position)


def _abort(w: Where, message: str) -> Iterator[tuple[BaseEvent, Where]]:
    while (closing := _close(w)) is not None:
        event, w = closing
        yield event, w
    yield RunErrorEvent(message=message, code="session_ended"), replace(w, ended=True)


async def _waiting(wolf: WolfClient, session_id: str, event: Event) -> list[PendingApproval] | None:
    """The calls waiting for a person, when `event` asked for the last of them (the calls of a step ask
    one after another: the run ends once they all have); else None."""
    status = await wolf.status(session_id)
    if status.state != "waiting_approval" or status.turn_id != event.turn_id or not status.pending_approvals:
        return None
    return status.pending_approvals if status.pending_approvals[-1].call_id == event.call_id else None


# -- starting a run ------------------------------------------------------------------------------


def _prompt_of(inp: RunAgentInput) -> str:
    for message in reversed(inp.messages):
        if isinstance(message, UserMessage) or getattr(message, "role", None) == "user":
            content = message.content
            if isinstance(content, str):
                text = content
            else:
                text = "\n".join(
                    getattr(p, "text", "") for p in content or () if getattr(p, "type", "") == "text"
                )
            if text.strip():
                return text
            break
    raise ApiError(400, "the run's messages end with no user message with text to send", code="no_prompt")


async def _session(wolf: WolfClient, target: Target, session_id: str) -> SessionStatus:
    """The thread's session, started with the served config on first use."""
    try:
        await wolf.status(session_id)
    except SessionNotFound:
        try:
            await wolf.start_session(target.agent, **target.source, session_id=session_id)
        except WorkflowAlreadyStartedError:
            pass  # another request started it just now
        except InvalidSessionId as exc:  # the caller's own thread id: say why
            raise ApiError(400, str(exc), code="invalid_thread") from None
        except ValueError as exc:  # the served config's own account (its other agents...) stays in the log
            log.warning("thread %r did not start: %s", session_id, exc)
            raise ApiError(
                400, f"cannot start thread {session_id!r} with the served config", code="invalid_thread"
            ) from None
    return await session_of(wolf, target, session_id)  # another agent's or config's: not found


async def _begin(wolf: WolfClient, target: Target, inp: RunAgentInput) -> Where:
    """Answer interrupts, reattach to a running turn, or prompt: where the run's stream starts."""
    session_id = inp.thread_id
    status = await _session(wolf, target, session_id)
    if status.state == "done":
        raise ApiError(409, f"thread {session_id!r} has ended", code="thread_closed")
    if inp.resume:
        waiting = (
            {p.call_id for p in status.pending_approvals} if status.state == "waiting_approval" else set()
        )
        stale = [r.interrupt_id for r in inp.resume if r.interrupt_id not in waiting]
        if stale or status.turn_id is None:
            raise ApiError(
                409,
                f"no such interrupt waits on thread {session_id!r}: {stale}",
                code="interrupt_not_pending",
            )
        offset = await wolf.event_offset(session_id)
        for entry in inp.resume:
            approved, always, reason = _answer(entry.status, entry.payload)
            try:
                if approved:
                    await wolf.approve(session_id, entry.interrupt_id, always=always)
                else:
                    await wolf.deny(session_id, entry.interrupt_id, reason=reason)
            except ValueError as exc:
                raise ApiError(409, str(exc), code="interrupt_not_pending") from None
        return Where(Cursor(offset - 1), status.turn_id)
    text = _prompt_of(inp)
    if status.state in ("running", "waiting_approval") and status.turn_id is not None:
        running = await turns.started(wolf, turns.TurnRef(session_id, status.turn_id))
        if running is None or turns.same_prompt(running.prompt, text):  # a reconnect: stream that turn
            start = running.ref.base if running else await wolf.event_offset(session_id)
            return Where(Cursor(start - 1), status.turn_id)
        if status.state == "waiting_approval":  # queued, it would wait unseen behind the interrupts
            raise ApiError(
                409,
                f"thread {session_id!r} waits for approvals: answer them (`resume`) before a new message",
                code="approval_pending",
            )
    offset = await wolf.event_offset(session_id)  # a new message: a turn of its own (queued, if busy)
    try:
        turn = await wolf.prompt(session_id, text)
    except WorkflowUpdateFailedError as exc:
        refusal = str(getattr(exc.cause, "message", None) or "the session refused it")
        raise ApiError(
            409, f"thread {session_id!r} did not take the message: {refusal}", code="busy"
        ) from None
    except RPCError as exc:
        log.warning("thread %r did not take a prompt: %s", session_id, exc)
        raise ApiError(
            503,
            f"thread {session_id!r} did not take the message; send it again shortly",
            "server_error",
            "busy",
            {"Retry-After": "1"},
        ) from None
    return Where(Cursor(offset - 1), turn)


def _answer(status: str, payload: Any) -> tuple[bool, bool, str | None]:
    """(approved, always, reason) from a resume entry."""
    if status == "cancelled":
        return False, False, "cancelled"
    if isinstance(payload, dict):
        reason = payload.get("reason")
        return (
            bool(payload.get("approved", True)),
            bool(payload.get("always", False)),
            reason if isinstance(reason, str) else None,
        )
    return payload is None or bool(payload), False, None


@session_errors("thread")
async def run_agent(request: Request) -> Response:
    principal, served = principal_of(request), served_of(request)
    body = await json_body(request)
    try:
        inp = RunAgentInput.model_validate(body)
    except ValidationError as exc:
        raise ApiError(
            400,
            f"not an AG-UI RunAgentInput: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}",
            code="invalid_run_input",
        ) from None
    target = await served.resolve(principal, request.path_params["agent"])
    wolf = served.wolf(principal)
    resume_from = request.headers.get("last-event-id")
    if resume_from:
        try:
            where = Where.parse(resume_from)
        except ValueError as exc:
            raise ApiError(400, str(exc), code="invalid_last_event_id") from None
        await session_of(wolf, target, inp.thread_id)
        started = False
    else:
        where, started = await _begin(wolf, target, inp), True
    ctx = Context(thread_id=inp.thread_id, run_id=inp.run_id, session_id=inp.thread_id)
    return EventSourceResponse(
        _stream(wolf, ctx, where, started),
        ping=PING,
        sep="\n",
        ping_message_factory=lambda: ServerSentEvent(comment="ping", sep="\n"),
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", "X-Wolf-Session": inp.thread_id},
    )


def routes() -> list[BaseRoute]:
    return [Route("/agui/{agent:path}", run_agent, methods=["POST"])]
