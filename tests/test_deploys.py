"""Deploys with Temporal Worker Versioning, on the real dev server with two worker processes of
different builds: build B changes the session's command sequence without a patch. Sessions stay on
the build they started on, turns in flight (an approval wait) finish there, idle sessions move to
the current build at their next input, nothing fails as nondeterministic, a rollback moves them back,
and a build whose workers are gone has its sessions adopted by a new build (the local stack's case)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause

from agentwolf.client.deployments import status
from agentwolf.worker.deployment import Deployment, current_build, default_name, take_current
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, tools_server, wait_for
from tests.support.polls import in_state

WOLF = str(Path(sys.executable).parent / "wolf")
WORKER = str(Path(__file__).parent / "support" / "deploy_worker.py")
NONDETERMINISM = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR


def _worker(
    address: str, task_queue: str, build: str, mark: dict[str, str], *more: str
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, WORKER, address, task_queue, build, *more],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **mark},
    )


def _wolf(address: str, *args: str) -> Any:
    done = subprocess.run(
        [WOLF, *args, "--address", address, "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def _answered(wolf: Any, sid: str, turns: int) -> str | None:
    status_ = await wolf.status(sid)
    return status_.last_output if status_.state == "idle" and status_.counters.turns >= turns else None


async def test_a_deploy_pins_busy_sessions_moves_idle_ones_and_rolls_back(
    env, client, wolf, task_queue, tmp_path, process_mark
):
    address = env.client.service_client.config.target_host
    name = default_name(task_queue)
    manifest = make_manifest(
        {"permissions": {"rules": [{"tool": "record", "action": "confirm"}]}},
        mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(tmp_path / "effects"))},
    )
    workers = [_worker(address, task_queue, "A", process_mark)]
    try:
        # The first build of a deployment becomes current by itself.
        await wait_for(lambda: _is_current(client, name, "A"), timeout=120, interval=0.5)
        idle_ones = [await wolf.start_session("a", manifest, prompt="hello") for _ in range(2)]
        busy = [await wolf.start_session("a", manifest, prompt="record this") for _ in range(2)]
        for sid in idle_ones:
            assert await wait_for(lambda sid=sid: _answered(wolf, sid, 1), timeout=120) == "served by A"
        for sid in busy:
            await wait_for(lambda sid=sid: in_state(wolf, sid, "waiting_approval"), timeout=120)

        workers.append(_worker(address, task_queue, "B", process_mark, "--changed"))
        await wait_for(lambda: _has_build(client, name, "B"), timeout=120, interval=0.5)
        assert await current_build(client, name) == "A", "a later build waits to be promoted"
        # Visibility counts lag a little behind.
        await wait_for(lambda: _sessions(client, name, "A", 4), timeout=60, interval=0.5)

        assert _wolf(address, "deploy", "promote", "B", "--deployment", name)["current"] == "B"
        await wait_for(
            lambda: _is_current(client, name, "B"), timeout=120, interval=0.5
        )  # routed: sessions see it
        for sid in idle_ones:  # their next input moves them: the turn runs on B
            await wolf.prompt(sid, "again")
            assert await wait_for(lambda sid=sid: _answered(wolf, sid, 2), timeout=120) == "served by B"
        for sid in busy:  # the turn in flight finishes on A, the next one runs on B
            await wolf.approve(sid, "rec")
            assert await wait_for(lambda sid=sid: _answered(wolf, sid, 1), timeout=120) == "served by A"
            await wolf.prompt(sid, "next")
            assert await wait_for(lambda sid=sid: _answered(wolf, sid, 2), timeout=120) == "served by B"
        shown = _wolf(address, "deploy", "status", "--deployment", name)
        assert shown["current"] == "B" and {b["build_id"] for b in shown["builds"]} == {"A", "B"}

        assert _wolf(address, "deploy", "rollback", "--deployment", name)["current"] == "A"
        await wait_for(lambda: _is_current(client, name, "A"), timeout=120, interval=0.5)
        sid = idle_ones[0]
        await wolf.prompt(sid, "and again")
        assert await wait_for(lambda sid=sid: _answered(wolf, sid, 3), timeout=120) == "served by A"

        # The local stack's case: A's worker stops, a new build of the same code (A2) adopts its
        # sessions, whose histories it replays. B's sessions close first: A2 could not replay them.
        for sid in (idle_ones[1], *busy):
            await wolf.close(sid)
            await wolf.result(sid)
        workers[0].terminate()
        workers[0].wait(timeout=30)
        workers.append(_worker(address, task_queue, "A2", process_mark))
        await wait_for(lambda: _has_build(client, name, "A2"), timeout=120, interval=0.5)
        await take_current(client, Deployment(name, "A2"), always=True, sole=True)
        sid = idle_ones[0]  # on A since the rollback
        await wolf.prompt(sid, "still there?")
        assert await wait_for(lambda: _answered(wolf, sid, 4), timeout=120) == "served by A2"

        failed, timers_on_b = await _history_facts(client, [*idle_ones, *busy])
        assert failed == [], "no workflow task failed as nondeterministic"
        assert timers_on_b, "build B ran its changed command sequence"
        for sid, name in ((idle_ones[1], "deploy_idle_moves"), (busy[1], "deploy_turn_finishes_then_moves")):
            wid = workflow_id("default", sid)
            await record_history(client, wid, name, run_id=(await _runs(client, wid))[0])
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.wait(timeout=30)


async def _is_current(client: Any, name: str, build: str) -> bool:
    return await current_build(client, name, routed=True) == build


async def _has_build(client: Any, name: str, build: str) -> bool:
    return any(b.build_id == build for b in (await status(client, name)).builds)


async def _sessions(client: Any, name: str, build: str, count: int) -> bool:
    return any(b.build_id == build and b.sessions == count for b in (await status(client, name)).builds)


async def _history_facts(client: Any, sids: list[str]) -> tuple[list[str], int]:
    """Nondeterminism failures in every run of these sessions, and timers started by build B's runs."""
    failed, timers = [], 0
    for sid in sids:
        wid = workflow_id("default", sid)
        for run_id in await _runs(client, wid):
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


async def _runs(client: Any, wid: str) -> list[str]:
    """The session's run ids, oldest first."""
    runs = [run async for run in client.list_workflows(f"WorkflowId = '{wid}'")]
    return [run.run_id for run in sorted(runs, key=lambda run: run.start_time)]
