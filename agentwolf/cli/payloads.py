"""`wolf payloads gc`: retention for the filesystem payload store."""

from __future__ import annotations

from typing import Annotated

import typer

from agentwolf.cli.common import Json, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, out

app = typer.Typer()
payloads_app = typer.Typer(
    help="The filesystem payload store (WOLF_PAYLOAD_STORE): retention.", no_args_is_help=True
)
app.add_typer(payloads_app, name="payloads")


@payloads_app.command("gc")
@verb
async def payloads_gc(
    conn: Connection,
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Only payloads stored longer ago than this: 7d, 12h, 30m, 2w, PT8H.",
        ),
    ] = "7d",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be removed; remove nothing.")
    ] = False,
    as_json: Json = False,
) -> None:
    """Remove stored payloads older than --older-than that no running workflow (any namespace) references.

    Example: wolf payloads gc --older-than 30d --dry-run
    """
    from agentwolf.client.durations import parse_duration
    from agentwolf.ops.payload_gc import collect_garbage
    from agentwolf.payloads import filesystem_root, store_location

    age = int(parse_duration(older_than, "--older-than").total_seconds())
    root = filesystem_root()
    if root is None:
        raise Exit(
            2,
            f"payload store {store_location()!r} is not a folder: wolf payloads gc collects only the "
            "filesystem store; give an s3:// or gs:// bucket a lifecycle rule that expires objects older "
            "than your sessions' retention",
        )
    wolf = await conn.client("default")
    report = await collect_garbage(wolf.client, root, age, dry_run=dry_run)
    if as_json:
        out().print(report.model_dump_json())
        return
    verb_done = "would remove" if dry_run else "removed"
    out().print(
        f"{verb_done} {len(report.removed)} payloads ({report.removed_bytes:,} bytes) "
        f"older than {older_than} from {root}"
    )
    out().print(
        f"kept {report.kept_referenced} referenced by running workflows "
        f"({report.kept_referenced_bytes:,} bytes) "
        f"and {report.kept_young} younger than {older_than} ({report.kept_young_bytes:,} bytes); "
        f"searched {report.running_workflows} running workflows"
    )
