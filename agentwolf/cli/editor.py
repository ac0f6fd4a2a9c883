"""`wolf acp`: serve an agent to an editor over the Agent Client Protocol on stdin/stdout."""

from __future__ import annotations

import typer

from agentwolf.cli.common import Agent, ConfigOpt, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.stack import TaskQueue
from agentwolf.defaults import TASK_QUEUE

app = typer.Typer()


@app.command()
@verb
async def acp(
    conn: Connection,
    agent: Agent = None,
    config: ConfigOpt = None,
    tenant: Tenant = "default",
    task_queue: TaskQueue = TASK_QUEUE,
) -> None:
    """Serve AGENT to an editor (Zed, any ACP client) on stdin/stdout; sessions outlive the editor.

    stdout carries only the protocol; notices go to stderr. The editor's session/load reattaches to
    any session of the tenant that runs AGENT from this config, running turns included.

    Example: wolf acp -a assistant -c wolf.yaml
    """
    from agentwolf.cli.sources import config_source, pick_agent, source_args
    from agentwolf.protocols.acp import Served, serve_stdio

    source = config_source(config)
    agent = pick_agent(None if isinstance(source, str) else source, agent)
    wolf = await conn.client(tenant, start_local=True, task_queue=task_queue)
    await serve_stdio(wolf, Served(agent, source_args(source)))
