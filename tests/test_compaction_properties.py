"""Property: whatever the transcript (parallel tool calls, repeated call ids, retries, steers,
interrupted turns) and wherever compaction cuts or folds, the working context never holds a tool
call without its result or a result without its call, never compacts the current turn or a loaded
skill, and a fold keeps every call and result it folds."""

from __future__ import annotations

from collections import Counter
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from agentwolf.workflows import compaction
from agentwolf.workflows.archive import ARCHIVED, fold_text, let_go
from agentwolf.workflows.compaction import (
    ContextSizes,
    ContextView,
    Rendered,
    chars,
    cut_tool_outputs,
    plan,
    turn_starts,
    working_context,
)

TOOLS = ["echo", "big", "load_skill", "recall"]


@st.composite
def step(draw: st.DrawFn, turn: int, index: int) -> tuple[ModelResponse, list[ModelRequestPart]]:
    """A response with parallel calls (ids may repeat) and the results, retries and steers after it."""
    count = draw(st.integers(1, 4))
    calls = [
        ToolCallPart(
            draw(st.sampled_from(TOOLS)),
            {"n": i},
            tool_call_id=draw(st.sampled_from([f"c{turn}.{index}.{i}", "dup"])),
        )
        for i in range(count)
    ]
    answers: list[ModelRequestPart] = []
    for call in calls:
        size = draw(st.sampled_from([10, 500, 3000]))
        if draw(st.integers(0, 5)) == 0:
            answers.append(
                ToolReturnPart(
                    call.tool_name, "bad arguments", tool_call_id=call.tool_call_id, outcome="retried"
                )
            )
        else:
            answers.append(ToolReturnPart(call.tool_name, "r" * size, tool_call_id=call.tool_call_id))
    steers = draw(st.lists(st.sampled_from(["steer", "also this"]), max_size=2))
    return ModelResponse(parts=[TextPart("thinking aloud"), *calls]), [
        *answers,
        *(UserPromptPart(s) for s in steers),
    ]


@st.composite
def transcripts(draw: st.DrawFn) -> list[ModelMessage]:
    messages: list[ModelMessage] = []
    for turn in range(draw(st.integers(1, 6))):
        messages.append(ModelRequest(parts=[UserPromptPart(f"turn {turn}")]))
        for index in range(draw(st.integers(0, 3))):
            response, answers = draw(step(turn, index))
            messages.append(response)
            messages.append(ModelRequest(parts=answers))
        if draw(st.booleans()):  # answered; else interrupted after its last results
            messages.append(ModelResponse(parts=[TextPart(f"answer {turn}")]))
    return messages


def assert_paired(context: list[ModelMessage]) -> None:
    for i, message in enumerate(context):
        if isinstance(message, ModelResponse):
            calls = Counter(p.tool_call_id for p in message.parts if isinstance(p, ToolCallPart))
            if not calls:
                continue
            following = context[i + 1] if i + 1 < len(context) else None
            assert isinstance(following, ModelRequest), "a call without its result"
            answered = Counter(
                p.tool_call_id for p in following.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))
            )
            assert answered == calls
        else:
            answers = [p for p in message.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))]
            if answers:
                before = context[i - 1] if i else None
                assert isinstance(before, ModelResponse), "a result without its call"


@settings(max_examples=1000, deadline=None)
@given(transcripts(), st.data())
def test_no_working_context_separates_a_call_from_its_result(messages, data):
    assert_paired(messages)  # the generator's own transcripts are valid

    sizes = ContextSizes()

    def measure(view: ContextView) -> int:  # as workflow code measures: each message's size once
        measured = sizes.chars(messages, view, 65_536)
        assert measured == chars(working_context(messages, view), 65_536)  # the context's, exactly
        return measured // 4

    view = ContextView()
    whole = measure(view)
    fold_at = data.draw(st.integers(2, 40))  # the transcripts are short: fold them at small counts
    bounds = mock.patch.multiple(compaction, FOLD_AT=fold_at, FOLD_TO=data.draw(st.integers(1, fold_at)))
    for _ in range(data.draw(st.integers(1, 4))):
        limit = data.draw(st.integers(0, max(whole, 1)))
        force = data.draw(st.booleans())
        with bounds:
            decided = plan(messages, view, measure, limit, limit // 2, force=force, may_fold=lambda: True)
        if decided is None:
            break
        if decided.folded:  # every call and result folded is in the note, as the model saw it
            folded = working_context(messages, view.model_copy(update={"fold_before": 0}))
            note = working_context(messages, decided.view)[0].parts[-1]
            assert isinstance(note, UserPromptPart) and isinstance(note.content, str)
            start = int(bool(view.summary))  # after the summary's note
            for message in folded[start : start + decided.view.fold_before - view.summary_upto]:
                for part in message.parts:
                    if isinstance(part, (ToolCallPart, ToolReturnPart)):
                        assert part.tool_call_id in note.content
                        if isinstance(part, ToolReturnPart):
                            assert part.model_response_str() in note.content
        view = decided.view.model_copy(
            update={"summary": "summary" if decided.summarize else decided.view.summary}
        )
        context = working_context(messages, view)
        assert_paired(context)
        assert isinstance(context[0], ModelRequest)
        # The current prompt is never compacted, nor is the latest step (its results stay whole).
        latest = turn_starts(messages)[-1]
        tail = len(messages) - latest
        assert context[-tail:][0] is messages[latest]
        assert context[-1] is messages[-1] or not isinstance(messages[-1], ModelRequest)
        kept = [
            p
            for m in context
            for p in m.parts
            if isinstance(p, ToolReturnPart) and p.tool_name == "load_skill"
        ]
        assert not any("put aside" in p.content for p in kept)  # loaded skills are never stubbed


def _texts(context: list[ModelMessage]) -> list[list[str]]:
    """A context's content, without the notes' timestamps (which follow the first message held)."""
    return [[str(getattr(p, "content", getattr(p, "args", ""))) for p in m.parts] for m in context]


@settings(max_examples=300, deadline=None)
@given(transcripts(), st.data())
def test_archiving_changes_nothing_the_model_is_sent(messages, data):
    """Whatever the view (summary, fold and stubs where compaction may put them), archive what the
    workflow would (workflows/archive.py): the working context the worker builds from its copy
    without those messages, and the size the workflow measures, are the same as before; the
    workflow's fold text is the worker's."""
    starts = [0, *turn_starts(messages)]
    summary_upto = data.draw(st.sampled_from(starts))
    view = ContextView(
        summary_upto=summary_upto,
        summary="summary" if summary_upto else "",
        fold_before=data.draw(st.sampled_from([0, *(c for c in starts if c >= summary_upto)])),
        stub_before=data.draw(st.integers(0, len(messages))),
    )
    end = min(view.first_sent, max(view.stub_before, view.summary_upto), len(messages))
    if end <= 0:
        return
    limit = data.draw(st.sampled_from([1000, 65_536]))  # 1000: long results (a loaded skill's too) cut
    before = working_context(messages, view, cut_tool_outputs(list(messages), limit), Rendered())
    fold = (
        fold_text(messages, view, 0, end, cut_tool_outputs(list(messages[:end]), limit))
        if view.summary_upto < end
        else ""
    )
    archived = view.model_copy(update={"archived": end})
    held, sent, rendered = list(messages), cut_tool_outputs(list(messages), limit), Rendered()
    working_context(held, view, sent, rendered)  # the worker's lines, built before it lets go
    gone = let_go(held, sent, rendered, archived)
    assert gone == messages[:end] and all(m is ARCHIVED for m in held[:end])
    assert rendered.archived_fold == fold
    after = working_context(held, archived, sent, rendered)
    assert _texts(after) == _texts(before)
    if limit == 65_536:  # nothing cut: the workflow's measure is exact
        assert ContextSizes().chars(held, archived, limit, fold) == chars(after, limit)
