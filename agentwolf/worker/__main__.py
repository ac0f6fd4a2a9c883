"""`python -m agentwolf.worker [--address HOST:PORT] [--task-queue Q] [--tenant T] [--policy FILE]
[--plugin MODULE ...] [--metrics-port P] [--log-level L] [--log-format text|json] [--deployment NAME]
[--build-id ID] [--promote] [--sole]`: run a worker until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from collections.abc import Sequence

from temporalio.client import Client

from agentwolf.config.policy import load_policy
from agentwolf.connection import connect
from agentwolf.plugins import PluginError, load_plugins
from agentwolf.telemetry import logs, metrics
from agentwolf.worker.bootstrap import TASK_QUEUE, create_worker, run_worker
from agentwolf.worker.deployment import Deployment, from_flags, take_current
from agentwolf.worker.memory import tune_malloc


async def serve(
    address: str | None,
    namespace: str | None,
    task_queue: str,
    *,
    tenant: str | None = None,
    policy: str | None = None,
    plugins: Sequence[str] = (),
    connect_for: float = 120.0,
    metrics_port: int | None = None,
    deployment: Deployment | None = None,
    promote: bool = False,
    sole: bool = False,
) -> None:
    """`tenant`: serve only that tenant's sessions; `policy`: the worker policy file (else the default
    lookup); `plugins`: modules to load besides the installed `agentwolf.plugins` entry points (a
    plugin that cannot load raises PluginError before anything connects); `metrics_port`: serve
    Prometheus metrics (Temporal's and AgentWolf's) on that port; `deployment`: the worker deployment
    and build it joins, its build made current when `promote` or first (`sole`: take_current)."""
    tune_malloc()  # before connecting starts the Temporal core's threads
    worker_policy = load_policy(policy)
    loaded = load_plugins(plugins)
    log = logging.getLogger(__name__)
    log.info("worker policy: %s", worker_policy.source)
    for line in loaded.describe():
        log.info(line)
    if worker_policy.commands is None:
        log.warning("the worker policy allows any command for MCP servers: run only manifests you trust")
    if metrics_port is not None:
        metrics.serve(metrics_port)
        log.info("Prometheus metrics on :%d/metrics", metrics_port)
    client = await _connect_patiently(address, namespace, connect_for)
    worker, hosts = create_worker(
        client,
        task_queue=task_queue,
        plugins=loaded,
        policy=worker_policy,
        tenant=tenant,
        deployment=deployment,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    logging.getLogger(__name__).info("worker ready on task queue %s", task_queue)
    joining = None
    if deployment is not None:
        log.info("deployment %s, build %s", deployment.name, deployment.build_id)
        joining = asyncio.create_task(take_current(client, deployment, always=promote, sole=sole))
    try:
        await run_worker(worker, hosts, stop)
    finally:
        if joining is not None:
            joining.cancel()


async def _connect_patiently(address: str | None, namespace: str | None, give_up_after: float) -> Client:
    """A worker may start while the server is (re)starting: retry with backoff before giving up."""
    log = logging.getLogger(__name__)
    deadline = time.monotonic() + give_up_after
    delay = 0.5
    while True:
        try:
            return await connect(address, namespace)
        except RuntimeError as exc:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("%s; retrying in %.1fs", str(exc).splitlines()[0][:160], delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address")
    parser.add_argument("--namespace")
    parser.add_argument("--task-queue", default=TASK_QUEUE)
    parser.add_argument("--tenant", help="serve only this tenant's sessions")
    parser.add_argument(
        "--policy", help="the worker policy file (default: $WOLF_POLICY, else $WOLF_HOME/policy.yaml)"
    )
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="a plugin module to load (repeatable), besides installed agentwolf.plugins entry points",
    )
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--log-format", choices=["text", "json"], default="text")
    parser.add_argument("--deployment", help="the worker deployment to join (default: the task queue's name)")
    parser.add_argument("--build-id", help="this worker's build (default: version and workflow code digest)")
    parser.add_argument("--promote", action="store_true", help="make this build current once it polls")
    parser.add_argument("--sole", action="store_true", help=argparse.SUPPRESS)  # the local stack's worker
    args = parser.parse_args()
    logs.configure(args.log_level, args.log_format)
    try:
        asyncio.run(
            serve(
                args.address,
                args.namespace,
                args.task_queue,
                tenant=args.tenant,
                policy=args.policy,
                plugins=args.plugin,
                metrics_port=args.metrics_port,
                deployment=from_flags(
                    args.task_queue, args.deployment, args.build_id, versioned=args.promote or args.sole
                ),
                promote=args.promote,
                sole=args.sole,
            )
        )
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
