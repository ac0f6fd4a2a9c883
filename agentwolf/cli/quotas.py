"""`wolf quotas` (formerly `wolf quotas`, kept as a hidden alias): each provider endpoint's quota,
use, cooldown and waiting sessions."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import typer

from agentwolf.cli.common import Json, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import out

app = typer.Typer()


@app.command("limits", hidden=True)  # the verb's name before quotas had one name
@app.command()
@verb
async def quotas(conn: Connection, tenant: Tenant = "default", as_json: Json = False) -> None:
    """Provider endpoints under quotas: their limits, use, cooldown and waiting sessions.

    Limits are configured or learnt from the provider's headers; use is the current window's; a
    cooldown follows a 429; waiting sessions are this tenant's, by priority (interactive, job,
    background).

    Example: wolf quotas --json
    """
    from agentwolf.client.quotas import endpoints
    from agentwolf.config.quotas import PRIORITIES

    wolf = await conn.client(tenant)
    found = await endpoints(wolf.client, tenant)
    if as_json:
        out().print(json.dumps([s.model_dump(mode="json") for s in found]), soft_wrap=True)
        return
    if not found:
        out().print("no provider endpoint under quotas has been used (`quotas:` in the policy or manifest)")
        return
    from agentwolf.cli.tables import print_table

    now = datetime.now(UTC)
    rows = []
    for s in found:
        cooldown = f"{(s.cooldown_until - now).total_seconds():.0f}s" if s.cooldown_until else "-"
        waiting = (
            ", ".join(f"{w.session} ({PRIORITIES.get(w.priority, w.priority)})" for w in s.waiting) or "-"
        )
        rows.append(
            (
                s.label,
                _used(s.use.requests, s.rpm),
                _used(s.use.input_tokens, s.input_tpm),
                _used(s.use.output_tokens, s.output_tpm),
                _used(s.use.active, s.concurrency),
                f"{s.window_s:g}s",
                cooldown,
                waiting or "-",
            )
        )
    print_table(
        (
            "endpoint",
            "requests",
            "input tokens",
            "output tokens",
            "in flight",
            "window",
            "cooldown",
            "waiting",
        ),
        rows,
    )


def _used(value: int, limit: int | None) -> str:
    return f"{value}/{limit}" if limit else str(value)
