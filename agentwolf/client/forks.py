"""The fork half of `WolfClient`: a new session that starts from a recorded prefix of another, and
rewinds of a session to an earlier turn or back to a branch (workflows/session/branches.py).

The fork starts from the snapshot a continue-as-new would hand over (workflows/session/cuts.py cuts it), so
nothing in the prefix runs again: no model request, no tool call. Its effect ledger lists what ran
after the cut and may have changed the world, which the fork does not undo."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from agentwolf.client.parts import ClientCore
from agentwolf.workflows.types import OWNER_MEMO, RUN_PREFIX, workflow_id

if TYPE_CHECKING:
    from agentwolf.workflows.session.branches import BranchInfo, Rewound
    from agentwolf.workflows.session.cuts import Fork
    from agentwolf.workflows.session_input import SessionInput

FORK_MEMO = "fork_of"
"""The memo field naming a fork's source and point (`<session>@turn-4`)."""


class ForkMethods(ClientCore):
    """Forks of this client's tenant's sessions."""

    async def snapshot(self, session_id: str) -> SessionInput:
        """The session's state as a continue-as-new would hand it over (transcript, turns, counters)."""
        from agentwolf.client.transient import patiently
        from agentwolf.transcript_store import whole
        from agentwolf.workflows.archive import TranscriptTail
        from agentwolf.workflows.contracts import SNAPSHOT_QUERY
        from agentwolf.workflows.session_input import SessionInput

        handle = await self._handle(session_id)
        snapshot = await patiently(lambda: handle.query(SNAPSHOT_QUERY, result_type=SessionInput))
        if snapshot.archive is None:
            return snapshot
        # A fork starts from the whole transcript: its archived messages read back from the store.
        tail = TranscriptTail(archive=snapshot.archive, messages=snapshot.transcript)
        context = snapshot.context.model_copy(update={"archived": 0}) if snapshot.context else None
        return snapshot.model_copy(
            update={
                "transcript": await whole(self.client.data_converter, tail),
                "archive": None,
                "context": context,
            }
        )

    async def start_from(
        self,
        inp: SessionInput,
        *,
        prompt: str | None = None,
        memo: dict[str, Any] | None = None,
        owner: str | None = None,
    ) -> None:
        """Start a session from a snapshot (a fork, an eval case); its id must be new. `owner`: who it
        is started for, as `start_session(owner=...)` says."""
        await self._launch(inp, prompt=prompt, unique=True, memo=memo, owner=owner)
        self._owned.add(workflow_id(self.tenant, inp.session_id))

    async def fork(
        self,
        session_id: str,
        *,
        at: str | None = None,
        edit: str | None = None,
        as_id: str | None = None,
        owner: str | None = None,
    ) -> Fork:
        """A new session whose transcript is `session_id`'s up to `at` (`4`: after turn 4, `4.2`:
        after its second step; default: its last finished turn), on the config version, counters and
        compiled agent it had there. `edit`: the fork instead stops before turn `at` and runs `edit`
        as that turn's prompt. `as_id`: the new session's id (refused if taken). `owner`: who the
        fork is started for (only they join MCP servers to it, `join_servers`; its memory is theirs);
        default: the source's owner.

        What the source's user allowed "always" is not carried: that answer holds for the rest of
        the session it was given in, and the snapshot cannot tell whether it was given before the
        cut, so the fork asks again. Nor are the source's own MCP servers (an editor's): they
        belong to its user, whose servers join a fork as they join any session."""
        from agentwolf.workflows.session.cuts import (
            CutError,
            Fork,
            cut,
            effect_ledger,
            fork_input,
            parse_point,
        )

        new_id = as_id or uuid.uuid4().hex[:12]
        if "/" in new_id or new_id.startswith(RUN_PREFIX):
            raise CutError(f"invalid session id {new_id!r}: no '/' and no leading {RUN_PREFIX!r}")
        source = await self.snapshot(session_id)
        turn, step = parse_point(at) if at else (None, None)
        point = cut(source.transcript, source.turns, turn, step, edit=edit is not None)
        inp = fork_input(source, point, new_id, edit=edit)
        if point.config_version != source.config_version and source.config_name is not None:
            old = await self.config_get(source.config_name, point.config_version)
            inp.manifest = old.manifest
        memo = {FORK_MEMO: f"{source.session_id}@{point.point}"}
        if owner is None:  # the source's owner: the fork's memory is theirs (workflows/session/memory.py)
            described = await (await self._handle(session_id)).describe()
            owner = await described.memo_value(OWNER_MEMO, None)
        await self.start_from(inp, prompt=edit, memo=memo, owner=owner)
        return Fork(
            session_id=new_id,
            source=source.session_id,
            point=point.point,
            messages=len(point.prefix),
            effects=effect_ledger(source.transcript, source.turns, source.compiled, point.rest),
        )

    async def rewind(self, session_id: str, to: str) -> Rewound:
        """Take the idle session back to turn `to` (its later turns become a branch), or to the
        branch named `to` (a redo); ValueError says why not."""
        from temporalio.client import WorkflowUpdateFailedError

        from agentwolf.workflows.contracts import REWIND_UPDATE
        from agentwolf.workflows.session.branches import Rewound
        from agentwolf.workflows.session.cuts import CutError

        handle = await self._handle(session_id)
        try:
            return await handle.execute_update(REWIND_UPDATE, to, result_type=Rewound)
        except WorkflowUpdateFailedError as exc:
            raise CutError(str(getattr(exc.cause, "message", None) or exc.cause or exc)) from None

    async def branches(self, session_id: str) -> list[BranchInfo]:
        """The branches rewinds of the session set aside."""
        from agentwolf.workflows.contracts import BRANCHES_QUERY
        from agentwolf.workflows.session.branches import BranchInfo

        handle = await self._handle(session_id)
        return await handle.query(BRANCHES_QUERY, result_type=list[BranchInfo])
