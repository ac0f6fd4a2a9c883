"""Rewind and redo inside one session: the session goes on from an earlier turn, and the turns after
it stay readable as a branch that a redo makes the line again.

A rewind is a cut (workflows/session/cuts.py) the session applies to itself: its transcript, turn marks and
working-context view go back to the turn; what followed becomes a `Branch` carried in its state
(and across continue-as-new). Spending is not rewound: the counters say what the session did.
Nothing runs again and nothing is undone: the rewind says which effects the set-aside turns left.

Pure data and deterministic helpers: the workflow's `rewind` update validates with `plan` and
applies with `apply`; imported passed through, like cuts.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel
from pydantic_ai.messages import ModelMessage, ModelResponse

from agentwolf.workflows.archive import TranscriptArchive
from agentwolf.workflows.contracts import EMPTY_DIGEST, CompiledAgent, chain_digest
from agentwolf.workflows.session.cuts import CutError, Effect, clamp_view, cut, effect_ledger, parse_point
from agentwolf.workflows.session_input import Branch, TurnMark

if TYPE_CHECKING:
    from agentwolf.workflows.compaction import ContextView

BRANCH_PREFIX = "branch-"


class BranchInfo(BaseModel):
    """One branch as `wolf branches` lists it."""

    name: str
    point: str
    """The turn it continues."""
    turns: list[str]
    messages: int
    last_output: str | None


class Rewound(BaseModel):
    """What a rewind or redo did: the line now ends at `point`; `branch` holds what it set aside
    (None: nothing followed); `effects` ran in the set-aside turns and stay in the world."""

    point: str
    branch: str | None
    effects: list[Effect]


@dataclass(frozen=True)
class Plan:
    """A rewind decided: keep `keep` messages and `turns`, then append `restore` (a redo's branch)."""

    point: str
    keep: int
    turns: list[TurnMark]
    restore: Branch | None = None


def prefix_digest(transcript: list[ModelMessage], n: int, archive: TranscriptArchive | None) -> str | None:
    """The chained digest of the first `n` messages, from the archive's digest on (the archived ones
    are `ARCHIVED` in the list); None when `n` falls inside the archive."""
    archived, digest = (archive.length, archive.digest) if archive else (0, EMPTY_DIGEST)
    return None if n < archived else chain_digest(digest, transcript[archived:n])


def plan(
    transcript: list[ModelMessage],
    turns: list[TurnMark],
    branches: list[Branch],
    to: str,
    archive: TranscriptArchive | None = None,
) -> Plan:
    """Where `to` (a turn number, or a branch's name for a redo) takes the line; CutError if nowhere."""
    if to.startswith(BRANCH_PREFIX):
        branch = next((b for b in branches if b.name == to), None)
        if branch is None:
            names = ", ".join(b.name for b in branches) or "none"
            raise CutError(f"no {to} in this session (its branches: {names})")
        if (
            len(transcript) < branch.base
            or prefix_digest(transcript, branch.base, archive) != branch.base_digest
        ):
            raise CutError(
                f"{to} continues {branch.point}, which this line no longer has: redo that line first"
            )
        kept = [m for m in turns if m.start < branch.base]
        return Plan(
            point=branch.turns[-1].turn_id if branch.turns else branch.point,
            keep=branch.base,
            turns=kept,
            restore=branch,
        )
    turn, step = parse_point(to)
    if step is not None:
        raise CutError("a rewind goes back to a whole turn: give TURN (fork at TURN.STEP instead)")
    at = cut(transcript, turns, turn)
    if at.rest == len(transcript):
        raise CutError(f"the session is at {at.point} already: nothing to rewind")
    return Plan(point=at.point, keep=at.rest, turns=at.turns)


@dataclass
class Line:
    """A session's current line: what a rewind changes."""

    transcript: list[ModelMessage]
    turns: list[TurnMark]
    branches: list[Branch]
    view: ContextView
    archive: TranscriptArchive | None = None
    """Its older messages in the payload store (a rewind never reaches into them)."""


def apply(line: Line, decided: Plan, compiled: CompiledAgent | None, *, whole_view: bool = True) -> Rewound:
    """Set aside what follows `decided.keep` as a new branch, then restore a redo's branch.
    `whole_view`: every index of the view is clamped to the cut (`cuts.clamp_view`)."""
    suffix = line.transcript[decided.keep :]
    effects = effect_ledger(line.transcript, line.turns, compiled, decided.keep)
    name = None
    if suffix:
        point = next((m.turn_id for m in reversed(line.turns) if m.end == decided.keep), "the start")
        number = 1 + max((int(b.name.removeprefix(BRANCH_PREFIX)) for b in line.branches), default=0)
        name = f"{BRANCH_PREFIX}{number}"
        line.branches.append(
            Branch(
                name=name,
                base=decided.keep,
                base_digest=prefix_digest(line.transcript, decided.keep, line.archive) or "",
                point=point,
                messages=suffix,
                turns=[m for m in line.turns if m.start >= decided.keep],
            )
        )
    line.transcript[:] = line.transcript[: decided.keep]
    line.turns[:] = decided.turns
    if decided.restore is not None:
        line.branches.remove(decided.restore)
        line.transcript.extend(decided.restore.messages)
        line.turns.extend(decided.restore.turns)
    line.view = clamp_view(line.view, decided.keep, whole=whole_view)
    return Rewound(point=decided.point, branch=name, effects=effects)


def infos(branches: list[Branch]) -> list[BranchInfo]:
    return [
        BranchInfo(
            name=b.name,
            point=b.point,
            turns=[m.turn_id for m in b.turns],
            messages=len(b.messages),
            last_output=last_text(b.messages),
        )
        for b in branches
    ]


def last_text(messages: list[ModelMessage]) -> str | None:
    """The last answer in `messages` (a line's output)."""
    return next((m.text for m in reversed(messages) if isinstance(m, ModelResponse)), None)
