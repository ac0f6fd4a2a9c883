"""A long session's older messages out of the worker's memory: in the payload store, by reference.

A session keeps its whole transcript, but the model is sent only the working context
(compaction.py), and once messages are summarised, or folded and stubbed for good, the working
context needs nothing of them but their fold lines. Kept whole in memory anyway (the workflow's
state, the worker's cache, each new run's decoded snapshot), they were the only thing a long
session's worker grew by (docs/features/compaction.md, "The floor").

At an idle continue-as-new the context keeper (session/context.py) has those messages written to the payload
store (`wolf.archive_transcript`, one part per continue-as-new) and keeps, in their place, this
archive: the parts' references, the chained digest of the messages archived, and the fold lines of
those not summarised as one text. In the transcript list an archived message is `ARCHIVED` (one
shared empty request), so every index keeps its meaning. Readers of the whole transcript (clients,
forks, evals) read the parts back from the store (agentwolf/transcript_store.py); `recall` of an archived
tool result reads its part by activity; a rewind into the archive is refused (a fork from there
works).

Imported passed through, like compaction.py; no `workflow.*`, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage, ModelRequest

from agentwolf.workflows.compaction import EPOCH, ContextView, Rendered, _lines, _shown
from agentwolf.workflows.contracts import EMPTY_DIGEST, HostRef

ARCHIVE = "transcript-archive"  # patch: older messages go to the payload store at an idle continue-as-new
ARCHIVE_MIN = 32
"""Messages: fewer are not worth a part of their own (they wait for the next continue-as-new)."""
ARCHIVED = ModelRequest(parts=[], timestamp=EPOCH)
"""An archived message's place in a transcript list (the same object in every place)."""


class StoredRef(BaseModel):
    """A payload store's reference to one stored payload, as temporalio's `ExternalStorage` writes it:
    its metadata and its data (JSON naming the driver and its claim). Kept as text, so the claim's
    digest reads in history and `wolf payloads gc` keeps the stored part while the session runs."""

    metadata: dict[str, str]
    data: str


class ArchivedPart(BaseModel):
    """Messages [start, end) of a transcript, stored as one payload (a list of pydantic-ai messages)."""

    start: int
    end: int
    ref: StoredRef


class ArchiveInput(BaseModel):
    """`wolf.archive_transcript`: store messages [start, end) of the transcript the worker holds."""

    ref: HostRef
    compiled_digest: str
    base_len: int
    base_digest: str
    start: int
    end: int


class ArchivedRead(BaseModel):
    """`wolf.read_archived`: a page of a tool result in archived `parts` (`recall`'s arguments)."""

    ref: HostRef
    parts: list[ArchivedPart]
    arguments: dict[str, Any]
    page_chars: int


class TranscriptArchive(BaseModel):
    """What a session keeps of its archived messages."""

    parts: list[ArchivedPart] = []
    digest: str = EMPTY_DIGEST
    """The chained digest (contracts.chain_digest) of messages [0, `length`)."""
    fold: str = ""
    """The fold lines of the archived messages the summary does not cover, as one text."""

    @property
    def length(self) -> int:
        return self.parts[-1].end if self.parts else 0


class TranscriptTail(BaseModel):
    """The transcript as a session holds it: its archive, and the messages from `archive.length` on."""

    archive: TranscriptArchive
    messages: list[ModelMessage]


def restored(archive: TranscriptArchive | None, tail: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The transcript list: `ARCHIVED` for each archived message, then the tail."""
    return [ARCHIVED] * (archive.length if archive else 0) + list(tail)


def joined(before: str, after: str) -> str:
    """Two runs of fold lines as one (the fold's lines are joined by newlines)."""
    return f"{before}\n{after}" if before and after else before or after


def fold_text(
    messages: Sequence[ModelMessage],
    view: ContextView,
    start: int,
    end: int,
    shown: Sequence[ModelMessage] | None = None,
    rendered: Rendered | None = None,
) -> str:
    """The fold lines of messages [start, end) that the summary does not cover, stubbed where the view
    stubs them: what the working context sends of them (compaction.working_context; `shown` and
    `rendered` as there)."""
    shown = messages if shown is None else shown
    rendered = Rendered() if rendered is None else rendered
    lines: list[str] = []
    for i in range(max(start, view.summary_upto), end):
        message = _shown(messages, shown, view, i, rendered)
        lines += _lines(message, (i, message is not shown[i]), rendered)
    return "\n".join(lines)


def let_go(
    messages: list[ModelMessage], sent: list[ModelMessage], rendered: Rendered, view: ContextView
) -> list[ModelMessage]:
    """A worker's copy of a transcript (hosts/transcripts.py) catches up with the view's archive, in
    place: the newly archived messages' fold lines join `rendered.archived_fold`, then the messages,
    their cut copies, stubs and lines go. Returns the messages let go."""
    if view.summary_upto >= rendered.archived:
        rendered.archived_fold = ""  # summarised since
    start, end = rendered.archived, min(view.archived, len(messages))
    if end <= start:
        return []
    gone = messages[start:end]
    if view.summary_upto < end:
        rendered.archived_fold = joined(
            rendered.archived_fold, fold_text(messages, view, start, end, sent, rendered)
        )
    else:
        rendered.archived_fold = ""
    messages[start:end] = sent[start:end] = [ARCHIVED] * (end - start)
    for key in [k for k in rendered.lines if k[0] < end]:
        del rendered.lines[key]
    for i in [i for i in rendered.stubbed if i < end]:
        del rendered.stubbed[i]
    rendered.archived = end
    return gone
