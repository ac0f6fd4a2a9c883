"""Property: wherever a rewind (and a redo after it) or a fork cuts a compacted transcript (stubbed,
summarised, folded), the next prompt reaches the model as a prompt: the last request of the working
context, never a line of the fold's "earlier turns, not a new request" note; and the step after it
as messages."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from agentwolf.workflows.compaction import ContextSizes, ContextView, chars, turn_starts, working_context
from agentwolf.workflows.session import branches
from agentwolf.workflows.session.cuts import cut, fork_input
from agentwolf.workflows.session_input import SessionInput, TurnMark
from agentwolf.workflows.types import Counters
from tests.conftest import make_manifest
from tests.test_compaction_properties import assert_paired, transcripts

PROMPT = "the new prompt"


def marks(messages: list[ModelMessage]) -> list[TurnMark]:
    """The turn marks the session would have recorded: each turn from its prompt to the next one."""
    starts = turn_starts(messages)
    return [
        TurnMark(
            turn_id=f"turn-{n}",
            start=start,
            end=(starts[n] if n < len(starts) else len(messages)),
            counters=Counters(turns=n, turn_seq=n, steps=n),
        )
        for n, start in enumerate(starts, 1)
    ]


@st.composite
def views(draw: st.DrawFn, messages: list[ModelMessage]) -> ContextView:
    """A view compaction may reach: a summary and a fold at turn starts, stubs anywhere."""
    starts = turn_starts(messages)
    summary_upto = draw(st.sampled_from([0, *starts]))
    return ContextView(
        summary_upto=summary_upto,
        summary="summary" if summary_upto else "",
        fold_before=draw(st.sampled_from([c for c in starts if c >= summary_upto] or [0])),
        stub_before=draw(st.integers(0, len(messages))),
        pinned=draw(st.sampled_from([[], ["pinned"]])),
    )


def cut_line(
    messages: list[ModelMessage], view: ContextView, data: st.DataObject
) -> tuple[list[ModelMessage], ContextView] | None:
    """The transcript and view after a rewind or a fork, as the session and `wolf fork` make them."""
    turns = marks(messages)
    turn = data.draw(st.integers(1, len(turns)))
    how = data.draw(st.sampled_from(["rewind", "redo", "fork", "step", "edit"]))
    if how in ("rewind", "redo"):
        if turn == len(turns):  # the session is there already
            return None
        line = branches.Line(list(messages), list(turns), [], view)
        for to in [str(turn), "branch-1"] if how == "redo" else [str(turn)]:
            branches.apply(line, branches.plan(line.transcript, line.turns, line.branches, to), None)
        return line.transcript, line.view
    mark = turns[turn - 1]
    steps = sum(isinstance(m, ModelResponse) for m in messages[mark.start : mark.end])
    if how == "step" and not steps:
        return None
    step = data.draw(st.integers(1, steps)) if how == "step" else None
    source = SessionInput(
        session_id="s", agent="a", manifest=make_manifest(), transcript=messages, turns=turns, context=view
    )
    fork = fork_input(source, cut(messages, turns, turn, step, edit=how == "edit"), "f")
    assert fork.context is not None
    return fork.transcript, fork.context


@settings(max_examples=500, deadline=None)
@given(transcripts(), st.data())
def test_after_any_cut_the_next_prompt_is_sent_as_a_prompt(messages, data):
    view = data.draw(views(messages))
    done = cut_line(messages, view, data)
    if done is None:
        return
    transcript, clamped = done
    prompt = ModelRequest(parts=[UserPromptPart(PROMPT)])
    after = [*transcript, prompt]
    context = working_context(after, clamped)
    assert context[-1] is prompt, "the new prompt went into a note"
    assert not any(
        PROMPT in str(getattr(p, "content", "")) for m in context[:-1] for p in m.parts
    )  # and nowhere else

    # The step it starts: its call and result are messages, not lines of the note.
    call = ModelResponse(parts=[ToolCallPart("echo", {"n": 1}, tool_call_id="new")])
    result = ModelRequest(parts=[ToolReturnPart("echo", "r" * 500, tool_call_id="new")])
    context = working_context([*after, call, result], clamped)
    assert context[-3:] == [prompt, call, result] and context[-3] is prompt
    assert_paired(context)
    measured = ContextSizes().chars([*after, call, result], clamped, 65_536)
    assert measured == chars(context, 65_536)
