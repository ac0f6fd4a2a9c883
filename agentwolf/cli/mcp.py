"""`wolf mcp`: AgentWolf's agents as an MCP server (agentwolf/protocols/mcp_server.py)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from agentwolf.cli.common import ConfigOpt, Tenant, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, err
from agentwolf.cli.stack import TaskQueue
from agentwolf.defaults import TASK_QUEUE

app = typer.Typer()


@app.command()
@verb
async def mcp(
    conn: Connection,
    transport: Annotated[
        Literal["stdio", "http"], typer.Option("--transport", help="stdio, or streamable HTTP at /mcp.")
    ] = "stdio",
    config: ConfigOpt = None,
    tenant: Tenant = "default",
    host: Annotated[
        str, typer.Option("--host", help="HTTP: address to bind (non-loopback needs API keys).")
    ] = ("127.0.0.1"),
    port: Annotated[int, typer.Option("--port", "-p", metavar="PORT", help="HTTP: port.")] = 8089,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="HTTP: serve as --tenant without API keys (loopback only).")
    ] = False,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy", metavar="FILE", help="HTTP: policy file with `api_keys:` and `cors_origins:`."
        ),
    ] = None,
    task_queue: TaskQueue = TASK_QUEUE,
) -> None:
    """Serve the config's agents as MCP tools (ask_AGENT); sessions outlive this process. Over stdio
    it acts as --tenant; over HTTP, each API key's tenant (as wolf serve, which mounts it at /mcp too).

    Example: wolf mcp --config wolf.yaml
    """
    from agentwolf.cli.extras import require

    require("serve", "mcp")
    from agentwolf.access import Principal
    from agentwolf.cli.sources import config_source
    from agentwolf.config.policy import load_policy
    from agentwolf.protocols.auth import ApiKeys
    from agentwolf.protocols.mcp_server import WolfMCP, http_routes
    from agentwolf.protocols.server import BindingRefused, CannotListen, check_binding, serve_app, served_by

    keys, origins = ApiKeys([]), list[str]()
    if transport == "http":
        try:
            loaded = load_policy(policy)
            keys, origins = ApiKeys.load(loaded.api_keys), loaded.cors_origins
            check_binding(host, keys, no_auth, origins)
        except (ValueError, BindingRefused) as exc:
            raise Exit(2, str(exc)) from None
    source = config_source(config)
    wolf = await conn.client(tenant, start_local=True, task_queue=task_queue)
    served = served_by(wolf, source, keys, no_auth=no_auth, cors_origins=origins)
    if transport == "stdio":
        await WolfMCP(served, Principal(wolf.tenant)).run_stdio_async()
        return
    try:
        await serve_app(
            served,
            host=host,
            port=port,
            routes=http_routes(served),
            listening=lambda _: err().print(f"serving MCP on http://{host}:{port}/mcp; Ctrl-C stops"),
        )
    except CannotListen as exc:
        raise Exit(2, f"{exc}: another process uses it? Pick another --port") from None
