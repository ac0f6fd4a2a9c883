"""Where a session's transcript may be cut, and what a cut leaves behind: forks and rewinds.

A cut falls on a whole turn (`4`: after turn-4) or a whole step inside one (`4.2`: after its second
step, its tool results included), never between a tool call and its result. The session records
each turn's place in its transcript and its counters once it ended (`TurnMark`), so a cut needs no
re-execution and no guess. What ran after the cut and was not read-only or idempotent is the
effect ledger: a fork or rewind leaves those effects in the world, and says so.

Pure data: the session workflow records marks with `mark_start`/`mark_end`; clients cut.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolReturnPart,
)

from agentwolf.workflows.compaction import ContextView
from agentwolf.workflows.contracts import SESSION, SKILLS, CompiledAgent, ToolOutcome
from agentwolf.workflows.memory_tools import MemoryView, fork_view
from agentwolf.workflows.session_input import SessionInput, TurnMark
from agentwolf.workflows.types import Counters, Prompt, Usage, workflow_id
from agentwolf.workflows.workspace_tools import WORKSPACE, line_turns

POINT = re.compile(r"^(?:turn-)?(\d+)(?:\.(\d+))?$")
RAN = (ToolOutcome.SUCCESS, ToolOutcome.FAILED)
"""Outcomes of calls that reached their tool (a denied or interrupted call did nothing)."""
READ_ONLY_SERVERS = (SESSION, SKILLS)
"""Tools the workflow itself answers from what it holds (read_tool_output, recall, skills)."""


class CutError(ValueError):
    """A cut that cannot be made; the message names the valid points."""


def mark_start(turn_id: str, start: int, config_version: int | None) -> TurnMark:
    return TurnMark(turn_id=turn_id, start=start, config_version=config_version)


def mark_end(turns: list[TurnMark], turn_id: str, end: int, counters: Counters) -> None:
    """Close the running turn's mark (a turn resumed from before marks were recorded has none)."""
    if turns and turns[-1].turn_id == turn_id:
        turns[-1].end = end
        turns[-1].counters = counters.model_copy(deep=True)


class Effect(BaseModel):
    """A tool call after a cut that may have changed the world (not read-only or idempotent)."""

    turn_id: str | None
    step: int
    tool: str
    args: dict[str, Any]
    call_id: str
    outcome: str
    contained: bool = Field(False, exclude_if=lambda v: not v)
    """A workspace tool's: its changes stayed in the sandbox, and the cut's side of the line gets the
    workspace as of its turn (only what a command sent over an allowed network stays done)."""


class Fork(BaseModel):
    """A fork made: its id, where it was cut, and the effects after the cut it does not undo."""

    session_id: str
    source: str
    point: str
    messages: int
    """Messages of the source's transcript the fork starts with."""
    effects: list[Effect]


@dataclass(frozen=True)
class Cut:
    """A cut of `source`: the fork's transcript is `prefix`; what follows in the source from `rest`."""

    point: str
    """As said to users: `turn-4` or `turn-4.2`."""
    prefix: list[ModelMessage]
    rest: int
    """The source's transcript index where what the cut leaves out starts."""
    turns: list[TurnMark]
    counters: Counters
    config_version: int | None
    edit_turn: str | None = None
    """With an edit: the turn id the new prompt takes (it replaces that turn's prompt)."""


def parse_point(text: str) -> tuple[int, int | None]:
    """`4`, `turn-4` or `4.2` -> (turn number, step or None)."""
    match = POINT.match(text.strip())
    if match is None:
        raise CutError(f"invalid fork point {text!r}: say TURN or TURN.STEP, as in 4 or 4.2")
    return int(match[1]), int(match[2]) if match[2] else None


def cut(
    transcript: list[ModelMessage],
    turns: list[TurnMark],
    turn: int | None,
    step: int | None = None,
    *,
    edit: bool = False,
) -> Cut:
    """The cut of a session's `transcript` after `turn` (default: its last finished one), or after
    that turn's `step`; with `edit`, before `turn`, whose prompt a new one replaces."""
    finished = [m for m in turns if m.end is not None]
    if not turns:
        raise CutError("this session has no recorded turns to cut at (turns are recorded from 2026-12 on)")
    valid = ", ".join(m.turn_id.removeprefix("turn-") for m in finished) or "none yet"
    if turn is None:
        if not finished:
            raise CutError("this session has no finished turn yet: fork at TURN.STEP")
        turn = int(finished[-1].turn_id.removeprefix("turn-"))
    index = next((i for i, m in enumerate(turns) if m.turn_id == f"turn-{turn}"), None)
    if index is None:
        raise CutError(f"no turn {turn} in this session's record (finished turns: {valid})")
    mark, before = turns[index], turns[:index]
    if edit:
        if step is not None:
            raise CutError("--edit replaces a turn's prompt: give --at TURN without a step")
        return Cut(
            point=f"{mark.turn_id} (edited)",
            prefix=transcript[: mark.start],
            rest=mark.start,
            turns=before,
            counters=_counters_before(before, mark).model_copy(update={"turn_seq": turn}),
            config_version=mark.config_version,
            edit_turn=mark.turn_id,
        )
    if step is None:
        if mark.end is None or mark.counters is None:
            raise CutError(f"{mark.turn_id} has not finished: cut at {turn}.STEP or at {valid}")
        return Cut(
            point=mark.turn_id,
            prefix=transcript[: mark.end],
            rest=mark.end,
            turns=[*before, mark],
            counters=mark.counters,
            config_version=mark.config_version,
        )
    return _cut_at_step(transcript, mark, before, turn, step)


def _cut_at_step(
    transcript: list[ModelMessage], mark: TurnMark, before: list[TurnMark], turn: int, step: int
) -> Cut:
    """After step `step` of `mark`'s turn: its response, and the results of the calls it asked for."""
    end = mark.end if mark.end is not None else len(transcript)
    responses = [i for i in range(mark.start, end) if isinstance(transcript[i], ModelResponse)]
    whole = [f"{turn}.{n}" for n in range(1, len(responses) + 1)]
    if not 1 <= step <= len(responses):
        raise CutError(f"{mark.turn_id} has no step {step} (its steps: {', '.join(whole) or 'none'})")
    at = responses[step - 1]
    response = transcript[at]
    assert isinstance(response, ModelResponse)
    prefix = transcript[: at + 1]
    rest = at + 1
    if response.tool_calls:
        following = transcript[at + 1] if at + 1 < len(transcript) else None
        results = [
            p for p in getattr(following, "parts", []) if isinstance(p, (ToolReturnPart, RetryPromptPart))
        ]
        if len(results) < len(response.tool_calls) or not isinstance(following, ModelRequest):
            done = ", ".join(whole[: step - 1]) or "none"
            raise CutError(f"step {turn}.{step} still waits for its tool results (finished steps: {done})")
        prefix.append(ModelRequest(parts=results, timestamp=following.timestamp))
        rest = at + 2
    base = _counters_before(before, mark)
    taken = [m for m in prefix[mark.start :] if isinstance(m, ModelResponse)]
    usage = Usage(
        requests=len(taken),
        input_tokens=sum(m.usage.input_tokens or 0 for m in taken),
        output_tokens=sum(m.usage.output_tokens or 0 for m in taken),
        tool_calls=sum(len(m.tool_calls) for m in taken),
    )
    counters = base.model_copy(
        update={
            "turns": base.turns + 1,
            "turn_seq": turn,
            "steps": base.steps + step,
            "usage": base.usage.plus(usage),
        },
        deep=True,
    )
    partial = mark.model_copy(update={"end": len(prefix), "counters": counters})
    return Cut(
        point=f"{mark.turn_id}.{step}",
        prefix=prefix,
        rest=rest,
        turns=[*before, partial],
        counters=counters,
        config_version=mark.config_version,
    )


def _counters_before(before: list[TurnMark], mark: TurnMark) -> Counters:
    if not before:
        if mark.start:
            raise CutError(f"the turns before {mark.turn_id} were recorded before turn marks: cut later")
        return Counters()
    last = before[-1].counters
    if last is None:
        raise CutError(f"{before[-1].turn_id} never finished: cut elsewhere")
    return last


def effect_ledger(
    transcript: list[ModelMessage], turns: list[TurnMark], compiled: CompiledAgent | None, rest: int
) -> list[Effect]:
    """The calls that ran after index `rest` of a session's transcript and are not read-only or
    idempotent (as the compiled agent's tools say: MCP annotations or the manifest's `repeat_safe`;
    a tool it no longer lists counts as a side effect)."""
    safe = _repeat_safe(compiled)
    workspace = {t.name for t in compiled.tools if t.server == WORKSPACE} if compiled else set()
    results: dict[str, list[ToolReturnPart]] = {}
    for message in transcript[rest:]:
        for part in getattr(message, "parts", []):
            if isinstance(part, ToolReturnPart):
                results.setdefault(part.tool_call_id, []).append(part)
    effects: list[Effect] = []
    for index in range(rest, len(transcript)):
        message = transcript[index]
        if not isinstance(message, ModelResponse):
            continue
        turn = next((m for m in reversed(turns) if m.start <= index), None)
        start = turn.start if turn else 0
        step = sum(isinstance(m, ModelResponse) for m in transcript[start : index + 1])
        for call in message.tool_calls:
            returned = results.get(call.tool_call_id)
            result = returned.pop(0) if returned else None
            if result is None or result.outcome not in RAN or call.tool_name in safe:
                continue
            effects.append(
                Effect(
                    turn_id=turn.turn_id if turn else None,
                    step=step,
                    tool=call.tool_name,
                    args=call.args_as_dict(),
                    call_id=call.tool_call_id,
                    outcome=str(result.outcome),
                    contained=call.tool_name in workspace,
                )
            )
    return effects


def _repeat_safe(compiled: CompiledAgent | None) -> set[str]:
    if compiled is None:
        return set()
    return {t.name for t in compiled.tools if t.repeat_safe or t.server in READ_ONLY_SERVERS}


def fork_input(source: SessionInput, at: Cut, session_id: str, *, edit: str | None = None) -> SessionInput:
    """The start input of a fork: the snapshot a continue-as-new would hand over, cut at `at`. The
    compiled agent goes along when the config version is the source's current one (the fork's
    first turn needs no compile) and names none of the source's own MCP servers (the fork has none
    of them); an edit waits in the queue as the replaced turn's prompt. Neither the source's own
    servers nor its "always allowed" tools are carried (client/forks.py says why)."""
    same = at.config_version == source.config_version and not source.session_servers
    view = clamp_view(source.context, len(at.prefix)) if source.context else None
    queue = [Prompt(turn_id=at.edit_turn, text=edit)] if edit is not None and at.edit_turn else []
    return SessionInput(
        session_id=session_id,
        tenant=source.tenant,
        agent=source.agent,
        manifest=source.manifest,
        idle_close_after=source.idle_close_after,
        depth=source.depth,
        config_name=source.config_name,
        config_version=at.config_version,
        pinned=source.pinned,
        output_schema=source.output_schema,
        transcript=at.prefix,
        compiled=source.compiled if same else None,
        counters=at.counters.model_copy(update={"continued_as_new": 0}),
        queue=queue,
        turns=at.turns,
        context=view,
        workspace=source.workspace.forked(line_turns([m.turn_id for m in at.turns], mid_turn(at)))
        if source.workspace
        else None,
        memory_view=_memory_view(source, at, session_id),
    )


def mid_turn(at: Cut) -> str | None:
    """The turn a cut at a step falls inside (`turn-4` for `turn-4.2`), else None."""
    return at.turns[-1].turn_id if "." in at.point and at.turns else None


def _memory_view(source: SessionInput, at: Cut, session_id: str) -> MemoryView:
    """What the fork sees of long-term memory: the source's as of the cut (workflows/session/memory.py)."""
    seen: dict[str, int] = {}
    for mark in at.turns:
        seen |= mark.memory or {}
    included = int(at.turns[-1].turn_id.removeprefix("turn-")) if at.turns else 0
    source_wid, wid = workflow_id(source.tenant, source.session_id), workflow_id(source.tenant, session_id)
    return fork_view(source.memory_view, source_wid, seen, included, wid)


def clamp_view(view: ContextView, length: int, *, whole: bool = True) -> ContextView:
    """The working context's view of a transcript cut to `length` messages: every index in it ends
    within the cut. Stubs, a summary and a fold that lie within it stay (the cut prefix is seen as it
    was); a fold that reached past it ends at the cut, so the next prompt, which starts a turn there,
    is sent as a prompt, not as a line of the "earlier turns" note. Pinned notes stay.
    `whole=False`: stubs and summary only, as rewinds clamped before `REWIND_VIEW` (for replay)."""
    keep_summary = view.summary_upto <= length
    folds = {"fold_before": min(view.fold_before, length), "archived": min(view.archived, length)}
    return view.model_copy(
        update={
            "stub_before": min(view.stub_before, length),
            "summary_upto": view.summary_upto if keep_summary else 0,
            "summary": view.summary if keep_summary else "",
            **(folds if whole else {}),
        }
    )
