"""What deploy tests and bench/deploy.py share: versioned worker processes of a build
(tests/support/deploy_worker.py), the `wolf` CLI, deployment conditions to poll, and what a
session's histories say about a deploy (nondeterminism failures, build B's changed commands)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause

from agentwolf.ops.deployments import status
from agentwolf.worker.deployment import current_build
from agentwolf.workflows.types import workflow_id

WOLF = str(Path(sys.executable).parent / "wolf")
WORKER = str(Path(__file__).parent / "deploy_worker.py")
NONDETERMINISM = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR


def build_worker(
    address: str, task_queue: str, build: str, mark: dict[str, str], *more: str
) -> subprocess.Popen[bytes]:
    """A worker process of `build` (`--changed`: the build whose turns start with an unpatched timer)."""
    return subprocess.Popen(
        [sys.executable, WORKER, address, task_queue, build, *more],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **mark},
    )


def wolf_cli(address: str, *args: str) -> Any:
    """`wolf ARGS --address ADDRESS --json`, its answer parsed."""
    done = subprocess.run(
        [WOLF, *args, "--address", address, "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def answered(wolf: Any, sid: str, turns: int) -> str | None:
    """The session's last answer once it is idle with `turns` turns done (a build's name here)."""
    status_ = await wolf.status(sid)
    return status_.last_output if status_.state == "idle" and status_.counters.turns >= turns else None


async def is_current(client: Any, name: str, build: str) -> bool:
    return await current_build(client, name, routed=True) == build


async def has_build(client: Any, name: str, build: str) -> bool:
    return any(b.build_id == build for b in (await status(client, name)).builds)


async def serves(client: Any, name: str, build: str, count: int) -> bool:
    """The deployment counts `count` sessions on `build` (visibility lags a little)."""
    return any(b.build_id == build and b.sessions == count for b in (await status(client, name)).builds)


async def history_facts(client: Any, sids: list[str], tenant: str = "default") -> tuple[list[str], int]:
    """Nondeterminism failures in every run of these sessions, and timers started by build B's runs."""
    failed, timers = [], 0
    for sid in sids:
        wid = workflow_id(tenant, sid)
        for run_id in await runs(client, wid):
            history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
            for event in history.events:
                # Other failures happen on a loaded machine (a deadlock warning when the sandbox gets no CPU).
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                    attributes = event.workflow_task_failed_event_attributes
                    message = attributes.failure.message
                    if attributes.cause == NONDETERMINISM or "nondetermin" in message.lower():
                        failed.append(f"{sid}: {message}")
                if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
                    timers += 1
    return failed, timers


async def runs(client: Any, wid: str) -> list[str]:
    """The session's run ids, oldest first."""
    found = [run async for run in client.list_workflows(f"WorkflowId = '{wid}'")]
    return [run.run_id for run in sorted(found, key=lambda run: run.start_time)]
