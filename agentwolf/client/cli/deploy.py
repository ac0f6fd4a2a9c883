"""Deploy verbs: `wolf deploy status|promote|rollback` (worker deployments and their builds)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from agentwolf.client.cli.common import Exit, Json, out, verb
from agentwolf.client.cli.connection import Connection
from agentwolf.defaults import TASK_QUEUE

app = typer.Typer()
deploy = typer.Typer(
    help="Worker deployments: which builds serve how many sessions, and which one is current.",
    no_args_is_help=True,
)
app.add_typer(deploy, name="deploy")

DeploymentName = Annotated[
    str | None,
    typer.Option("--deployment", help="The worker deployment (default: the task queue's, 'agentwolf')."),
]

BuildId = Annotated[
    str | None,
    typer.Option("--build-id", help="This worker's build (default: version + workflow code digest)."),
]
Promote = Annotated[bool, typer.Option("--promote", help="Make this worker's build current once it polls.")]
Unversioned = Annotated[
    bool, typer.Option("--unversioned", help="Join no worker deployment (Temporal servers before 1.29).")
]


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
    from agentwolf.client.deployments import DeploymentError, status

    wolf = await conn.client("default")
    try:
        found = await status(wolf.client, _name(deployment))
    except DeploymentError as exc:
        raise Exit(2, str(exc)) from None
    if as_json:
        out().print(found.model_dump_json(), soft_wrap=True)
        return
    from agentwolf.client.cli.tables import print_table

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
    build_id: Annotated[str, typer.Argument(help="The build to make current (`wolf deploy status`).")],
    deployment: DeploymentName = None,
    as_json: Json = False,
) -> None:
    """Make a build current: new sessions start on it, idle ones move to it at their next
    continue-as-new, turns in flight finish on their own build.

    Example: wolf deploy promote 0.2.0-3f2a9c1d0e
    """
    from agentwolf.client.deployments import DeploymentError, promote

    wolf = await conn.client("default")
    try:
        await promote(wolf.client, _name(deployment), build_id)
    except DeploymentError as exc:
        raise Exit(2, str(exc)) from None
    out().print(json.dumps({"current": build_id}) if as_json else f"current build: {build_id}")


@deploy.command("rollback")
@verb
async def deploy_rollback(conn: Connection, deployment: DeploymentName = None, as_json: Json = False) -> None:
    """Make current again the build that was current before (its workers must still run).

    Example: wolf deploy rollback
    """
    from agentwolf.client.deployments import DeploymentError, rollback

    wolf = await conn.client("default")
    try:
        build_id = await rollback(wolf.client, _name(deployment))
    except DeploymentError as exc:
        raise Exit(2, str(exc)) from None
    out().print(json.dumps({"current": build_id}) if as_json else f"current build: {build_id}")
