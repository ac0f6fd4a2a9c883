"""Usage verb: what sessions spent, in tokens, tool calls and USD."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated

import typer

from agentwolf.cli.common import Json, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, err, out

app = typer.Typer()


class By(StrEnum):
    agent = "agent"
    model = "model"
    session = "session"
    tenant = "tenant"


def _since(text: str | None) -> datetime | None:
    """An ISO date or date-time (without a zone: UTC, visibility's time), or a duration ago (`7d`)."""
    if text is None:
        return None

    from agentwolf.client.durations import FORMS, parse_duration

    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        try:
            return datetime.now(UTC) - parse_duration(text, "--since")
        except ValueError:
            raise Exit(
                2, f"--since {text!r} is neither a date (YYYY-MM-DD, ISO date-time) nor a duration ({FORMS})"
            ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@app.command()
@verb
async def usage(
    conn: Connection,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="WHEN",
            help="Only sessions whose current run started then or later: a date (2026-11-01), an ISO"
            " date-time, or a duration ago (7d, 12h).",
        ),
    ] = None,
    by: Annotated[By, typer.Option("--by", help="Group by agent, model, session or tenant.")] = By.agent,
    all_tenants: Annotated[
        bool, typer.Option("--all-tenants", help="Every tenant's sessions in the namespace.")
    ] = False,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """What sessions spent: requests, tokens, tool calls and USD, from visibility and each
    session's counters. A subagent is a session of its own: each request counts once.

    USD is known only for priced models (genai-prices, or host.models.prices): 'unpriced' counts
    requests whose model has no price. Models go by their resolved spec (provider:model), as in
    the worker's metrics. A table in a terminal; tab-separated values with a header line when
    piped; --json: one document (rows, total, unreadable).

    Example: wolf usage --since 7d --by model
    """
    when = _since(since)
    wolf = await conn.client(tenant)
    report = await wolf.usage(since=when, by=by.value, all_tenants=all_tenants)
    if as_json:
        out().print(report.model_dump_json(), soft_wrap=True)
        return
    from agentwolf.cli.tables import print_table

    rows = []
    for row in [*report.rows, None]:
        key, sessions, used = (
            (row.key, row.sessions, row.usage) if row else ("total", report.sessions, report.total)
        )
        cost = f"{used.cost_usd:.6f}" if used.cost_usd is not None else "-"
        cells = (used.requests, used.input_tokens, used.output_tokens, used.tool_calls)
        rows.append((key, str(sessions), *map(str, cells), cost, str(used.unpriced_requests)))
    print_table((by.value, "sessions", "requests", "input", "output", "tool calls", "USD", "unpriced"), rows)
    if report.unreadable:
        err().print(f"{len(report.unreadable)} sessions left out (no result, no worker to ask)")
