"""Session verbs: submit, follow, result, status, steer, interrupt, approve, deny, close, list."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentwolf.cli.common import Agent, ConfigOpt, Json, JsonLines, Tenant, User, owner_of, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, err, out
from agentwolf.cli.errors import check_worker, with_worker
from agentwolf.cli.sources import config_source, pick_agent, source_args

if TYPE_CHECKING:
    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.workflows.types import SessionStatus

app = typer.Typer()


def _prompt(text: str, what: str = "prompt") -> str:
    if not text.strip():
        raise Exit(2, f"the {what} is empty: say what the agent should do")
    return text


async def follow_events(wolf: WolfClient, session_id: str, as_json: bool, until_turn_end: bool) -> None:
    """Stream the session's events (`live_view`); on Ctrl-C say how to reattach."""
    import asyncio

    from rich.text import Text

    from agentwolf.cli import live_view
    from agentwolf.cli.render import inert

    await wolf.check_session(session_id)  # an unknown id is an error, before any output
    if as_json:
        err().print(inert(f"session {session_id}"))
    else:
        out().print(Text("session ", "dim") + Text(inert(session_id), "bold"))
    try:
        await live_view.follow(
            wolf.events(session_id), out(), session_id, as_json=as_json, until_turn_end=until_turn_end
        )
    except (KeyboardInterrupt, asyncio.CancelledError):
        tenant = "" if wolf.tenant == "default" else f" --tenant {wolf.tenant}"
        err().print(inert(f"detached; the session keeps running. Reattach: wolf follow {session_id}{tenant}"))
        raise


async def _print_result(wolf: WolfClient, sid: str, as_json: bool, *, quiet: bool = False) -> None:
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import FailureError

    from agentwolf.cli.render import inert
    from agentwolf.workflows.types import TASK_FAILED

    try:
        result = await wolf.result(sid)
    except WorkflowFailureError as exc:
        if quiet:  # followed: the error event already said why
            raise Exit(1, f"session {sid} failed (the error is above)") from None
        cause = exc.cause.message if isinstance(exc.cause, FailureError) else str(exc.cause)
        raise Exit(1, f"session {sid} failed: {cause.removeprefix(TASK_FAILED)}") from None
    if as_json:
        out().print(result.model_dump_json(), soft_wrap=True)
    elif not quiet:
        out().print(inert(result.output or ""))
    if result.outcome not in (None, "completed"):
        raise Exit(1, f"session {sid} ended: {result.outcome}")


@app.command()
@verb
async def submit(
    prompt: str,
    conn: Connection,
    agent: Agent = None,
    config: ConfigOpt = None,
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", metavar="SESSION_ID", help="Session id (default: random)."),
    ] = None,
    tenant: Tenant = "default",
    user: User = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream the events.")] = False,
    wait: Annotated[bool, typer.Option("--wait", "-w", help="Block until the result.")] = False,
    keep: Annotated[bool, typer.Option("--keep", "-k", help="Keep the session open after its turn.")] = False,
    pin: Annotated[
        bool, typer.Option("--pin", help="Stay on the registry config's current version.")
    ] = False,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            metavar="DIR",
            help="Copy this folder in as the agent's workspace (its `workspace:`).",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Start a background task; prints its session id (last line).

    With --json: {"session_id": ...}; with --wait, the result (it has the session id); with --follow,
    the events as JSON Lines and the result last.

    Example: wolf submit "What time is it in Tokyo?" --follow
    """
    text = _prompt(prompt)
    source = config_source(config)
    agent = pick_agent(None if isinstance(source, str) else source, agent)
    wolf = await conn.client(tenant, start_local=True)
    sid = await wolf.submit(
        text,
        agent,
        session_id=session,
        keep=keep,
        pinned=pin,
        workspace=workspace,
        owner=owner_of(user),
        **source_args(source),
    )
    await check_worker(wolf, required=False)
    if follow:
        await follow_events(wolf, sid, as_json, until_turn_end=keep)
    if wait or follow:
        await _print_result(wolf, sid, as_json, quiet=follow)
        if as_json:
            return
    out().print(json.dumps({"session_id": sid}) if as_json else sid)


@app.command()
@verb
async def follow(
    session_id: str, conn: Connection, tenant: Tenant = "default", as_json: JsonLines = False
) -> None:
    """Live stream of a session's events; Ctrl-C detaches and leaves the session running.

    With --json: one JSON object per event (JSON Lines).

    Example: wolf follow 3f2a9c1b7d4e --json
    """
    wolf = await conn.client(tenant)
    await check_worker(wolf, required=False, session_id=session_id)
    await follow_events(wolf, session_id, as_json, until_turn_end=False)


@app.command()
@verb
async def result(
    session_id: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """Wait for a session's result and print it (exit 1 if it did not complete).

    Example: wolf result 3f2a9c1b7d4e --json
    """
    wolf = await conn.client(tenant)
    await check_worker(wolf, required=False, session_id=session_id)
    await _print_result(wolf, session_id, as_json)


@app.command()
@verb
async def status(
    session_id: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """A session's state, current turn and counters.

    Example: wolf status 3f2a9c1b7d4e
    """
    # Plain print(): its lines have no style, and rich's import would be a twentieth of its start.
    from agentwolf.cli.pending import approval_lines
    from agentwolf.cli.render import inert

    wolf = await conn.client(tenant)
    st = await with_worker(wolf, session_id, wolf.status(session_id))
    wait = await wolf.waiting(session_id) if st.state == "running" else None
    if as_json:
        data = st.model_dump(mode="json") | ({"waiting": wait.model_dump(mode="json")} if wait else {})
        print(json.dumps(data))
        return
    c = st.counters
    last = f" last={st.last_outcome}" if st.last_outcome else ""  # no turn has ended yet: nothing to say
    print(
        inert(
            f"{st.session_id} [{st.agent}] {st.state}  turns={c.turns} steps={c.steps} "
            f"tokens={c.usage.total_tokens} tool_calls={c.usage.tool_calls}{last}" + _context_use(st)
        )
    )
    if wait is not None:
        print(wait.line())
    for line in approval_lines(st, wolf.tenant):
        print(inert(line))


def _context_use(st: SessionStatus) -> str:
    """` context=12,400/128,000 (10%) compactions=2`: the next request's size against the window."""
    if st.context_tokens is None:
        return ""
    window = (
        f"/{st.context_window:,} ({st.context_tokens / st.context_window:.0%})" if st.context_window else ""
    )
    return f" context={st.context_tokens:,}{window} compactions={st.compactions}"


async def _signal(
    conn: Connection,
    tenant: str,
    session_id: str,
    as_json: bool,
    send: Callable[[WolfClient], Awaitable[object]],
    *,
    queries: bool = False,
) -> None:
    """Send what a signal verb sends; `queries`: it asks the session first, so it needs a worker now."""
    wolf = await conn.client(tenant)
    await check_worker(wolf, required=queries, session_id=session_id)
    await send(wolf)
    if as_json:
        out().print(json.dumps({"ok": True, "session_id": session_id}))


@app.command()
@verb
async def steer(
    session_id: str, message: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """Inject a user message before the running turn's next model request (an idle session starts a
    turn with it). Accepted while no worker polls: it waits in the session until one does.

    Example: wolf steer 3f2a9c1b7d4e "use the staging database"
    """
    text = _prompt(message, "steering message")
    await _signal(conn, tenant, session_id, as_json, lambda w: w.steer(session_id, text))


@app.command()
@verb
async def interrupt(
    session_id: str,
    conn: Connection,
    reason: Annotated[
        str | None, typer.Option("--reason", "-r", metavar="TEXT", help="Shown in the session's events.")
    ] = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Cancel the running turn; the session goes idle with a valid transcript.

    Example: wolf interrupt 3f2a9c1b7d4e --reason "taking too long"
    """
    await _signal(conn, tenant, session_id, as_json, lambda w: w.interrupt(session_id, reason))


@app.command()
@verb
async def approve(
    session_id: str,
    call_id: str,
    conn: Connection,
    always: Annotated[
        bool, typer.Option("--always", help="Allow this tool for the rest of the session.")
    ] = False,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Let a tool call that waits for approval run.

    Example: wolf approve 3f2a9c1b7d4e call_0 --always
    """
    await _signal(
        conn,
        tenant,
        session_id,
        as_json,
        lambda w: w.approve(session_id, call_id, always=always),
        queries=True,
    )


@app.command()
@verb
async def deny(
    session_id: str,
    call_id: str,
    conn: Connection,
    reason: Annotated[
        str | None, typer.Option("--reason", "-r", metavar="TEXT", help="What the model is told.")
    ] = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Refuse a tool call that waits for approval; the model sees the refusal.

    Example: wolf deny 3f2a9c1b7d4e call_0 --reason "not on production"
    """
    await _signal(
        conn, tenant, session_id, as_json, lambda w: w.deny(session_id, call_id, reason), queries=True
    )


@app.command()
@verb
async def close(session_id: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False) -> None:
    """Finish a session (a session that has already finished is left as it is: exit 0).

    Example: wolf close 3f2a9c1b7d4e
    """
    from temporalio.service import RPCError

    try:
        await _signal(conn, tenant, session_id, as_json, lambda w: w.close(session_id))
    except RPCError as exc:
        if "already completed" not in exc.message:
            raise
        done = {"ok": True, "session_id": session_id, "already_finished": True}
        out().print(json.dumps(done) if as_json else f"session {session_id} has already finished")


@app.command()
@verb
async def compact(
    session_id: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """Compact the session's working context at its next safe point (between steps or turns); the
    transcript stays whole. `wolf follow` shows a `context compacted` line when it is done.

    Example: wolf compact 3f2a9c1b7d4e
    """
    await _signal(conn, tenant, session_id, as_json, lambda w: w.compact(session_id))


@app.command()
@verb
async def pin(
    session_id: str, text: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """Pin a note to the session: sent with the instructions in every model request, never compacted.

    Example: wolf pin 3f2a9c1b7d4e "the production database is read-only"
    """
    note = _prompt(text, "note")
    await _signal(conn, tenant, session_id, as_json, lambda w: w.pin(session_id, note))


class State(StrEnum):
    idle = "idle"
    running = "running"
    waiting_approval = "waiting_approval"
    done = "done"


@app.command("list")
@verb
async def list_sessions(
    conn: Connection,
    state: Annotated[State | None, typer.Option("--state", help="Only sessions in this state.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", "-a", help="Only this agent's sessions.")] = None,
    config: Annotated[
        str | None, typer.Option("--config", "-c", metavar="NAME", help="Registry config name.")
    ] = None,
    tenant: Tenant = "default",
    limit: Annotated[int, typer.Option("--limit", min=1, metavar="N", help="At most this many.")] = 50,
    as_json: Json = False,
) -> None:
    """Sessions of a tenant, newest first (Temporal visibility).

    A table in a terminal; tab-separated values with a header line when piped (ids never cut);
    --json: one array.

    Example: wolf list --state idle | cut -f1
    """
    from agentwolf.cli.tables import print_table

    wolf = await conn.client(tenant)
    sessions = await wolf.list_sessions(
        state=state.value if state else None, agent=agent, config=config, limit=limit
    )
    if as_json:
        out().print(json.dumps([s.model_dump(mode="json") for s in sessions]))
        return
    print_table(
        ("session", "agent", "state", "status", "parent", "config", "started"),
        [
            (
                s.session_id,
                s.agent or "",
                s.state or "",
                s.status,
                s.parent or "",
                s.config or "",
                s.started.strftime("%Y-%m-%d %H:%M:%S") if s.started else "",
            )
            for s in sessions
        ],
    )
