"""Worker deployments as `wolf deploy` shows and switches them: thin over Temporal's deployment API.

Which builds a deployment has, which is current, how many running sessions each holds (pinned ones
finish on their build; idle ones move to the current build at their next continue-as-new), and the
switch: promote a build, or roll back to the one current before."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel
from temporalio.api.enums.v1 import WorkerDeploymentVersionStatus
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentwolf.worker.deployment import Deployment, patiently, set_current
from agentwolf.workflows.types import SESSION_WORKFLOW


class DeploymentError(Exception):
    """A deploy step that cannot be done, said in one sentence."""


class Build(BaseModel):
    build_id: str
    status: str
    """current, ramping, draining (pinned sessions still run), drained or inactive."""
    sessions: int
    """Running sessions on this build."""
    created: datetime | None = None
    last_current: datetime | None = None


class DeploymentStatus(BaseModel):
    name: str
    current: str | None
    builds: list[Build]


async def status(client: Client, name: str) -> DeploymentStatus:
    """The deployment's builds, newest first, with their running sessions."""
    try:
        described = await patiently(
            lambda: client.workflow_service.describe_worker_deployment(
                DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=name)
            )
        )
        info = described.worker_deployment_info
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise DeploymentError(
                f"no worker deployment {name!r} in namespace {client.namespace!r}: no versioned worker "
                "has polled it yet"
            ) from None
        raise
    builds = []
    for summary in info.version_summaries:
        build_id = summary.deployment_version.build_id
        count = await client.count_workflows(
            f"WorkflowType = '{SESSION_WORKFLOW}' AND ExecutionStatus = 'Running' "
            f"AND TemporalWorkerDeploymentVersion = '{name}:{build_id}'"
        )
        builds.append(
            Build(
                build_id=build_id,
                status=WorkerDeploymentVersionStatus.Name(summary.status)
                .removeprefix("WORKER_DEPLOYMENT_VERSION_STATUS_")
                .lower(),
                sessions=count.count,
                created=summary.create_time.ToDatetime() if summary.HasField("create_time") else None,
                last_current=(
                    summary.last_current_time.ToDatetime() if summary.HasField("last_current_time") else None
                ),
            )
        )
    builds.sort(key=lambda b: b.created or datetime.min, reverse=True)
    current = info.routing_config.current_deployment_version.build_id or None
    return DeploymentStatus(name=name, current=current, builds=builds)


async def promote(client: Client, name: str, build_id: str) -> bool:
    """Make `build_id` current: new sessions start on it, idle sessions move to it at their next
    continue-as-new, running turns finish on their own build. False while the server still propagates
    the switch to the deployment's task queues (after ROUTED_WITHIN seconds)."""
    try:
        return await set_current(client, Deployment(name, build_id))
    except (LookupError, ValueError) as exc:
        raise DeploymentError(str(exc)) from None


async def rollback(client: Client, name: str) -> tuple[str, bool]:
    """Make current again the build that was current before this one; returns its id, and whether
    the switch has reached the task queues yet (promote)."""
    found = await status(client, name)
    earlier = [b for b in found.builds if b.build_id != found.current and b.last_current is not None]
    if not earlier:
        raise DeploymentError(f"deployment {name!r} has had no other current build to roll back to")
    previous = max(earlier, key=lambda b: b.last_current or datetime.min)
    return previous.build_id, await promote(client, name, previous.build_id)
