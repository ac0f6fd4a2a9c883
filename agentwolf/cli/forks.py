"""Fork verbs: `wolf fork` starts a new session from a recorded prefix of another; `wolf rewind` takes
a session back to a turn or a branch, `wolf branches` lists what rewinds set aside (client/forks.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from agentwolf.cli.common import Json, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import out
from agentwolf.cli.errors import check_worker

if TYPE_CHECKING:
    from agentwolf.workflows.session.cuts import Effect, Fork

app = typer.Typer()


@app.command()
@verb
async def fork(
    session_id: str,
    conn: Connection,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            metavar="TURN[.STEP]",
            help="Cut after this turn (4) or after a step of it (4.2); default: the last finished turn.",
        ),
    ] = None,
    edit: Annotated[
        str | None,
        typer.Option(
            "--edit", metavar="TEXT", help="Stop before turn --at instead and run TEXT as its prompt."
        ),
    ] = None,
    as_id: Annotated[str | None, typer.Option("--as", metavar="NEW_ID", help="The new session's id.")] = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Start a new session from a recorded prefix of another: nothing in it runs again (no model
    request, no tool call). Prints the effect ledger: the calls after the cut that were not read-only
    or idempotent, which the fork does not undo.

    Example: wolf fork 3f2a9c1b7d4e --at 4 --as try-again
    """
    wolf = await conn.client(tenant)
    await check_worker(wolf, required=True, session_id=session_id)
    made = await wolf.fork(session_id, at=at, edit=edit, as_id=as_id)
    if as_json:
        out().print(made.model_dump_json(), soft_wrap=True)
        return
    out().print(ledger_text(made), soft_wrap=True, markup=False, highlight=False)


def ledger_text(made: Fork) -> str:
    """The fork and its effect ledger, as `wolf fork` says them."""
    from agentwolf.cli.render import inert

    lines = [
        f"forked {inert(made.session_id)} from {inert(made.source)} at {made.point}: "
        f"{made.messages} messages kept, nothing re-run"
    ]
    return "\n".join([*lines, *effect_lines(made.effects, "the fork")])


def effect_lines(effects: list[Effect], by: str) -> list[str]:
    """The effect ledger: calls after a cut that were not read-only or idempotent."""
    from agentwolf.cli.render import inert

    if not effects:
        return ["no side effects after the cut (every later call was read-only or idempotent)"]
    return [
        f"side effects after the cut, not undone by {by} ({len(effects)}):",
        *(
            f"  {e.turn_id}.{e.step}  {inert(e.tool)} {inert(json.dumps(e.args, sort_keys=True))}"
            f"  {e.outcome}"
            for e in effects
        ),
    ]


@app.command()
@verb
async def rewind(
    session_id: str,
    conn: Connection,
    to: Annotated[
        str,
        typer.Option(
            "--to", metavar="TURN|BRANCH", help="A turn number, or a branch `wolf branches` lists (redo)."
        ),
    ],
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Take an idle session back to an earlier turn: it goes on from there, and the turns after it
    stay readable as a branch (`wolf branches`) that `--to BRANCH` makes the line again. Nothing runs
    again; the effects the set-aside turns left are listed, not undone.

    Example: wolf rewind 3f2a9c1b7d4e --to 4
    """
    from agentwolf.cli.render import inert

    wolf = await conn.client(tenant)
    await check_worker(wolf, required=True, session_id=session_id)
    done = await wolf.rewind(session_id, to)
    if as_json:
        out().print(done.model_dump_json(), soft_wrap=True)
        return
    kept = f"; the turns after it are {done.branch}" if done.branch else ""
    lines = [
        f"{inert(session_id)} now goes on from {done.point}{kept}",
        *effect_lines(done.effects, "the rewind"),
    ]
    out().print("\n".join(lines), soft_wrap=True, markup=False, highlight=False)


@app.command()
@verb
async def branches(
    session_id: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """List the branches rewinds of a session set aside: the turn each continues, its turns, its
    last answer.

    Example: wolf branches 3f2a9c1b7d4e
    """
    from agentwolf.cli.render import inert
    from agentwolf.cli.tables import print_table

    wolf = await conn.client(tenant)
    await check_worker(wolf, required=True, session_id=session_id)
    found = await wolf.branches(session_id)
    if as_json:
        out().print(json.dumps([b.model_dump() for b in found]), soft_wrap=True)
        return
    if not found:
        out().print(f"{inert(session_id)} has no branches (`wolf rewind --to TURN` makes one)")
        return
    rows = [
        [b.name, b.point, ", ".join(b.turns), str(b.messages), inert((b.last_output or "")[:60])]
        for b in found
    ]
    print_table(["BRANCH", "CONTINUES", "TURNS", "MESSAGES", "LAST ANSWER"], rows)
