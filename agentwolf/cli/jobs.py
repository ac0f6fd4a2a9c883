"""Job verbs: `wolf run JOB --var k=v`, and `wolf schedule ...` (Temporal Schedules running jobs or
prompting sessions)."""

from __future__ import annotations

import json
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from agentwolf.cli.common import ConfigOpt, Json, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, out
from agentwolf.cli.errors import check_worker
from agentwolf.cli.sources import config_source, source_args

if TYPE_CHECKING:
    from agentwolf.client.schedules import ScheduleSummary

app = typer.Typer()
schedule_app = typer.Typer(
    help="Temporal Schedules that run jobs or prompt sessions (see `wolf schedule create -h`)."
)
app.add_typer(schedule_app, name="schedule")

Vars = Annotated[
    list[str] | None,
    typer.Option("--var", "-v", metavar="NAME=VALUE", help="A job variable, NAME=VALUE (repeatable)."),
]


class WhenBusy(StrEnum):
    queue = "queue"
    steer = "steer"
    interrupt = "interrupt"
    skip = "skip"


class Overlap(StrEnum):
    skip = "skip"
    buffer_one = "buffer_one"
    allow_all = "allow_all"


def parse_vars(items: list[str] | None) -> dict[str, object]:
    """`--var k=v` pairs (values stay text: the job's types parse them)."""
    values: dict[str, object] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise Exit(2, f"--var {item!r}: write NAME=VALUE")
        values[name] = value
    return values


@app.command("run")
@verb
async def run_job(
    job: str,
    conn: Connection,
    var: Vars = None,
    config: ConfigOpt = None,
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", metavar="SESSION_ID", help="Session id (default: random)."),
    ] = None,
    tenant: Tenant = "default",
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Stream the run's events first.")] = False,
    as_json: Json = False,
) -> None:
    """Run a job of the config and print its result: the typed object when the job has `output`.

    With --json: {"session_id", "outcome", "output"}. Exit 1 when the run ends without a valid result.

    Example: wolf run triage --var issue_url=https://github.com/o/r/issues/7 --json
    """
    from agentwolf.cli.sessions import follow_events
    from agentwolf.client.jobs import JobFailed

    variables = parse_vars(var)
    source = config_source(config)
    wolf = await conn.client(tenant, start_local=True)
    sid = await wolf.start_job(job, variables, session_id=session, **source_args(source))
    await check_worker(wolf, required=False)
    if follow:
        await follow_events(wolf, sid, as_json, until_turn_end=False)
    try:
        result = await wolf.job_result(sid)
    except JobFailed as exc:
        raise Exit(1, str(exc)) from None
    if as_json:
        out().print(result.model_dump_json(), soft_wrap=True)
    elif isinstance(result.output, dict):
        out().print(json.dumps(result.output, indent=2, ensure_ascii=False))
    else:
        out().print(result.output or "")


def _show(summaries: list[ScheduleSummary], as_json: bool) -> None:
    from agentwolf.cli.render import inert

    if as_json:
        out().print(json.dumps([s.model_dump(mode="json") for s in summaries]), soft_wrap=True)
        return
    for s in summaries:
        state = (
            "paused" if s.paused else f"next {s.next_runs[0]:%Y-%m-%d %H:%M:%S}" if s.next_runs else "done"
        )
        busy = f" when busy: {s.when_busy}" if s.when_busy else ""
        out().print(inert(f"{s.name}  {s.target}  {s.when}  {state}  runs={s.actions}{busy}"))


@schedule_app.command("create")
@verb
async def schedule_create(
    name: str,
    conn: Connection,
    cron: Annotated[
        str | None, typer.Option("--cron", metavar="EXPR", help="Cron expression: '0 9 * * 1-5'.")
    ] = None,
    every: Annotated[
        str | None, typer.Option("--every", metavar="INTERVAL", help="Interval: 30s, 15m, 1h30m, 1d.")
    ] = None,
    job: Annotated[
        str | None, typer.Option("--job", metavar="JOB", help="Run this job of the config at each firing.")
    ] = None,
    var: Vars = None,
    session: Annotated[
        str | None, typer.Option("--session", "-s", metavar="SESSION_ID", help="Prompt this session instead.")
    ] = None,
    prompt: Annotated[
        str | None, typer.Option("--prompt", metavar="TEXT", help="What --session is told.")
    ] = None,
    when_busy: Annotated[
        WhenBusy,
        typer.Option("--when-busy", help="A --session whose turn runs: queue, steer, interrupt, skip."),
    ] = WhenBusy.queue,
    overlap: Annotated[
        Overlap, typer.Option("--overlap", help="A job run still running at the next firing.")
    ] = Overlap.skip,
    jitter: Annotated[
        str | None, typer.Option("--jitter", metavar="DURATION", help="Random delay up to this: 30s.")
    ] = None,
    timezone: Annotated[
        str | None, typer.Option("--timezone", metavar="ZONE", help="IANA zone for --cron.")
    ] = None,
    pause: Annotated[bool, typer.Option("--pause", help="Create it paused.")] = False,
    note: Annotated[
        str, typer.Option("--note", metavar="TEXT", help="Why it exists (shown in the Temporal UI).")
    ] = "",
    config: ConfigOpt = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Create a schedule: (--cron EXPR | --every 15m) (--job JOB [--var k=v] | --session ID --prompt TEXT).

    Everything is checked first: a bad cron expression, job, variable or session creates nothing.

    Example: wolf schedule create nightly --cron '0 3 * * *' --job triage --var repo=main
    """
    wolf = await conn.client(tenant, start_local=True)
    source = source_args(config_source(config)) if job is not None else {}
    made = await wolf.schedule_create(
        name,
        cron=cron,
        every=every,
        job=job,
        variables=parse_vars(var),
        session=session,
        prompt=prompt,
        when_busy=when_busy.value,
        overlap=overlap.value,
        jitter=jitter,
        timezone=timezone,
        paused=pause,
        note=note,
        **source,
    )
    _show([made], as_json)


@schedule_app.command("list")
@verb
async def schedule_list(conn: Connection, tenant: Tenant = "default", as_json: Json = False) -> None:
    """This tenant's schedules.

    Example: wolf schedule list --json
    """
    _show(await (await conn.client(tenant)).schedule_list(), as_json)


@schedule_app.command("describe")
@verb
async def schedule_describe(
    name: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """One schedule: target, timing, state, next and recent runs.

    Example: wolf schedule describe nightly
    """
    summary = await (await conn.client(tenant)).schedule_describe(name)
    if as_json:
        out().print(summary.model_dump_json(), soft_wrap=True)
        return
    _show([summary], False)
    for run in summary.recent_runs:
        out().print(f"  ran {run}")


async def _act(
    conn: Connection, tenant: str, name: str, action: str, as_json: bool, **kwargs: object
) -> None:
    wolf = await conn.client(tenant)
    await getattr(wolf, f"schedule_{action}")(name, **kwargs)
    out().print(json.dumps({"schedule": name, "action": action}) if as_json else f"{name}: {action} done")


@schedule_app.command("pause")
@verb
async def schedule_pause(
    name: str,
    conn: Connection,
    note: Annotated[
        str | None,
        typer.Option("--note", metavar="TEXT", help="Why it is paused (shown in the Temporal UI)."),
    ] = None,
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Stop firing until resumed.

    Example: wolf schedule pause nightly --note "release freeze"
    """
    await _act(conn, tenant, name, "pause", as_json, note=note)


@schedule_app.command("resume")
@verb
async def schedule_resume(
    name: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """Fire again.

    Example: wolf schedule resume nightly
    """
    await _act(conn, tenant, name, "resume", as_json)


@schedule_app.command("trigger")
@verb
async def schedule_trigger(
    name: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """Fire once now (paused or not).

    Example: wolf schedule trigger nightly
    """
    await _act(conn, tenant, name, "trigger", as_json)


@schedule_app.command("backfill")
@verb
async def schedule_backfill(
    name: str,
    conn: Connection,
    start: Annotated[datetime, typer.Option("--start", metavar="TIME", help="From (ISO time).")],
    end: Annotated[datetime, typer.Option("--end", metavar="TIME", help="Until (ISO time).")],
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Fire for every time the schedule names between --start and --end, as if it had run then.

    Example: wolf schedule backfill nightly --start 2026-11-01T00:00:00 --end 2026-11-08T00:00:00
    """
    await _act(conn, tenant, name, "backfill", as_json, start=start, end=end)


@schedule_app.command("delete")
@verb
async def schedule_delete(
    name: str, conn: Connection, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """Delete the schedule (runs it started go on).

    Example: wolf schedule delete nightly
    """
    await _act(conn, tenant, name, "delete", as_json)
