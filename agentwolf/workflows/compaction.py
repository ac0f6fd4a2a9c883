"""The working context: what a model request sends, derived from the session's whole transcript by a
small recorded `ContextView`. The transcript is never edited (clients, forks and evals read it
whole); compaction only moves the view forward, so replays, forks and the worker that sends the
request all derive the same context from the same two things.

Two tiers, the cheaper first: old tool results become stubs the model can `recall`, then older
turns become one summary (a recorded model request). Cuts fall where a turn starts (a request with
a user prompt and no tool results), so a tool call and its result are never separated; the
instructions, loaded skills, pinned notes and the current turn are never compacted.

Apart from tokens, the number of messages sent is bounded too: provider clients build a request
item by item (the OpenAI SDK's request transform took 2-4 ms per input item here), so a long tail of
small stubbed turns slowed every request. Past `FOLD_AT` messages, older turns are folded: sent as
one text note holding the same content (stubs stay stubs), derived from the transcript like the
rest of the view, so folding needs no model request and loses nothing.

Pure, like session/turn.py: imported passed through, no `workflow.*`, no clock, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

COMPACTION = "context-compaction"  # patch: the working context is compacted before it overflows the window
FOLDING = "context-folding"  # patch: older turns are folded into one note past FOLD_AT messages
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
COMPACT_AT = 0.8
TARGET = 0.5
"""Compaction aims at this share of the window, so the next steps do not compact again at once."""
STUB_MIN = 400
"""Tool results shorter than this stay whole: a stub would save little."""
KEPT_TOOLS = frozenset({"load_skill", "read_skill_file"})
"""Their results are the loaded skills' instructions: never stubbed."""
SUMMARY_TOKENS = 1500
"""Room a summary is planned with, before its text is known."""
MAX_MESSAGES = 160
"""A working context sending more messages is summarised down to half as many, whatever its
tokens (since folding, only a current turn this long can). Like every constant here it decides what
workflow code does: a change is gated by a patch."""
FOLD_AT = 64
"""A working context sending more messages than this folds older turns into one note..."""
FOLD_TO = 16
"""...until at most this many are sent as messages (or only the current turn, if it is longer).
Like every constant here, both decide what workflow code does: a change is gated by a patch."""
CHARS_PER_TOKEN = 4
MESSAGE_CHARS = 16
"""A message's own cost (role, separators), in characters."""
CUT_NOTE_CHARS = 160
RECALL = "recall"
CONTEXT_LENGTH_EXCEEDED = "ContextLengthExceeded"
"""The error type of a model request the provider refused as too long (details: the window, if named)."""

SUMMARY_INSTRUCTIONS = """\
You compact an agent's conversation so it can continue with less context. Write a summary that \
the agent will read instead of the earlier conversation. Keep, precisely and in past tense: the \
user's goals and every correction or preference the user stated (verbatim where short); decisions \
made and why; facts, names, identifiers, numbers, paths and URLs that were found; what was tried \
and failed; open tasks and next steps. Drop chit-chat and anything superseded. Tool results that \
were put aside can be read again with recall(call_id, offset, message): name the call ids of \
results that matter. Answer with the summary only, at most about 800 words."""

SUMMARY_NOTE = (
    "<context-summary>\nEarlier turns of this conversation, summarised (they happened before; "
    "this is not a new request):\n{}\n</context-summary>"
)
PINNED_NOTE = "Pinned by the user (always in force, whatever was said since):\n{}"
FOLD_NOTE = (
    "<earlier-turns>\nEarlier turns of this conversation, as a record (they happened before; this "
    "is not a new request; call tools as usual, never by writing them as text):\n{}"
)


class ContextView(BaseModel):
    """How the working context differs from the transcript; carried over continue-as-new."""

    stub_before: int = 0
    """Tool results in messages before this index reach the model as stubs that `recall` reads."""
    summary_upto: int = 0
    """Messages before this index (a turn's start) reach the model as `summary`."""
    summary: str = ""
    fold_before: int = 0
    """Messages from `summary_upto` to this index (a turn's start) reach the model as one note."""
    pinned: list[str] = []
    """Notes the user pinned: sent with the instructions in every request."""
    window: int | None = None
    """The window a provider's context-length error told (wins over the compiled agent's)."""
    compactions: int = 0
    archived: int = 0
    """Messages before this index are in the payload store, not in memory (workflows/archive.py):
    they are summarised, or folded and stubbed for good, and the fold's lines of those not summarised
    are one text (`Rendered.archived_fold`; the workflow's `TranscriptArchive.fold`)."""

    @property
    def live_from(self) -> int:
        """The first message the working context reads whole (those before are summary or text)."""
        return max(self.summary_upto, self.archived)

    @property
    def plain(self) -> bool:
        """The working context is the transcript itself (nothing stubbed, summarised or pinned)."""
        return not (self.stub_before or self.summary_upto or self.fold_before or self.pinned)

    @property
    def first_sent(self) -> int:
        """The first message sent as a message (those before are summarised or folded)."""
        return max(self.summary_upto, self.fold_before)


@dataclass(frozen=True)
class Plan:
    """A compaction decided: the view to move to (tier 2: once `summarize` is summarised)."""

    view: ContextView
    tier: Literal[1, 2]
    """1: results stubbed or older turns folded (no model request), 2: older turns summarised."""
    before: int
    after: int
    """Estimated tokens before and after (tier 2: with room for the summary)."""
    summarize: tuple[int, int] | None = None
    """Tier 2: the messages [start, end) the summary replaces (the old summary goes in too)."""
    folded: bool = False
    """Older turns folded into one note (tier 1, the tokens about the same)."""

    @property
    def what(self) -> str:
        if self.summarize is not None:
            return "older turns summarised"
        return "older turns folded into one note" if self.folded else "old tool results put aside"


@dataclass
class Rendered:
    """Stubs and fold lines built for a transcript, by message index: a worker keeps them with its
    copy of a session's transcript (append-only, so an index always means the same message), and
    builds each only once instead of for every request of a long session."""

    stubbed: dict[int, ModelMessage] = field(default_factory=dict)
    lines: dict[tuple[int, bool], list[str]] = field(default_factory=dict)
    """(index, stubbed) -> the message's parts as lines of the fold."""
    archived: int = 0
    """Messages before this index are archived: `ARCHIVED` in the lists, their lines in `archived_fold`."""
    archived_fold: str = ""
    """The fold's lines of the archived messages not summarised (`ContextView.archived`), as one text."""


def working_context(
    messages: Sequence[ModelMessage],
    view: ContextView,
    shown: Sequence[ModelMessage] | None = None,
    rendered: Rendered | None = None,
) -> list[ModelMessage]:
    """What the model is sent: `shown` (the transcript as cut for the model; default `messages`)
    from `summary_upto` on, stubbed before `stub_before`, after the summary, those before
    `fold_before` as one note. Stubs and their sizes come from `messages`, the whole results.
    `rendered`: stubs and lines built before for these messages (and kept for the next time)."""
    shown = messages if shown is None else shown
    rendered = Rendered() if rendered is None else rendered
    out: list[ModelMessage] = []
    notes: list[UserPromptPart] = []
    live = view.live_from
    # A fixed time for the notes: workflow code runs this.
    at = (messages[live].timestamp or EPOCH) if live < len(messages) else EPOCH
    if view.summary and view.summary_upto < len(messages):
        notes.append(UserPromptPart(SUMMARY_NOTE.format(view.summary), timestamp=at))
    shown_view = [_shown(messages, shown, view, i, rendered) for i in range(live, len(messages))]
    folded = min(view.first_sent, len(messages)) - live
    archived_fold = rendered.archived_fold if view.summary_upto < view.archived else ""
    if folded > 0 or archived_fold:
        lines = [archived_fold] if archived_fold else []
        lines += [
            line
            for i, m in enumerate(shown_view[: max(folded, 0)], live)
            for line in _lines(m, (i, m is not shown[i]), rendered)
        ]
        notes.append(UserPromptPart(FOLD_NOTE.format("\n".join(lines)), timestamp=at))
    if notes:
        out.append(ModelRequest(parts=notes, timestamp=at))
    out.extend(shown_view[max(folded, 0) :])
    return out


def _shown(
    messages: Sequence[ModelMessage],
    shown: Sequence[ModelMessage],
    view: ContextView,
    i: int,
    rendered: Rendered | None = None,
) -> ModelMessage:
    message = shown[i]
    if not (i < view.stub_before and isinstance(message, ModelRequest)):
        return message
    if rendered is None:
        return _stubbed(messages[i], message, i)  # type: ignore[arg-type]
    stub = rendered.stubbed.get(i)
    if stub is None:
        stub = rendered.stubbed[i] = _stubbed(messages[i], message, i)  # type: ignore[arg-type]
    return stub


def _lines(message: ModelMessage, key: tuple[int, bool], rendered: Rendered) -> list[str]:
    lines = rendered.lines.get(key)
    if lines is None:
        lines = rendered.lines[key] = [_line(p, clip=None) for p in message.parts]
        if key[1]:  # stubbed from now on (views only move forward): its whole results are not needed again
            rendered.lines.pop((key[0], False), None)
    return lines


def instructions(base: str, view: ContextView | None) -> str:
    """The agent's instructions with the pinned notes (never compacted: sent with every request)."""
    if view is None or not view.pinned:
        return base
    pinned = PINNED_NOTE.format("\n".join(f"- {note}" for note in view.pinned))
    return f"{base}\n\n{pinned}" if base else pinned


def _stubbed(whole: ModelRequest, shown: ModelRequest, index: int) -> ModelRequest:
    ids = Counter(p.tool_call_id for p in whole.parts if isinstance(p, ToolReturnPart))
    parts = list(shown.parts)
    changed = False
    for j, part in enumerate(whole.parts):
        if stubbable(part):
            assert isinstance(part, ToolReturnPart)
            where = f"message={index}" + (f", part={j}" if ids[part.tool_call_id] > 1 else "")
            size = len(part.model_response_str())
            text = (
                f"[tool result of call {part.tool_call_id!r} ({part.tool_name}, {size} characters), put "
                f"aside to save context: {RECALL}(call_id={part.tool_call_id!r}, offset=0, {where}) reads it]"
            )
            parts[j] = dataclasses.replace(part, content=text)  # type: ignore[arg-type]
            changed = True
    return dataclasses.replace(shown, parts=parts) if changed else shown


def stubbable(part: object) -> bool:
    return (
        isinstance(part, ToolReturnPart)
        and part.tool_name not in KEPT_TOOLS
        and len(part.model_response_str()) > STUB_MIN
    )


def stubs_any(messages: Sequence[ModelMessage], view: ContextView | None) -> bool:
    """Whether the view stubs a result (then `recall` is offered)."""
    if view is None:
        return False
    if view.summary_upto < view.archived:  # the archived fold holds stubs
        return True
    end = min(view.stub_before, len(messages))
    return any(
        isinstance(m, ModelRequest) and any(stubbable(p) for p in m.parts)
        for m in messages[view.live_from : end]
    )


def chars(messages: Sequence[ModelMessage], tool_output_chars: int) -> int:
    """About how many characters `messages` send (tool results as cut for the model)."""
    return sum(_message_chars(message, tool_output_chars) for message in messages)


def _message_chars(message: ModelMessage, tool_output_chars: int) -> int:
    total = MESSAGE_CHARS
    for part in message.parts:
        if isinstance(part, ToolReturnPart):
            size = len(part.model_response_str())
            total += size if size <= tool_output_chars else tool_output_chars + CUT_NOTE_CHARS
        elif isinstance(part, ToolCallPart):
            total += len(part.tool_name) + len(part.args_as_json_str())
        elif isinstance(part, RetryPromptPart):
            total += len(part.model_response())
        else:
            content = getattr(part, "content", "")
            total += len(content) if isinstance(content, str) else len(str(content))
    return total


class ContextSizes:
    """`chars(working_context(messages, view), tool_output_chars)` without building the context:
    each message's size as sent (whole, stubbed, or as lines of the fold) is computed once. Workflow
    code measures the context several times a step; rebuilding a long transcript's each time (every
    old result stubbed anew) cost more than the request. Valid while `messages` only grows: a cut
    (a rewind) needs a new one (`ContextKeeper.cut`)."""

    def __init__(self) -> None:
        self._limit = 0
        self._sizes: dict[tuple[int, bool, bool], tuple[int, int]] = {}
        """(index, stubbed, folded) -> (characters, lines of the fold)."""

    def chars(
        self,
        messages: Sequence[ModelMessage],
        view: ContextView,
        tool_output_chars: int,
        archived_fold: str = "",
    ) -> int:
        """`archived_fold`: the fold's text of the archived messages (`ContextView.archived`)."""
        if tool_output_chars != self._limit:
            self._limit, self._sizes = tool_output_chars, {}
        total, notes = 0, False
        live = view.live_from
        if view.summary and view.summary_upto < len(messages):
            total, notes = len(SUMMARY_NOTE.format(view.summary)), True
        folded = min(view.first_sent, len(messages))
        archived = len(archived_fold) if view.summary_upto < view.archived and archived_fold else 0
        if folded > live or archived:
            sizes = [self._size(messages, view, i, True) for i in range(live, folded)]
            lines = sum(n for _, n in sizes) + (archived > 0)
            total, notes = (
                total + len(FOLD_NOTE.format("")) + archived + sum(c for c, _ in sizes) + max(lines - 1, 0),
                True,
            )
        total += sum(self._size(messages, view, i, False)[0] for i in range(max(folded, live), len(messages)))
        return total + MESSAGE_CHARS * notes

    def _size(
        self, messages: Sequence[ModelMessage], view: ContextView, i: int, fold: bool
    ) -> tuple[int, int]:
        key = (i, i < view.stub_before and isinstance(messages[i], ModelRequest), fold)
        size = self._sizes.get(key)
        if size is None:
            message = _shown(messages, messages, view, i)
            if fold:
                size = (sum(len(_line(p, clip=None)) for p in message.parts), len(message.parts))
            else:
                size = (_message_chars(message, self._limit), 0)
            self._sizes[key] = size
        return size


def turn_starts(messages: Sequence[ModelMessage], start: int = 0) -> list[int]:
    """Where a cut may fall: requests with a user prompt that answer no tool call. Everything before
    one is whole steps, so neither side of a cut holds a call without its result. `start`: the
    first index looked at."""
    return [
        i
        for i in range(start, len(messages))
        if isinstance(m := messages[i], ModelRequest)
        and any(isinstance(p, UserPromptPart) for p in m.parts)
        and not any(isinstance(p, (ToolReturnPart, RetryPromptPart)) for p in m.parts)
    ]


def latest_step(messages: Sequence[ModelMessage]) -> int:
    """The index of the last model response: it and what follows (the step under way) stay whole."""
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], ModelResponse):
            return i
    return len(messages)


def plan(
    messages: Sequence[ModelMessage],
    view: ContextView,
    measure: Callable[[ContextView], int],
    limit: int,
    target: int,
    force: bool = False,
    until: int | None = None,
    may_fold: Callable[[], bool] | None = None,
) -> Plan | None:
    """The cheapest compaction that brings the context from past `limit` to `target` tokens (by
    `measure`, of the working context under a view), or from past `MAX_MESSAGES` messages to half
    that; `force` (the provider refused the request, or a user asked): shrink even if the estimate
    fits. `until`: summaries end there at the latest (what the worker holds). `may_fold`: asked
    before folding past `FOLD_AT` messages (None: never fold). None: nothing to do, or nothing left
    to compact."""
    before = measure(view)
    crowded = len(messages) - view.first_sent > MAX_MESSAGES
    if before <= limit and not (force or crowded):
        return _fold(messages, view, before) if may_fold and _crowded(messages, view) and may_fold() else None
    tier1 = view.model_copy(update={"stub_before": max(view.stub_before, latest_step(messages))})
    after1 = measure(tier1)
    if after1 < before and after1 <= target and not crowded:
        return Plan(tier1, 1, before, after1)
    placeholder = "x" * (min(SUMMARY_TOKENS, target // 4) * CHARS_PER_TOKEN)
    end = len(messages) if until is None else until
    # Past the archived messages: a summary then covers the archived fold whole (its text goes).
    candidates = [c for c in turn_starts(messages, view.archived) if view.summary_upto < c <= end]
    for i, cut in enumerate(candidates):
        tier2 = tier1.model_copy(update={"summary_upto": cut, "summary": placeholder})
        after2 = measure(tier2)
        fits = after2 <= target and len(messages) - cut <= MAX_MESSAGES // 2
        if fits or i == len(candidates) - 1:
            return Plan(tier2, 2, before, after2, (view.summary_upto, cut))
    if after1 < before:
        return Plan(tier1, 1, before, after1)
    return None


def _crowded(messages: Sequence[ModelMessage], view: ContextView) -> bool:
    return len(messages) - view.first_sent > FOLD_AT


def _fold(messages: Sequence[ModelMessage], view: ContextView, tokens: int) -> Plan | None:
    """Fold older turns into one note, down to `FOLD_TO` messages sent (at least the current turn)."""
    cuts = [c for c in turn_starts(messages, view.first_sent + 1) if c > view.first_sent]
    if not cuts:
        return None
    cut = next((c for c in cuts if len(messages) - c <= FOLD_TO), cuts[-1])
    return Plan(view.model_copy(update={"fold_before": cut}), 1, tokens, tokens, folded=True)


def summary_source(
    messages: Sequence[ModelMessage],
    view: ContextView,
    start: int,
    end: int,
    budget: int,
    archived_fold: str = "",
) -> str:
    """What the summariser reads: the old summary, then messages [start, end) as the model saw them
    (stubs stay stubs), as text of at most `budget` characters (the oldest cut first); those
    archived, as their fold's text (`archived_fold`)."""
    lines: list[str] = [archived_fold] if archived_fold and start < view.archived else []
    for message in working_context(
        messages[:end], view.model_copy(update={"summary_upto": start, "summary": "", "fold_before": 0})
    ):
        lines.extend(_line(part) for part in message.parts)
    body = "\n".join(lines)
    if len(body) > budget:
        body = "[earlier part omitted]\n" + body[len(body) - budget :]
    old = f"Summary of what came before:\n{view.summary}\n\n" if view.summary else ""
    return f"{old}Conversation to summarise:\n{body}"


def _line(part: object, clip: int | None = 2000) -> str:
    """A part as text (`clip`: each call's arguments and result cut to so many characters)."""
    if isinstance(part, UserPromptPart):
        return f"USER: {part.content if isinstance(part.content, str) else str(part.content)}"
    if isinstance(part, ToolCallPart):
        return f"TOOL CALL {part.tool_call_id} {part.tool_name}({part.args_as_json_str()[:clip]})"
    if isinstance(part, ToolReturnPart):
        return f"TOOL RESULT {part.tool_call_id}: {part.model_response_str()[:clip]}"
    if isinstance(part, RetryPromptPart):
        return f"RETRY: {part.model_response()[:clip]}"
    content = getattr(part, "content", "")
    kind = getattr(part, "part_kind", "part")
    return f"ASSISTANT ({kind}): {str(content)[:clip]}" if kind != "text" else f"ASSISTANT: {content}"


def cut_tool_outputs(messages: list[ModelMessage], limit: int, start: int = 0) -> list[ModelMessage]:
    """What the model is sent: tool results longer than `limit` cut, with a note on how to read on (the
    messages with nothing too long are the same objects). The transcript keeps them whole.
    `start`: the first message's position in the transcript, which the note names."""
    out = list(messages)
    for i, message in enumerate(messages):
        if not isinstance(message, ModelRequest) or not any(_too_long(p, limit) for p in message.parts):
            continue
        ids = Counter(p.tool_call_id for p in message.parts if isinstance(p, ToolReturnPart))
        parts = list(message.parts)
        for j, part in enumerate(parts):
            if isinstance(part, ToolReturnPart) and _too_long(part, limit):
                index = j if ids[part.tool_call_id] > 1 else None
                parts[j] = dataclasses.replace(part, content=_cut(part, limit, start + i, index))  # type: ignore[arg-type]
        out[i] = dataclasses.replace(message, parts=parts)
    return out


def _too_long(part: object, limit: int) -> bool:
    return isinstance(part, ToolReturnPart) and isinstance(part.content, str) and len(part.content) > limit


def _cut(part: ToolReturnPart, limit: int, message: int, index: int | None) -> str:
    """The note names the result by call id and its message's position in the transcript (models
    repeat call ids across steps), and by its part's `index` where the id repeats in that message."""
    content = str(part.content)
    where = f"message={message}" + (f", part={index}" if index is not None else "")
    return (
        f"{content[:limit]}\n\n[cut: {limit} of {len(content)} characters shown; read on with "
        f"read_tool_output(call_id={part.tool_call_id!r}, offset={limit}, {where})]"
    )
