"""Temporal's answers that have a known fix, said as a sentence that names the fix."""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from agentwolf.cli.console import Exit, err, literal

if TYPE_CHECKING:
    from temporalio.service import RPCError

    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.connection import TemporalUnreachable

T = TypeVar("T")

START_A_WORKER = "start one with `wolf up` (the embedded local stack) or `wolf worker` (any cluster)"


def explain_rpc(exc: RPCError) -> tuple[str, int]:
    """The sentence to print for a refused call, and the exit code."""
    message = exc.message
    if "search attribute" in message.lower() and "Wolf" in message:  # WolfTenant, WolfState...
        fix = "register them with `wolf setup` (same --namespace/--profile)"
        return f"this namespace lacks AgentWolf's search attributes ({message}); {fix}", 2
    if "no poller seen" in message:
        return f"no worker polls this session's task queue: {START_A_WORKER}", 3
    return message, 2


def explain_unreachable(exc: TemporalUnreachable) -> str:
    """Why Temporal cannot be reached and what to do, in one sentence (exit 3)."""
    if "credentials" in exc.reason or "TLS" in exc.reason:
        fix = "check --api-key/TEMPORAL_API_KEY and --tls/TEMPORAL_TLS (or the --profile's)"
    else:
        fix = (
            "start the embedded local stack with `wolf up`, or name your server with"
            " --address HOST:PORT (or TEMPORAL_ADDRESS, or a --profile)"
        )
    return f"{exc}; {fix}"


async def worker_polls(wolf: WolfClient, task_queue: str) -> bool:
    """Whether any worker has polled `task_queue` lately (a 2 s question to the server) and was not
    a process of this host that has exited (Temporal lists a dead worker's poller for minutes)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace=wolf.client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    from agentwolf.ops.local_stack import polls_from_a_dead_process

    described = await wolf.client.workflow_service.describe_task_queue(request, timeout=timedelta(seconds=2))
    return any(not polls_from_a_dead_process(poller.identity) for poller in described.pollers)


async def with_worker(wolf: WolfClient, session_id: str, ask: Awaitable[T]) -> T:
    """`ask` (what needs the session's worker: a query), sent while `check_worker` runs rather than
    after it, a round trip sooner; when no worker polls, that error is the one said."""
    import asyncio  # not at the top: `wolf --help` does without it

    asking = asyncio.ensure_future(ask)
    try:
        await check_worker(wolf, required=True, session_id=session_id)
    except BaseException:
        asking.cancel()
        await asyncio.gather(asking, return_exceptions=True)  # its outcome is not the one to say
        raise
    return await asking


async def _session_queue(wolf: WolfClient, session_id: str) -> str | None:
    """The task queue a session runs on (it may not be the client's: started by another client or a
    test); None when the session cannot be described, so the verb itself says why."""
    from temporalio.service import RPCError

    from agentwolf.access import workflow_id

    wid = session_id if session_id.startswith("wolf/") else workflow_id(wolf.tenant, session_id)
    try:
        return (await wolf.client.get_workflow_handle(wid).describe()).task_queue
    except RPCError:
        return None


async def check_worker(wolf: WolfClient, *, required: bool, session_id: str | None = None) -> None:
    """Say at once when no worker polls: an error for verbs that need an answer now (queries), a
    warning for those whose session simply waits for a worker. With `session_id`, the queue asked
    about is that session's."""

    queue = (await _session_queue(wolf, session_id) if session_id else None) or wolf.task_queue
    if await worker_polls(wolf, queue):
        return
    where = f"task queue {queue!r} in namespace {wolf.client.namespace!r}"
    if required:
        raise Exit(3, f"no worker polls {where}: {START_A_WORKER}")
    warning = f"no worker polls {where}; the session waits until one does: {START_A_WORKER}"
    err().print(f"[yellow]warning:[/yellow] {literal(warning)}", markup=True)
