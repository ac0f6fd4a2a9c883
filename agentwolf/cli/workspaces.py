"""`wolf workspace ls|cat|get|diff`: a session's workspace as it was at the end of a turn, read from
its snapshots in the payload store."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from agentwolf.cli.common import Json, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, out

app = typer.Typer()
workspace_app = typer.Typer(
    help="A session's workspace files as of a turn (from its snapshots).", no_args_is_help=True
)
app.add_typer(workspace_app, name="workspace")

At = Annotated[
    int | None,
    typer.Option(
        "--at", metavar="TURN", help="As of the end of this turn (0: as seeded); default: the latest."
    ),
]


@workspace_app.command("ls")
@verb
async def workspace_ls(
    session_id: str, conn: Connection, at: At = None, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """List the workspace's files (size and path).

    Example: wolf workspace ls 3f2a9c1b7d4e --at 2
    """
    wolf = await conn.client(tenant)
    try:
        entries = await wolf.workspace_files(session_id, at)
    except (ValueError, FileNotFoundError) as exc:
        raise Exit(2, str(exc)) from None
    files = {p: e for p, e in sorted(entries.items()) if e["k"] != "d"}
    if as_json:
        out().print(json.dumps({p: {"size": e.get("s"), "link": e.get("t")} for p, e in files.items()}))
        return
    for path, entry in files.items():
        shown = f"{path} -> {entry['t']}" if entry["k"] == "l" else path
        out().print(f"{entry.get('s', 0):>10}  {shown}", markup=False, highlight=False)


@workspace_app.command("cat")
@verb
async def workspace_cat(
    session_id: str,
    path: str,
    conn: Connection,
    at: At = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Print one file of the workspace (with --json: {"path", "text"}, the text UTF-8 decoded).

    Example: wolf workspace cat 3f2a9c1b7d4e src/app.py --at 2
    """
    wolf = await conn.client(tenant)
    try:
        data = await wolf.workspace_read(session_id, path, at)
    except (ValueError, FileNotFoundError) as exc:
        raise Exit(2, str(exc)) from None
    if as_json:
        out().print(json.dumps({"path": path, "text": data.decode("utf-8", errors="replace")}))
        return
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


@workspace_app.command("get")
@verb
async def workspace_get(
    session_id: str,
    conn: Connection,
    output: Annotated[
        Path, typer.Option("--output", "-o", metavar="FILE", help="The tar file to write ('-': stdout).")
    ],
    at: At = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """The whole workspace as a tar archive (with --json: {"output", "bytes"} once it is written).

    Example: wolf workspace get 3f2a9c1b7d4e -o work.tar && tar -xf work.tar -C here
    """
    wolf = await conn.client(tenant)
    try:
        data = await wolf.workspace_tar(session_id, at)
    except ValueError as exc:
        raise Exit(2, str(exc)) from None
    if str(output) == "-":
        if as_json:
            raise Exit(2, "--json reports a tar written to a file: give -o FILE")
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    output.write_bytes(data)
    if as_json:
        out().print(json.dumps({"output": str(output), "bytes": len(data)}))


@workspace_app.command("diff")
@verb
async def workspace_diff(
    session_id: str,
    conn: Connection,
    at: At = None,
    since: Annotated[
        int | None,
        typer.Option(
            "--since", metavar="TURN", help="From the end of this turn; default: the first snapshot."
        ),
    ] = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """What changed in the workspace's text files, as a unified diff (from the seed by default;
    with --json: {"diff"}).

    Example: wolf workspace diff 3f2a9c1b7d4e --since 1 --at 3
    """
    wolf = await conn.client(tenant)
    try:
        text = await wolf.workspace_diff(session_id, at, since)
    except ValueError as exc:
        raise Exit(2, str(exc)) from None
    if as_json:
        out().print(json.dumps({"diff": text}))
        return
    sys.stdout.write(text)
    sys.stdout.flush()
