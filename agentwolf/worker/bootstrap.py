"""Worker bootstrap: registers the session workflow and activities, owns the host registry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Interceptor, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxRestrictions

from agentwolf.activities.acp import AcpActivities, home_queue
from agentwolf.activities.code import CodeActivities
from agentwolf.activities.config_notify import config_notify
from agentwolf.activities.evals import EvalActivities, eval_steps
from agentwolf.activities.memory import MemoryActivities
from agentwolf.activities.schedule import deliver_prompt, registry_job_session
from agentwolf.activities.session import SessionActivities
from agentwolf.activities.web import WebActivities
from agentwolf.activities.workspace import WorkspaceActivities
from agentwolf.config.policy import WorkerPolicy, redact_logs
from agentwolf.defaults import TASK_QUEUE
from agentwolf.hosts.host import Notify
from agentwolf.hosts.host_registry import HostRegistry
from agentwolf.hosts.quotas import Quotas
from agentwolf.isolation import protect_process
from agentwolf.plugins import LocalModel, Plugins
from agentwolf.telemetry import tracing
from agentwolf.telemetry.interceptor import ActivityContext
from agentwolf.worker.deployment import Deployment
from agentwolf.worker.memory import Trimmer, tune_malloc
from agentwolf.worker.sandbox import CachingSandboxedWorkflowRunner
from agentwolf.workflows.configs.config_registry import ConfigRegistryWorkflow
from agentwolf.workflows.evals.datasets import EvalDatasetWorkflow
from agentwolf.workflows.evals.run import EvalRunWorkflow
from agentwolf.workflows.quotas import QuotaWorkflow
from agentwolf.workflows.schedule import ScheduleFireWorkflow
from agentwolf.workflows.session.pinned import PinnedSessionWorkflow
from agentwolf.workflows.session.workflow import SessionWorkflow
from agentwolf.workflows.types import ExtensionsChanged

log = logging.getLogger(__name__)

HEARTBEAT_THROTTLE_MS = 100
"""At most one heartbeat per this many ms per activity reaches the server (the SDK sends the newest)."""
WORKFLOW_TASK_SLOTS = 20
"""Workflow tasks a worker runs at once (temporalio's default: 100). Activations are Python under one
GIL: more at once adds no throughput, only wait; on a busy CPU a burst of 100 (10,000 sessions
starting) kept each activation waiting past the SDK's 2 s deadlock limit, failing their tasks."""
WORKFLOWS = [
    SessionWorkflow,
    ConfigRegistryWorkflow,
    ScheduleFireWorkflow,
    QuotaWorkflow,
    EvalRunWorkflow,
    EvalDatasetWorkflow,
]
VERSIONED_WORKFLOWS = [PinnedSessionWorkflow, *WORKFLOWS[1:]]
"""A versioned worker's: sessions pinned to their build, the rest auto-upgrading (Deployment.config)."""

# Workflow code runs in the sandbox, so a clock, random or I/O call in it fails the task instead of
# breaking replay. Only pure-data modules pass through: the libraries here, and AgentWolf's own data
# modules, which the workflows import inside `imports_passed_through()`. Workflow modules are
# compiled once per process, not once per run (agentwolf/worker/sandbox.py).
SANDBOX = CachingSandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules("pydantic_ai", "pydantic")
)


def create_worker(
    client: Client,
    *,
    task_queue: str = TASK_QUEUE,
    host_idle_timeout: float = 1800.0,
    local_models: Mapping[str, LocalModel] | None = None,
    plugins: Plugins | None = None,
    policy: WorkerPolicy | None = None,
    tenant: str | None = None,
    max_concurrent_activities: int = 200,
    max_concurrent_workflow_tasks: int = WORKFLOW_TASK_SLOTS,
    workflow_runner: WorkflowRunner = SANDBOX,
    deployment: Deployment | None = None,
) -> tuple[Worker, HostRegistry]:
    """A worker for sessions; `local_models` registers in-process models (`local:<name>` in manifests),
    `plugins` (`load_plugins()`) their models and function tools, `policy` limits what manifests reach
    (default: `load_policy()`'s), `tenant` is the only one served, `deployment` the worker deployment
    and build it joins (None: unversioned). Its HostRegistry is built whole here, with the
    limiters' client (`Flow`) and the signal that tells sessions of changed extensions.

    The process becomes non-dumpable, so the MCP servers it starts cannot read its environment, and
    its malloc is tuned for a long life (worker/memory.py)."""
    protect_process()
    tune_malloc()
    redact_logs()
    policy = policy or WorkerPolicy()
    hosts = HostRegistry(
        local_models,
        plugins=plugins,
        policy=policy,
        tenant=tenant,
        host_idle_timeout=host_idle_timeout,
        notify=_signaller(client),
        quotas=Quotas(client, task_queue, policy.quotas),
    )
    activities, code = SessionActivities(hosts), CodeActivities(hosts)
    acp = AcpActivities(activities)
    workspace = WorkspaceActivities(activities)
    options = _options(client, deployment)
    home = Worker(
        client,
        task_queue=home_queue(task_queue),
        activities=[acp.turn, activities.release_session, workspace.call, workspace.release],
        **options,
    )
    worker = SessionWorker(
        client,
        home=home,
        task_queue=task_queue,
        workflows=VERSIONED_WORKFLOWS if deployment else WORKFLOWS,
        activities=[
            activities.compile,
            activities.model_request,
            activities.compact_summary,
            activities.archive_transcript,
            activities.read_archived,
            activities.call_tool,
            activities.read_skill,
            activities.expand_command,
            activities.release_session,
            code.code_start,
            code.code_resume,
            WebActivities(hosts).web,
            MemoryActivities(activities).memory,
            MemoryActivities(activities).memory_extract,
            config_notify,
            deliver_prompt,
            registry_job_session,
            eval_steps,
            EvalActivities(hosts).eval_score,
            acp.home,
            workspace.call_here,
        ],
        workflow_runner=workflow_runner,
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_workflow_tasks=max_concurrent_workflow_tasks,
        **options,
    )
    return worker, hosts


class SessionWorker(Worker):
    """The session worker, and beside it the worker of this host's own task queue, where the turns of
    ACP agents run (their processes live on one host): it runs and stops with this one, and so does
    the trimmer that returns the process's freed memory (worker/memory.py)."""

    def __init__(self, *args: Any, home: Worker, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.home = home
        self.trimmer = Trimmer()

    async def run(self) -> None:
        home = asyncio.create_task(self.home.run())
        trimmer = asyncio.create_task(self.trimmer.run())
        try:
            await super().run()
        finally:
            trimmer.cancel()
            await self.home.shutdown()
            await asyncio.gather(home, trimmer, return_exceptions=True)


def _options(client: Client, deployment: Deployment | None) -> dict[str, Any]:
    """What the session worker and its home worker share."""
    return dict(
        interceptors=_interceptors(client),
        # Interrupts reach activities through heartbeat replies, and followers read live text from
        # heartbeat details: keep the throttle short.
        max_heartbeat_throttle_interval=timedelta(milliseconds=HEARTBEAT_THROTTLE_MS),
        default_heartbeat_throttle_interval=timedelta(milliseconds=HEARTBEAT_THROTTLE_MS),
        graceful_shutdown_timeout=timedelta(seconds=10),
        deployment_config=deployment.config() if deployment else None,
    )


def _interceptors(client: Client) -> list[Interceptor]:
    """Tracing (when `OTEL_*` asks for it) unless the client brings it, then the activities' log ids.
    A worker applies its client's interceptors first: the tracing span is current in ours."""
    return [*tracing.interceptors(client.config()["interceptors"]), ActivityContext()]


def _signaller(client: Client) -> Notify:
    async def notify(workflow_id: str, change: ExtensionsChanged) -> None:
        await client.get_workflow_handle(workflow_id).signal("extensions_changed", change)

    return notify


async def run_worker(worker: Worker, hosts: HostRegistry, stop: asyncio.Event) -> None:
    """Run until `stop` is set; then drain activities, then close every host's MCP clients."""
    task = asyncio.create_task(worker.run())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if not task.done():
        await worker.shutdown()
    try:
        await task
    finally:
        await hosts.close()
