"""Deploy and operations verbs: `wolf deploy status|promote|rollback` (worker deployments and their
builds), `wolf check-replay` (what a deploy of this code would break), `wolf pause|unpause` (hold a
session's next step)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from agentwolf.cli.common import Json, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, out
from agentwolf.defaults import TASK_QUEUE

app = typer.Typer()
deploy = typer.Typer(
    help="Worker deployments: which builds serve how many sessions, and which one is current.",
    no_args_is_help=True,
)
app.add_typer(deploy, name="deploy")

DeploymentName = Annotated[
    str | None,
    typer.Option(
        "--deployment", metavar="NAME", help="The worker deployment (default: the task queue's, 'agentwolf')."
    ),
]

BuildId = Annotated[
    str | None,
    typer.Option(
        "--build-id",
        metavar="BUILD_ID",
        help="This worker's build (default: version + workflow code digest).",
    ),
]
Promote = Annotated[bool, typer.Option("--promote", help="Make this worker's build current once it polls.")]


def _name(name: str | None) -> str:
    from agentwolf.worker.deployment import default_name

    return name or default_name(TASK_QUEUE)


@deploy.command("status")
@verb
async def deploy_status(conn: Connection, deployment: DeploymentName = None, as_json: Json = False) -> None:
    """The deployment's builds, newest first: status (current, draining while pinned sessions still
    run, drained, inactive) and running sessions.

    Example: wolf deploy status --json
    """
    from agentwolf.ops.deployments import DeploymentError, status

    wolf = await conn.client("default")
    try:
        found = await status(wolf.client, _name(deployment))
    except DeploymentError as exc:
        raise Exit(2, str(exc)) from None
    if as_json:
        out().print(found.model_dump_json(), soft_wrap=True)
        return
    from agentwolf.cli.tables import print_table

    print_table(
        ("build", "status", "sessions", "created"),
        [
            (b.build_id, b.status, str(b.sessions), f"{b.created:%Y-%m-%d %H:%M}" if b.created else "-")
            for b in found.builds
        ],
    )


@deploy.command("promote")
@verb
async def deploy_promote(
    conn: Connection,
    build_id: Annotated[
        str, typer.Argument(metavar="BUILD_ID", help="The build to make current (`wolf deploy status`).")
    ],
    deployment: DeploymentName = None,
    as_json: Json = False,
) -> None:
    """Make a build current: new sessions start on it, idle ones move to it at their next
    continue-as-new, turns in flight finish on their own build.

    Example: wolf deploy promote 0.2.0-3f2a9c1d0e
    """
    from agentwolf.ops.deployments import DeploymentError, promote

    wolf = await conn.client("default")
    try:
        routed = await promote(wolf.client, _name(deployment), build_id)
    except DeploymentError as exc:
        raise Exit(2, str(exc)) from None
    _switched(build_id, routed, as_json)


@deploy.command("rollback")
@verb
async def deploy_rollback(conn: Connection, deployment: DeploymentName = None, as_json: Json = False) -> None:
    """Make current again the build that was current before (its workers must still run).

    Example: wolf deploy rollback
    """
    from agentwolf.ops.deployments import DeploymentError, rollback

    wolf = await conn.client("default")
    try:
        build_id, routed = await rollback(wolf.client, _name(deployment))
    except DeploymentError as exc:
        raise Exit(2, str(exc)) from None
    _switched(build_id, routed, as_json)


def _switched(build_id: str, routed: bool, as_json: bool) -> None:
    if as_json:
        out().print(json.dumps({"current": build_id, "routed": routed}))
    elif routed:
        out().print(f"current build: {build_id}")
    else:
        out().print(
            f"current build: {build_id} (the server still routes task queues to it: sessions see it soon)"
        )


@app.command("check-replay")
@verb
async def check_replay(
    conn: Connection,
    histories: Annotated[
        str | None,
        typer.Option(
            "--histories",
            metavar="DIR",
            help="Recorded histories (*.json) to replay (default: tests/histories when it exists).",
        ),
    ] = None,
    live: Annotated[
        int,
        typer.Option(
            "--live",
            metavar="N",
            help="Also replay N running sessions of the server, and up to N of each long-lived workflow "
            "type (quota workflows, config registries, schedule fires, eval runs and datasets; 0: none).",
        ),
    ] = 0,
    as_json: Json = False,
) -> None:
    """Replay recorded histories and a sample of live sessions against this installation's workflow
    code; name each one a deploy of it would break (exit 1), as a nondeterminism error would.

    Example: wolf check-replay --histories tests/histories --live 200 --address temporal:7233
    """

    from agentwolf.ops.replay_check import Broken, check_corpus, check_live

    folder = Path(histories or "tests/histories")
    if histories is None and not folder.is_dir() and not live:
        raise Exit(2, "nothing to replay: give --histories DIR, or --live N with a server's address")
    checked, broken = 0, list[Broken]()
    try:
        if histories is not None or folder.is_dir():
            checked, broken = await check_corpus(folder)
    except FileNotFoundError as exc:
        raise Exit(2, str(exc)) from None
    if live:
        wolf = await conn.client("default")
        sampled, more = await check_live(wolf.client, live)
        checked, broken = checked + sampled, broken + more
    if as_json:
        out().print(
            json.dumps(
                {"replayed": checked, "broken": [{"source": b.source, "error": b.error} for b in broken]}
            ),
            soft_wrap=True,
        )
    else:
        for b in broken:
            out().print(f"breaks: {b.source}: {b.error}")
        out().print(f"{checked} histories replayed, {len(broken)} would break")
    if broken:
        raise Exit(
            1,
            f"{len(broken)} of {checked} histories do not replay on this code: "
            "gate the change with workflow.patched()",
        )


SessionId = Annotated[str, typer.Argument(metavar="SESSION_ID", help="The session id.")]


@app.command(rich_help_panel="Sessions")
@verb
async def pause(
    conn: Connection,
    session: SessionId,
    reason: Annotated[
        str, typer.Option("--reason", "-r", metavar="TEXT", help="Why, shown to whoever looks.")
    ] = "wolf pause",
    tenant: Tenant = "default",
    as_json: Json = False,
) -> None:
    """Hold a session: its next step waits (nothing is cancelled) until `wolf unpause`; steers and
    approvals wait with it, prompts are refused meanwhile. For when a tool's backend is down.

    Example: wolf pause 3f2a9c1d0e7b --reason "search backend down"
    """
    from agentwolf.client.pausing import PauseError
    from agentwolf.client.pausing import pause as hold

    wolf = await conn.client(tenant)
    try:
        await hold(wolf.client, tenant, session, reason)
    except (PauseError, ValueError) as exc:
        raise Exit(2, str(exc)) from None
    if as_json:
        out().print(json.dumps({"session_id": session, "paused": True, "reason": reason}))
    else:
        out().print(f"paused {session}: `wolf unpause {session}` lets it go on")


@app.command(rich_help_panel="Sessions")
@verb
async def unpause(
    conn: Connection, session: SessionId, tenant: Tenant = "default", as_json: Json = False
) -> None:
    """Let a paused session go on: what waited (its next step, steers, approvals) runs now.

    Example: wolf unpause 3f2a9c1d0e7b
    """
    from agentwolf.client.pausing import PauseError
    from agentwolf.client.pausing import unpause as release

    wolf = await conn.client(tenant)
    try:
        await release(wolf.client, tenant, session)
    except (PauseError, ValueError) as exc:
        raise Exit(2, str(exc)) from None
    out().print(json.dumps({"session_id": session, "paused": False}) if as_json else f"unpaused {session}")
