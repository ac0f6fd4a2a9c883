"""`wolf chat`: an interactive multi-turn session (prompt_toolkit, loaded only for this verb)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from agentwolf.cli.common import Agent, ConfigOpt, Tenant, User, owner_of, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import err, out
from agentwolf.cli.errors import check_worker
from agentwolf.cli.sources import config_source, pick_agent, source_args

app = typer.Typer()


@app.command()
@verb
async def chat(
    conn: Connection,
    agent: Agent = None,
    config: ConfigOpt = None,
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", metavar="SESSION_ID", help="Attach to an existing session."),
    ] = None,
    tenant: Tenant = "default",
    user: User = None,
) -> None:
    """Interactive multi-turn session: Ctrl-C interrupts the running turn (twice exits), /exit leaves.

    Not in a terminal, each stdin line is a turn.

    Example: wolf chat -a assistant
    """
    from rich.text import Text

    from agentwolf.cli import chat as chat_ui
    from agentwolf.cli.render import inert

    wolf = await conn.client(tenant, start_local=True)
    if session:
        sid, offset = session, await wolf.event_offset(session)
    else:
        source = config_source(config)
        agent = pick_agent(None if isinstance(source, str) else source, agent)
        sid, offset = await wolf.start_session(agent, owner=owner_of(user), **source_args(source)), 0
    await check_worker(wolf, required=False, session_id=sid)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        try:
            await chat_ui.run_lines(wolf, sid, offset, out(), err())
        finally:
            if not session:
                await wolf.close(sid)
        out().print(sid)
        return
    out().print(
        Text("session ", "dim")
        + Text(inert(sid), "bold")
        + Text(" (/help, /exit; Tab completes commands)", "dim")
    )
    running = False
    if session:
        for line in chat_ui.transcript_lines(await wolf.transcript(sid)):
            out().print(line)
        running = (await wolf.status(sid)).state in ("running", "waiting_approval")
    try:
        await chat_ui.Chat(wolf, sid, err()).run(offset, running)
    finally:
        if not session:
            await wolf.close(sid)
    out().print(sid)
