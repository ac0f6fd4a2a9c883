"""Worker deployments (Temporal Worker Versioning): which build a worker is, and making it current.

A session is pinned to the build it started on, so a deploy never replays a running session on code
that would emit other commands; it moves to the current build at its next idle continue-as-new
(agentwolf/workflows/session/loop.py). The build id changes whenever workflow code changes: the package
version plus a digest of agentwolf/workflows, whose code decides the commands a session emits."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TypeVar

from google.protobuf.field_mask_pb2 import FieldMask
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import RoutingConfigUpdateState
from temporalio.api.workflow.v1 import VersioningOverride, WorkflowExecutionOptions
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    UpdateWorkflowExecutionOptionsRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

import agentwolf.workflows

log = logging.getLogger(__name__)
T = TypeVar("T")

WORKFLOW_SOURCES = Path(agentwolf.workflows.__file__).parent


@dataclass(frozen=True)
class Deployment:
    """A worker deployment (one per task queue by default) and the build this worker runs."""

    name: str
    build_id: str

    def __post_init__(self) -> None:
        if not self.name or "." in self.name:
            raise ValueError(f"a deployment name is non-empty and has no '.': {self.name!r}")
        if not self.build_id:
            raise ValueError("a build id is non-empty")

    @property
    def version(self) -> WorkerDeploymentVersion:
        return WorkerDeploymentVersion(self.name, self.build_id)

    def config(self) -> WorkerDeploymentConfig:
        """Versioned polling. Sessions declare PINNED (PinnedSessionWorkflow); the small long-lived
        workflows (config registry, quota workflow, schedule fires) move to the current build at their next
        task, as before versioning: pinned, they would wait for ever once their build's workers stop."""
        return WorkerDeploymentConfig(
            version=self.version,
            use_worker_versioning=True,
            default_versioning_behavior=VersioningBehavior.AUTO_UPGRADE,
        )


def default_build_id() -> str:
    """`<package version>-<digest of the workflow code>`: a new build whenever what sessions run changes."""
    digest = hashlib.sha256()
    for path in sorted(WORKFLOW_SOURCES.rglob("*.py")):
        digest.update(path.relative_to(WORKFLOW_SOURCES).as_posix().encode())
        digest.update(path.read_bytes())
    return f"{version('agentwolf')}-{digest.hexdigest()[:10]}"


def default_name(task_queue: str) -> str:
    """The deployment a task queue's workers join unless told: named after the queue ('.' is reserved)."""
    return task_queue.replace(".", "-")


ROUTED_WITHIN = 30.0
"""Seconds a switch of the current build may take to reach every task queue of the deployment."""
THROTTLED_FOR = 30.0
"""Seconds a deployment call retries while the server refuses it as too many (it limits requests per
deployment, and the workers of a build starting at once all ask)."""


async def patiently(call: Callable[[], Awaitable[T]]) -> T:
    """`call()`, again after a pause while the server says the deployment has too many requests."""
    deadline = time.monotonic() + THROTTLED_FOR
    delay = 0.5
    while True:
        try:
            return await call()
        except RPCError as exc:
            if exc.status != RPCStatusCode.RESOURCE_EXHAUSTED or time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 4.0)


async def current_build(client: Client, name: str, *, routed: bool = False) -> str | None:
    """The deployment's current build id; None when it has none or does not exist yet. `routed`:
    None too while the switch to it has not reached every task queue (sessions would not see it yet)."""
    try:
        described = await patiently(
            lambda: client.workflow_service.describe_worker_deployment(
                DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=name)
            )
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    info = described.worker_deployment_info
    if (
        routed
        and info.routing_config_update_state
        == RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS
    ):
        return None
    return info.routing_config.current_deployment_version.build_id or None


async def set_current(client: Client, deployment: Deployment, *, wait: float = 0.0) -> bool:
    """Make this build the current one: new sessions start on it, idle ones move to it at their next
    input. `wait`: seconds to retry while the server does not know the build yet (its workers are
    starting). True once the switch has reached the deployment's task queues (sessions see it), False
    if it has not within ROUTED_WITHIN seconds (the server goes on propagating it)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            await patiently(
                lambda: client.workflow_service.set_worker_deployment_current_version(
                    SetWorkerDeploymentCurrentVersionRequest(
                        namespace=client.namespace,
                        deployment_name=deployment.name,
                        build_id=deployment.build_id,
                        ignore_missing_task_queues=True,
                        identity=client.identity,
                    )
                )
            )
            break
        except RPCError as exc:
            if exc.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
                raise
            if time.monotonic() > deadline:
                raise LookupError(
                    f"build {deployment.build_id!r} of deployment {deployment.name!r} has no worker "
                    f"polling: start one first ({exc.message})"
                ) from None
        await asyncio.sleep(0.5)
    routed_by = time.monotonic() + ROUTED_WITHIN
    while await current_build(client, deployment.name, routed=True) != deployment.build_id:
        if time.monotonic() > routed_by:
            return False
        await asyncio.sleep(0.5)  # the server limits requests per deployment
    return True


async def take_current(client: Client, deployment: Deployment, *, always: bool, sole: bool = False) -> None:
    """Once this worker polls: make its build current when `always`, or when the deployment has none
    yet (its first deploy); else say how to promote it. `sole`: no other worker of the deployment
    runs (the local stack), so sessions pinned to another build move here, or they would wait for ever."""
    try:
        current = await current_build(client, deployment.name)
        if current != deployment.build_id and (always or sole or current is None):
            await set_current(client, deployment, wait=60.0)
            log.info("build %s is now current in deployment %s", deployment.build_id, deployment.name)
        elif current != deployment.build_id:
            log.warning(
                "build %s is not current (deployment %s runs %s): it takes sessions once "
                "`wolf deploy promote %s`",
                deployment.build_id,
                deployment.name,
                current,
                deployment.build_id,
            )
        if sole and (moved := await adopt_pinned(client, deployment)):
            log.info(
                "%d sessions pinned to builds no worker runs moved to build %s", moved, deployment.build_id
            )
    except (RPCError, LookupError) as exc:
        log.error("could not join deployment %s as build %s: %s", deployment.name, deployment.build_id, exc)


async def adopt_pinned(client: Client, deployment: Deployment) -> int:
    """Move the deployment's running workflows that are on other builds to the current one (they upgrade
    with each later build too): for a stack with one worker, whose earlier builds are gone."""
    query = (
        f"TemporalWorkerDeployment = '{deployment.name}' AND ExecutionStatus = 'Running' "
        f"AND TemporalWorkerDeploymentVersion != '{deployment.name}:{deployment.build_id}'"
    )
    moved = 0
    async for found in client.list_workflows(query):
        await client.workflow_service.update_workflow_execution_options(
            UpdateWorkflowExecutionOptionsRequest(
                namespace=client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=found.id, run_id=found.run_id),
                workflow_execution_options=WorkflowExecutionOptions(
                    versioning_override=VersioningOverride(auto_upgrade=True)
                ),
                update_mask=FieldMask(paths=["versioning_override"]),
                identity=client.identity,
            )
        )
        moved += 1
    return moved


def from_flags(
    task_queue: str, name: str | None, build_id: str | None, *, versioned: bool = False
) -> Deployment | None:
    """The deployment a worker's flags ask for: none unless one is named (`--deployment`, `--build-id`)
    or `versioned` (`--promote`, the local stack's worker); then by default the task queue's, as the
    working code's build. Opt-in, because a queue whose deployment has a current build no longer
    hands new sessions to unversioned workers (`create_worker`, older fleets): mixing them starves
    those."""
    if not (versioned or name or build_id):
        return None
    return Deployment(name or default_name(task_queue), build_id or default_build_id())
