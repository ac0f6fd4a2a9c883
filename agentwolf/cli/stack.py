"""Running AgentWolf: `worker` (any cluster), the embedded local stack (`up`, `down`, `dev`), `serve`
(HTTP front ends) and `setup` (a cluster namespace's search attributes)."""

from __future__ import annotations

import json
import os
from typing import Annotated, Any

import typer

from agentwolf.cli.common import ConfigOpt, Json, verb
from agentwolf.cli.connection import Connection
from agentwolf.cli.console import Exit, err, out
from agentwolf.cli.deploy import BuildId, DeploymentName, Promote
from agentwolf.cli.observability import LogFormat, LogLevel, MetricsPort, worker_flags
from agentwolf.defaults import TASK_QUEUE

app = typer.Typer()

TaskQueue = Annotated[
    str, typer.Option("--task-queue", envvar="WOLF_TASK_QUEUE", metavar="QUEUE", help="The workers' queue.")
]
Plugins = Annotated[
    list[str] | None,
    typer.Option(
        "--plugin",
        metavar="MODULE",
        help="A plugin module to load (repeatable), besides installed agentwolf.plugins entry points.",
    ),
]
DEV_STOP_GRACE = 0.8
"""Seconds `wolf dev` gives each process to stop after Ctrl-C before killing it (both within 2 s)."""


@app.command()
@verb
async def worker(
    conn: Connection,
    task_queue: TaskQueue = TASK_QUEUE,
    tenant: Annotated[
        str | None,
        typer.Option(
            "--tenant",
            "-t",
            metavar="TENANT",
            help="Serve only this tenant, in its namespace when WOLF_TENANT_NAMESPACES maps one.",
        ),
    ] = None,
    policy: Annotated[
        str | None,
        typer.Option(
            "--policy",
            metavar="FILE",
            help="Worker policy file (default: $WOLF_POLICY, else $WOLF_HOME/policy.yaml).",
        ),
    ] = None,
    plugin: Plugins = None,
    metrics_port: MetricsPort = None,
    log_level: LogLevel = "INFO",
    log_format: LogFormat = "text",
    deployment: DeploymentName = None,
    build_id: BuildId = None,
    promote: Promote = False,
) -> None:
    """Run a worker in the foreground (for any Temporal cluster); a worker serves one namespace.

    With --deployment, --build-id or --promote it joins a worker deployment as one build (its first
    build becomes current; later ones by promote): give them to every worker of the task queue.

    Example: wolf worker --profile prod --task-queue agentwolf --plugin my_tools --metrics-port 9464
    """
    from agentwolf.access import check_tenant_name, namespace_for
    from agentwolf.telemetry import logs
    from agentwolf.worker.__main__ import serve
    from agentwolf.worker.deployment import from_flags

    logs.configure(log_level, log_format)
    if tenant:
        check_tenant_name(tenant)
    # The worker connects through envconfig too: the flags it has no parameter for go by environment.
    for name, value in (("TEMPORAL_PROFILE", conn.profile), ("TEMPORAL_API_KEY", conn.api_key)):
        if value:
            os.environ[name] = value
    if conn.tls is not None:
        os.environ["TEMPORAL_TLS"] = "true" if conn.tls else "false"
    namespace = (namespace_for(tenant) if tenant else None) or conn.namespace
    await serve(
        conn.address,
        namespace,
        task_queue,
        tenant=tenant,
        policy=policy,
        plugins=plugin or [],
        metrics_port=metrics_port,
        deployment=from_flags(task_queue, deployment, build_id, versioned=promote),
        promote=promote,
    )


@app.command()
@verb
async def up(
    as_json: Json = False,
    plugin: Plugins = None,
    restart: Annotated[
        bool,
        typer.Option(
            "--restart", help="Restart a running worker, so it takes this shell's variables (keys, OTEL_*)."
        ),
    ] = False,
    metrics_port: MetricsPort = None,
    log_level: LogLevel = "INFO",
    log_format: LogFormat = "text",
) -> None:
    """Start the embedded local stack (dev server on SQLite + a worker) in the background and wait
    until the worker polls (exit 3, with the end of its log, if it dies). With --plugin, its worker
    loads those plugins (found on this shell's PYTHONPATH, remembered for later starts);
    --metrics-port and the log options are the worker's (a worker running with other plugins or
    options restarts). A running worker keeps its environment variables unless --restart.

    Example: wolf up --plugin my_tools --json
    """
    from agentwolf.cli.connection import kept_env_note
    from agentwolf.ops import local_stack

    flags = worker_flags(metrics_port, log_level, log_format)
    st = await local_stack.start(plugins=plugin, flags=flags, restart=restart)
    info: dict[str, Any] = {
        "address": st.address,
        "ui": st.ui,
        "server_pid": st.server_pid,
        "worker_pid": st.worker_pid,
        "started": st.started,
        "data": str(local_stack.data_dir()),
        "plugins": st.plugins,
        "metrics": st.metrics,
    }
    if st.changed:
        info["restarted_worker_because"] = f"{', '.join(st.changed)} changed since it started"
    elif restart and "worker" in st.started:
        info["restarted_worker_because"] = "--restart"
    if st.kept_env:
        info["note"] = kept_env_note(st.kept_env)
    if as_json:
        out().print(json.dumps(info))
        return
    info["started"] = ", ".join(st.started) or "nothing (all running)"
    info["plugins"] = ", ".join(st.plugins) or "none"
    info["metrics"] = st.metrics or "off (--metrics-port PORT serves them)"
    out().print("\n".join(f"{k}: {v}" for k, v in info.items()))


@app.command()
@verb
async def down(as_json: Json = False) -> None:
    """Stop the embedded local stack.

    Example: wolf down
    """
    from agentwolf.ops import local_stack

    stopped = local_stack.down()
    out().print(
        json.dumps({"stopped": stopped})
        if as_json
        else f"stopped: {', '.join(stopped) or 'nothing was running'}"
    )


@app.command()
@verb
async def dev(
    metrics_port: MetricsPort = None, log_level: LogLevel = "INFO", log_format: LogFormat = "text"
) -> None:
    """The embedded local stack in the foreground until Ctrl-C (its worker logs to worker.log in
    the data folder, with these options).

    Example: wolf dev --metrics-port 9464 --log-format json
    """
    import asyncio

    from agentwolf.ops import local_stack
    from agentwolf.telemetry import logs

    logs.configure(log_level, log_format)
    try:  # a worker that dies at start (exit 3) takes the server `dev` started with it
        st = await local_stack.start(flags=worker_flags(metrics_port, log_level, log_format))
        out().print(f"server {st.address}, UI {st.ui}, worker pid {st.worker_pid}; Ctrl-C stops both")
        await asyncio.Event().wait()
    except asyncio.CancelledError:  # Ctrl-C: how `dev` is meant to end (exit 0)
        pass
    finally:
        out().print(f"stopped: {', '.join(local_stack.down(timeout=DEV_STOP_GRACE)) or 'nothing'}")


ServeHost = Annotated[str, typer.Option("--host", help="Address to bind (non-loopback needs API keys).")]
ServePort = Annotated[int, typer.Option("--port", "-p", metavar="PORT", help="Port to listen on.")]
ServeTenant = Annotated[
    str,
    typer.Option(
        "--tenant",
        "-t",
        envvar="WOLF_TENANT",
        metavar="TENANT",
        help="The tenant of --no-auth requests and of webhooks.",
    ),
]
NoAuth = Annotated[bool, typer.Option("--no-auth", help="Serve without API keys (loopback only).")]
ServePolicy = Annotated[
    str | None,
    typer.Option("--policy", metavar="FILE", help="Policy file with `api_keys:` and `cors_origins:`."),
]
CorsOrigins = Annotated[
    list[str] | None,
    typer.Option(
        "--cors-origin",
        metavar="ORIGIN",
        help="A web origin (scheme://host[:port], or '*' for any) whose pages may call from a "
        "browser; repeatable, adds to the policy's cors_origins. Default: none.",
    ),
]
ForwardedAllowIps = Annotated[
    str | None,
    typer.Option(
        "--forwarded-allow-ips",
        help="Addresses or networks (comma-separated, '*' for any) of the TLS proxies whose "
        "X-Forwarded-Proto/-For to believe. Default: FORWARDED_ALLOW_IPS, else 127.0.0.1.",
    ),
]


@app.command(rich_help_panel="Front ends")
@verb
async def serve(
    conn: Connection,
    host: ServeHost = "127.0.0.1",
    port: ServePort = 8088,
    config: ConfigOpt = None,
    tenant: ServeTenant = "default",
    no_auth: NoAuth = False,
    policy: ServePolicy = None,
    cors_origin: CorsOrigins = None,
    forwarded_allow_ips: ForwardedAllowIps = None,
    task_queue: TaskQueue = TASK_QUEUE,
    log_level: LogLevel = "INFO",
    log_format: LogFormat = "text",
) -> None:
    """Serve agents over HTTP: /v1 (OpenAI), /agui, /mcp, /a2a, /hooks and the web console /console.

    API keys come from WOLF_API_KEYS or the policy; pages of --cors-origin origins may call from a
    browser.

    Example: wolf serve --no-auth --port 8088 --cors-origin http://localhost:3000
    """
    from agentwolf.cli.extras import require

    require("serve", "serve")  # before anything it imports: ag_ui, say, only loads with the first route
    from agentwolf.cli.sources import config_source
    from agentwolf.config.origins import web_origin
    from agentwolf.config.policy import load_policy
    from agentwolf.protocols.auth import ApiKeys
    from agentwolf.protocols.server import BindingRefused, CannotListen, check_binding
    from agentwolf.protocols.server import serve as run_server
    from agentwolf.protocols.sign_ins import SignIns
    from agentwolf.telemetry import logs

    logs.configure(log_level, log_format)
    try:
        loaded = load_policy(policy)
        keys = ApiKeys.load(loaded.api_keys)
        origins = [*loaded.cors_origins, *(web_origin(o) for o in cors_origin or ())]
        check_binding(host, keys, no_auth, origins)
        sign_ins = SignIns.from_env()
    except (ValueError, BindingRefused) as exc:
        raise Exit(2, str(exc)) from None
    source = config_source(config)
    wolf = await conn.client(tenant, start_local=True, task_queue=task_queue)

    def listening(front_ends: list[str]) -> None:
        err().print(f"serving on http://{host}:{port} ({', '.join(front_ends)}); Ctrl-C stops")

    try:
        await run_server(
            wolf,
            source,
            keys,
            host=host,
            port=port,
            no_auth=no_auth,
            cors_origins=origins,
            sign_ins=sign_ins,
            forwarded_allow_ips=forwarded_allow_ips,
            listening=listening,
        )
    except CannotListen as exc:
        raise Exit(2, f"{exc}: another process uses it? Pick another --port") from None


@app.command()
@verb
async def setup(conn: Connection, as_json: Json = False) -> None:
    """Register AgentWolf's search attributes on a namespace of your cluster (idempotent).

    The embedded local stack registers them itself; a cluster's namespace needs this once.

    Example: wolf setup --profile prod --namespace agents
    """
    from agentwolf.ops.setup import register_search_attributes

    wolf = await conn.client("default")
    added = await register_search_attributes(wolf.client)
    namespace = wolf.client.namespace
    if as_json:
        out().print(json.dumps({"namespace": namespace, "added": added}))
    elif added:
        out().print(f"registered {', '.join(added)} on namespace {namespace}")
    else:
        out().print(f"namespace {namespace} already has AgentWolf's search attributes")
