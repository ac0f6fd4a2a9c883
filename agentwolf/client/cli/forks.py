"""Fork verbs: `wolf fork` starts a new session from a recorded prefix of another (client/forks.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from agentwolf.client.cli.common import Json, Tenant, out, verb
from agentwolf.client.cli.connection import Connection
from agentwolf.client.cli.errors import check_worker

if TYPE_CHECKING:
    from agentwolf.workflows.cuts import Fork

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
    from agentwolf.client.render import inert

    lines = [
        f"forked {inert(made.session_id)} from {inert(made.source)} at {made.point}: "
        f"{made.messages} messages kept, nothing re-run"
    ]
    if not made.effects:
        lines.append("no side effects after the cut (every later call was read-only or idempotent)")
    else:
        lines.append(f"side effects after the cut, not undone by the fork ({len(made.effects)}):")
        lines += [
            f"  {e.turn_id}.{e.step}  {inert(e.tool)} {inert(json.dumps(e.args, sort_keys=True))}"
            f"  {e.outcome}"
            for e in made.effects
        ]
    return "\n".join(lines)
