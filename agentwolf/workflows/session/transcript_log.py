"""The session's transcript and what is kept about it: the messages (archived ones as `ARCHIVED`),
their archive in the payload store, the chained digest, the marks of what the workers were last sent,
the turns' marks and the branches rewinds set aside.

`TranscriptLog` alone changes them, through a method per event: a message appended, a model request
sent, a rewind, messages archived, a summary that covers the archived ones, the run handing over.
The session's core holds it (core.py); the turn runner (loop.py), the context keeper (context.py) and
the rewind (workflow.py) call its methods and only read its fields. Tested without a server
(tests/test_workflow_parts.py).

Imported passed through, like turn.py: no clock, randomness, environment or I/O (an import-linter
contract), and no `workflow.*` either: callers pass what it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic_ai.messages import ModelMessage, ModelResponse

import agentwolf.workflows.session.branches as branches
from agentwolf.workflows.archive import ARCHIVED, ArchivedPart, TranscriptArchive, restored
from agentwolf.workflows.contracts import CompiledAgent, chain_digest, chained
from agentwolf.workflows.session.cuts import mark_end, mark_start
from agentwolf.workflows.session.turn import share_texts
from agentwolf.workflows.session_input import Branch, SessionInput, TurnMark
from agentwolf.workflows.types import Counters

if TYPE_CHECKING:
    from agentwolf.workflows.compaction import ContextView


class TranscriptLog:
    """A session's transcript, its archive, digest and sync marks, turn marks and branches."""

    def __init__(self, inp: SessionInput) -> None:
        self.archive = inp.archive or TranscriptArchive()
        """Older messages in the payload store (archive.py): `ARCHIVED` in `transcript`."""
        share_texts(inp.transcript)  # the worker's cached copy and the previous run's hold them too
        self.transcript: list[ModelMessage] = restored(self.archive, inp.transcript)
        self.digest = chain_digest(self.archive.digest, inp.transcript)
        self.appended_bytes = 0
        """What this run added to the transcript, serialised: what its snapshot carries more."""
        # What the workers were last sent: the next model request carries only what follows.
        self.synced_len = len(self.transcript)
        self.synced_digest = self.digest
        self.turns: list[TurnMark] = list(inp.turns)
        self.branches: list[Branch] = list(inp.branches)

    def tail(self) -> list[ModelMessage]:
        """The messages held (those after the archived ones)."""
        return self.transcript[self.archive.length :]

    def whole_digest(self) -> str:
        """The transcript's chained digest, computed anew (after a rewind)."""
        return chain_digest(self.archive.digest, self.tail())

    def append(self, message: ModelMessage) -> None:
        share_texts([message])
        self.transcript.append(message)
        self.digest, size = chained(self.digest, [message])
        self.appended_bytes += size

    def mark_sent(self, response: ModelResponse) -> None:
        """A model request answered with `response`: once it is appended, the worker holds exactly
        this transcript (it appended the response to its copy)."""
        self.synced_len = len(self.transcript) + 1
        self.synced_digest = chain_digest(self.digest, [response])

    def turn_started(self, turn_id: str, config_version: int | None) -> None:
        self.turns.append(mark_start(turn_id, len(self.transcript), config_version))

    def turn_ended(self, turn_id: str, counters: Counters) -> None:
        mark_end(self.turns, turn_id, len(self.transcript), counters)

    def saw_memory(self, turn_id: str, seen: dict[str, int]) -> None:
        """What a memory call of the running turn saw of each namespace: what a fork at this turn
        cuts memory at (workflows/session/memory.py)."""
        if self.turns and self.turns[-1].turn_id == turn_id:
            mark = self.turns[-1]
            mark.memory = {**(mark.memory or {}), **seen}

    def plan(self, to: str) -> branches.Plan:
        """What a rewind to `to` (a turn number, a branch's name) would keep and restore."""
        return branches.plan(self.transcript, self.turns, self.branches, to, self.archive)

    def rewound(
        self, to: str, view: ContextView, compiled: CompiledAgent | None, *, whole_view: bool
    ) -> tuple[branches.Rewound, ContextView]:
        """Go back to a turn or a branch (branches.py), in place; the digest and the sync marks are
        computed anew (the worker's copy no longer matches: the next request sends it whole).
        Returns what was done and the working context's view cut to the new line."""
        line = branches.Line(self.transcript, self.turns, self.branches, view, self.archive)
        done = branches.apply(line, self.plan(to), compiled, whole_view=whole_view)
        self.digest = self.synced_digest = self.whole_digest()
        self.synced_len = len(self.transcript)
        return done, line.view

    def archived(self, part: ArchivedPart, end: int, fold: str) -> None:
        """Messages from the archive's end to `end` went to the payload store as `part`: the list
        keeps `ARCHIVED` in their place; `fold`: the archived messages' fold text from now on."""
        start = self.archive.length
        self.archive = TranscriptArchive(
            parts=[*self.archive.parts, part],
            digest=chain_digest(self.archive.digest, self.transcript[start:end]),
            fold=fold,
        )
        self.transcript[start:end] = [ARCHIVED] * (end - start)

    def summarised(self, upto: int) -> None:
        """A summary now covers messages up to `upto`: if that includes every archived one, their
        fold text is no longer sent."""
        if upto >= self.archive.length and self.archive.fold:
            self.archive = self.archive.model_copy(update={"fold": ""})

    def released(self) -> None:
        """The run handed over (its snapshot holds them): the messages and turn marks are let go."""
        self.transcript, self.turns = [], []
