"""`wolf memory ...`: an owner's long-term memory in the store, for operators (agentwolf/memory/admin.py)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from agentwolf.cli.common import Json, Tenant, verb
from agentwolf.cli.console import Exit, out

if TYPE_CHECKING:
    from agentwolf.memory.store import MemoryStore, Row

app = typer.Typer()
memory_app = typer.Typer(
    help="Long-term memory: an owner's rows, search, forget, export, purge.", no_args_is_help=True
)
app.add_typer(memory_app, name="memory")

Owner = Annotated[str, typer.Option("--user", "-u", envvar="WOLF_USER", metavar="USER", help="Whose memory.")]
AgentOpt = Annotated[
    str | None, typer.Option("--agent", "-a", metavar="AGENT", help="One agent's (default: all).")
]
Store = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="WOLF_MEMORY_STORE",
        metavar="URL",
        help="sqlite:///path or postgresql://... (default: SQLite in the data dir, as workers use).",
    ),
]
SharedOpt = Annotated[
    Literal["own", "agent", "tenant"],
    typer.Option(
        "--layer", help="own (the user's), or a shared layer: agent (every user of --agent), tenant."
    ),
]


def _open(url: str | None) -> MemoryStore:
    from agentwolf.memory.store import MemoryStoreError
    from agentwolf.memory.stores import default_store, open_store

    try:
        return open_store(url or default_store())
    except MemoryStoreError as exc:
        raise Exit(2, str(exc)) from None


def _rows(rows: Sequence[Row], as_json: bool) -> None:
    from agentwolf.cli.tables import print_table
    from agentwolf.memory import admin

    if as_json:  # one document: the rows as an export has them
        print("[" + ",".join(admin.export(rows)) + "]")
        return
    print_table(
        ["ID", "NAMESPACE", "KIND", "ABOUT/PATH", "KEPT", "FROM", "TEXT"],
        [
            [
                r.id,
                r.ns,
                r.kind,
                r.path or r.about,
                time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.created)),
                " ".join(filter(None, [r.provenance.session, r.provenance.turn, r.provenance.source])),
                r.body if len(r.body) <= 80 else r.body[:77] + "...",
            ]
            for r in rows
        ],
    )


def _say(text: str, document: dict[str, object], as_json: bool) -> None:
    if as_json:
        print(json.dumps(document))
    else:
        out().print(text)


@memory_app.command("ls")
@verb
async def memory_ls(
    user: Owner,
    agent: AgentOpt = None,
    layer: SharedOpt = "own",
    tenant: Tenant = "default",
    store: Store = None,
    as_json: Json = False,
) -> None:
    """Current memories (records and /memories files) of a user, newest first.

    Example: wolf memory ls --user alice --agent assistant
    """
    from agentwolf.memory import admin

    opened = _open(store)
    try:
        _rows(admin.current(opened, admin.namespaces(opened, tenant, user, agent, layer)), as_json)
    finally:
        opened.close()


@memory_app.command("show")
@verb
async def memory_show(
    row_id: Annotated[str, typer.Argument(metavar="ID")],
    user: Owner,
    agent: AgentOpt = None,
    layer: SharedOpt = "own",
    tenant: Tenant = "default",
    store: Store = None,
    as_json: Json = False,
) -> None:
    """A memory with its provenance and its chain: what it corrected and what corrected it.

    Example: wolf memory show m12 --user alice --agent assistant
    """
    from agentwolf.memory import admin

    opened = _open(store)
    try:
        rows = admin.find(opened, admin.namespaces(opened, tenant, user, agent, layer), row_id)
    finally:
        opened.close()
    if not rows:
        raise Exit(2, f"no memory {row_id!r} of {user!r}")
    _rows(rows, as_json)


@memory_app.command("search")
@verb
async def memory_search(
    query: str,
    user: Owner,
    agent: AgentOpt = None,
    layer: SharedOpt = "own",
    k: Annotated[int, typer.Option("-k", min=1, max=50, help="Hits.")] = 10,
    tenant: Tenant = "default",
    store: Store = None,
    as_json: Json = False,
) -> None:
    """Search a user's memories as search_memory does.

    Example: wolf memory search "tea" --user alice
    """
    from agentwolf.memory import admin

    opened = _open(store)
    try:
        _rows(admin.search(opened, admin.namespaces(opened, tenant, user, agent, layer), query, k), as_json)
    finally:
        opened.close()


@memory_app.command("forget")
@verb
async def memory_forget(
    row_id: Annotated[str, typer.Argument(metavar="ID")],
    user: Owner,
    agent: Annotated[
        str, typer.Option("--agent", "-a", metavar="AGENT", help="The agent whose memory it is.")
    ],
    reason: Annotated[
        str, typer.Option("--reason", "-r", help="Why (kept as the forgetting row's text).")
    ] = "forgotten by an operator",
    layer: SharedOpt = "own",
    tenant: Tenant = "default",
    store: Store = None,
    as_json: Json = False,
) -> None:
    """Forget one memory: it stops coming back (its row stays in history until `purge`).

    Example: wolf memory forget m12 --user alice --agent assistant --reason "asked to"
    """
    from agentwolf.memory import admin
    from agentwolf.memory.store import MemoryStoreError

    opened = _open(store)
    try:
        (ns,) = admin.namespaces(opened, tenant, user, agent, layer)
        answer = admin.forget(opened, ns, row_id, reason)
        _say(answer, {"forgot": row_id, "namespace": ns.key}, as_json)
    except MemoryStoreError as exc:
        raise Exit(2, str(exc)) from None
    finally:
        opened.close()


@memory_app.command("approve")
@verb
async def memory_approve(
    row_id: Annotated[str, typer.Argument(metavar="ID")],
    user: Owner,
    agent: Annotated[
        str, typer.Option("--agent", "-a", metavar="AGENT", help="The agent whose memory it is.")
    ],
    kind: Annotated[str, typer.Option("--kind", "-k", help="user, feedback, project or reference.")] = "user",
    tenant: Tenant = "default",
    store: Store = None,
    as_json: Json = False,
) -> None:
    """Keep a pending memory (`memory.extract: review`): searched from now on, as a `kind` record.

    Example: wolf memory approve m7 --user alice --agent assistant
    """
    from agentwolf.memory import admin
    from agentwolf.memory.store import MemoryStoreError
    from agentwolf.workflows.memory_tools import KINDS

    if kind not in KINDS:
        raise Exit(2, f"--kind is one of {', '.join(KINDS)}")
    opened = _open(store)
    try:
        (ns,) = admin.namespaces(opened, tenant, user, agent, "own")
        answer = admin.approve(opened, ns, row_id, kind)
        _say(answer, {"approved": row_id, "namespace": ns.key}, as_json)
    except MemoryStoreError as exc:
        raise Exit(2, str(exc)) from None
    finally:
        opened.close()


@memory_app.command("export")
@verb
async def memory_export(
    user: Owner,
    agent: AgentOpt = None,
    layer: SharedOpt = "own",
    tenant: Tenant = "default",
    store: Store = None,
    as_json: Annotated[bool, typer.Option("--json", "-j", help="JSON Lines: what it prints anyway.")] = False,
) -> None:
    """Every row of a user's memory (history and provenance included) as JSON Lines on stdout.

    Example: wolf memory export --user alice > alice.jsonl
    """
    from agentwolf.memory import admin

    opened = _open(store)
    try:
        for line in admin.export(
            opened.history(admin.namespaces(opened, tenant, user, agent, layer), limit=10**9)
        ):
            print(line)
    finally:
        opened.close()


@memory_app.command("import")
@verb
async def memory_import(
    file: Annotated[
        Path,
        typer.Argument(
            metavar="FILE", help="JSON Lines (an export, or kind/body/about/path lines); - for stdin."
        ),
    ],
    user: Owner,
    agent: Annotated[
        str, typer.Option("--agent", "-a", metavar="AGENT", help="The agent whose memory it becomes.")
    ],
    layer: SharedOpt = "own",
    tenant: Tenant = "default",
    store: Store = None,
    as_json: Json = False,
) -> None:
    """Add the current records and files of FILE to a user's memory (or a shared layer); a line
    imported before adds nothing.

    Example: wolf memory import alice.jsonl --user alice --agent assistant
    """
    from agentwolf.memory import admin

    lines = sys.stdin.read().splitlines() if str(file) == "-" else file.read_text().splitlines()
    opened = _open(store)
    try:
        (ns,) = admin.namespaces(opened, tenant, user, agent, layer)
        added = admin.import_lines(opened, ns, lines)
        _say(f"imported {added} rows into {ns.key}", {"imported": added, "namespace": ns.key}, as_json)
    finally:
        opened.close()


@memory_app.command("purge")
@verb
async def memory_purge(
    user: Owner,
    yes: Annotated[bool, typer.Option("--yes", help="Do it without asking.")] = False,
    tenant: Tenant = "default",
    store: Store = None,
    as_json: Json = False,
) -> None:
    """Delete every row of a user's memory, every agent's, bodies and history included. Workflow
    histories of their sessions still hold the tool calls and results until their retention.

    Example: wolf memory purge --user alice --yes
    """
    if not yes and not typer.confirm(f"delete every memory of {user!r} in tenant {tenant!r}?"):
        raise Exit(1, "nothing deleted")
    opened = _open(store)
    try:
        deleted = opened.purge(tenant, user)
        _say(f"deleted {deleted} rows of {user!r}", {"deleted": deleted, "user": user}, as_json)
    finally:
        opened.close()
