"""The session half of `WolfClient`: what a client does with one of its tenant's sessions once it
runs, its inputs (prompt, steer, approve and deny, interrupt, servers that join, close, compact, pin)
and its reads (status, what it waits for, commands, transcript, result, events). Starting one is
WolfClient's own (wolf_client.py); light to import, like it (tests/test_client_imports.py)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowExecutionStatus, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.client.parts import ClientCore
from agentwolf.client.transient import NO_POLLER, patiently, resent, transient
from agentwolf.workflows.types import OWNER_MEMO, Approval, Event, SessionResult, SessionStatus, workflow_id

if TYPE_CHECKING:
    from pydantic_ai.messages import ModelMessage

    from agentwolf.client.quotas import SessionWait
    from agentwolf.config.manifest import McpServerConfig
    from agentwolf.workflows.turn_settings import TurnSettings

RUNNING_QUERY_WAIT = 5.0
"""How long a live follower waits to learn which step runs (a session without a worker never says)."""
ANSWER_CHECK = timedelta(seconds=10)
"""How long `approve`/`deny` wait for a worker to say which calls wait before sending the answer
unchecked (WolfClient._answer)."""


class NotOwner(PermissionError):
    """The session was started for someone else (another editor's user): its servers are not theirs."""


class SessionMethods(ClientCore):
    """Inputs to and reads of this client's tenant's sessions."""

    async def prompt(self, session_id: str, text: str, settings: TurnSettings | None = None) -> str:
        """Start (or queue) a turn; returns its turn id. `settings`: what this turn alone asks of the
        model (TurnSettings); sent only when given, so workers from before them take the prompt too.
        A call a busy server cuts is sent again with the same update id (`resent`): taken once."""
        handle = await self._handle(session_id)
        args: list[Any] = [text] if settings is None else [text, settings]
        update_id = uuid.uuid4().hex
        return await resent(lambda: handle.execute_update("prompt", args=args, id=update_id, result_type=str))

    async def prompt_or_leave(
        self, session_id: str, text: str, settings: TurnSettings | None = None
    ) -> str | None:
        """`prompt`, or while no worker polls the session's task queue (its status query says so, or
        goes unanswered for ANSWER_CHECK), the prompt left in the session's history as a signal: the
        turn runs once a worker polls, and None says so (no turn id before a worker takes it; a
        prompt the session refuses then is dropped with an error event). `prompt` itself needs a
        worker: an update is only taken by one. For callers that need no answer now (`wolf chat`)."""
        from agentwolf.workflows.contracts import PROMPT_LATER_SIGNAL

        handle = await self._handle(session_id)
        try:
            await handle.query("status", rpc_timeout=ANSWER_CHECK)
        except RPCError as exc:
            if NO_POLLER not in exc.message and exc.status not in (
                RPCStatusCode.CANCELLED,
                RPCStatusCode.DEADLINE_EXCEEDED,
            ):
                raise
            await handle.signal(PROMPT_LATER_SIGNAL, args=[text] if settings is None else [text, settings])
            return None
        return await self.prompt(session_id, text, settings)

    async def steer(self, session_id: str, text: str) -> bool:
        """Refused here when the session's steer queue is full (the workflow would drop it, with an
        error event). A signal needs no worker: while none polls the session's task queue, the steer
        is sent unchecked and waits in the session's history until one does; False says so."""
        try:
            room = (await self.status(session_id)).steer_room
        except RPCError as exc:
            if NO_POLLER not in exc.message:
                raise
            room = None
        if room is not None and room <= 0:
            raise ValueError(
                f"session {session_id!r} has too many steers waiting (host.sessions.max_steers): try again "
                "later"
            )
        await (await self._handle(session_id)).signal("steer", text)
        return room is not None

    async def approve(self, session_id: str, call_id: str, *, always: bool = False) -> None:
        await self._answer(session_id, "approve", Approval(call_id=call_id, always=always))

    async def deny(self, session_id: str, call_id: str, reason: str | None = None) -> None:
        await self._answer(session_id, "deny", Approval(call_id=call_id, reason=reason))

    async def _answer(
        self,
        session_id: str,
        signal: str,
        answer: Approval,
    ) -> None:
        """Refuse answers for calls that do not wait (signals cannot report errors themselves).

        Checking asks a worker (a query). A session no worker answers for within ANSWER_CHECK (its
        worker was lost and the next is not up yet) is sent the answer unchecked: the signal waits in
        its history for the next worker, and the session ignores an answer for a call that does not
        wait. Refusing there lost the answer of a person who approved while a worker restarted."""
        handle, _ = await self._checked(session_id)
        try:
            status = await patiently(
                lambda: handle.query("status", result_type=SessionStatus, rpc_timeout=ANSWER_CHECK)
            )
        except RPCError as exc:
            if exc.status not in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED) and not transient(
                exc
            ):
                raise
        else:
            waiting = {p.call_id for p in status.pending_approvals}
            if answer.call_id not in waiting:
                raise ValueError(
                    f"no tool call {answer.call_id!r} waits for approval in session {session_id!r} "
                    f"(waiting: {', '.join(sorted(waiting)) or 'none'})"
                )
        await handle.signal(signal, answer)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        await (await self._handle(session_id)).signal("interrupt", reason)

    async def join_servers(
        self, session_id: str, servers: dict[str, McpServerConfig], *, owner: str | None = None
    ) -> None:
        """MCP servers (by name) that join this session only, as `start_session(session_servers=...)`
        does: an editor's; a same-named one is replaced, and the agent recompiles before its next step.

        Only for the session's `owner` (NotOwner otherwise): another user's servers, and the
        credentials they carry, would act in a session that is not theirs."""
        from agentwolf.config.session_servers import Compiled

        handle = await self._handle(session_id)
        started_for = await (await handle.describe()).memo_value(OWNER_MEMO, None)
        if started_for != owner:
            raise NotOwner(f"session {session_id!r} was not started for {owner or 'this client'!r}")
        compiled = await patiently(lambda: handle.query("compiled", result_type=Compiled | None))  # type: ignore[arg-type]
        sealed = await self._sealed(handle.id, servers, compiled.by_name() if compiled else {})
        await handle.signal("join_servers", sealed)

    async def _sealed(
        self,
        wid: str,
        servers: dict[str, McpServerConfig],
        current: dict[str, McpServerConfig] | None = None,
    ) -> dict[str, McpServerConfig]:
        """`servers` with their secrets sealed out of history (config/session_servers.py); one the
        session already has unchanged (`current`, by name) keeps its sealing, so its label and process."""
        from agentwolf.config.session_servers import same_secrets, seal

        converter, sealed = self.client.data_converter, {}
        for name, config in servers.items():
            previous = (current or {}).get(name)
            if previous is not None and await same_secrets(converter, wid, previous, config):
                sealed[name] = previous
            else:
                sealed[name] = await seal(converter, self.client.namespace, wid, config)
        return sealed

    async def close(self, session_id: str) -> None:
        await (await self._handle(session_id)).signal("close")

    async def compact(self, session_id: str) -> None:
        """Compact the session's working context at its next safe point (between steps or turns)."""
        await (await self._handle(session_id)).signal("compact")

    async def pin(self, session_id: str, text: str) -> None:
        """Pin a note: sent with the instructions in every model request, never compacted."""
        await (await self._handle(session_id)).signal("pin", text)

    async def status(self, session_id: str) -> SessionStatus:
        """The session's own account; `done` whatever it says once its workflow has ended (a terminated
        workflow never got to say so)."""
        handle, described = await self._checked(session_id)
        status = await patiently(lambda: handle.query("status", result_type=SessionStatus))
        if (
            status.state != "done"
            and (described or await handle.describe()).status != WorkflowExecutionStatus.RUNNING
        ):
            status.state = "done"
        return status

    async def waiting(self, session_id: str) -> SessionWait | None:
        """What the session's model request waits for (its provider's limits), or None."""
        from agentwolf.client.quotas import session_wait

        return await session_wait(self.client, (await self._handle(session_id)).id)

    async def commands(self, session_id: str) -> dict[str, str]:
        """The session's slash commands as its compiled agent knows them (`/skill`, `/server:prompt`),
        by name with their descriptions; none from an old worker or a closed session."""
        from agentwolf.workflows.contracts import COMPILED_QUERY, CompiledAgent

        handle = self.client.get_workflow_handle(workflow_id(self.tenant, session_id))
        try:
            # temporalio's stub says `type`; its pydantic converter decodes any type hint, None included
            compiled = await handle.query(COMPILED_QUERY, result_type=CompiledAgent | None)  # type: ignore[arg-type]
        except (RPCError, WorkflowQueryFailedError):
            return {}
        return dict(compiled.commands) if compiled else {}

    async def transcript(self, session_id: str) -> list[ModelMessage]:
        """The whole transcript, its archived messages read back from the payload store."""
        from agentwolf.transcript_store import read_transcript

        handle = await self._handle(session_id)
        converter = self.client.data_converter
        return await patiently(lambda: read_transcript(handle.query, converter))

    async def result(self, session_id: str) -> SessionResult:
        return await (await self._handle(session_id)).result()

    async def events(
        self, session_id: str, from_offset: int = 0, *, live: bool = True
    ) -> AsyncIterator[tuple[int, Event]]:
        """The session's events from `from_offset` on, across continue-as-new; ends when it ends.

        With `live`, streamed text and tool progress come too, as agentwolf/client/live.py describes:
        a step's `text_delta`s join to its `model_text`."""
        handle = await self._handle(session_id)
        running = None
        if live:
            # A finished session with no worker left cannot answer: it has no running step either.
            with contextlib.suppress(RPCError, WorkflowQueryFailedError, TimeoutError):
                status = await asyncio.wait_for(
                    handle.query("status", result_type=SessionStatus), RUNNING_QUERY_WAIT
                )
                running = (status.turn_id, status.step) if status.turn_id else None
        from agentwolf.client.live import follow

        async for item in follow(self.client, handle, from_offset, live=live, running=running):
            yield item

    async def event_offset(self, session_id: str) -> int:
        """The offset the next event will have (to follow only what happens from now on)."""
        from temporalio.contrib.workflow_streams import WorkflowStreamClient

        return await WorkflowStreamClient.create(
            self.client, (await self._handle(session_id)).id
        ).get_offset()
