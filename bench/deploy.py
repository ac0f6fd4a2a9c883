"""A deploy at full size: tests/test_deploys.py's scenario with 20 sessions mid-turn and 20 idle.

One Temporal dev server (`WorkflowEnvironment.start_local` with AgentWolf's dynamic config), worker
processes of tests/support/deploy_worker.py joining one worker deployment:
1. Build A serves `--idle` sessions that answered one turn and `--busy` sessions whose turn waits
   for approval of a `record` call (mid-turn).
2. Build B joins with a changed command sequence (every turn starts with a timer, unpatched) and is
   promoted with `wolf deploy promote`.
3. Each idle session gets a prompt: its turn must run on B (the first turn after the deploy). Each
   busy one is approved: its turn must finish on A; its next prompt must run on B.
4. `wolf deploy rollback`, timed until every session has answered a prompt on A again.
Then every run of every session is searched for nondeterminism failures (goal: none), and for the
timers only B emits (B ran its changed sequence). Printed with the load average beside each figure.

Run:  python bench/deploy.py [--busy 20] [--idle 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # agentwolf and tests/ from this checkout

from temporalio.testing import WorkflowEnvironment

from agentwolf.client.wolf_client import WolfClient
from agentwolf.ops.devserver import dynamic_config_args, temporal_binary
from agentwolf.payloads import data_converter
from agentwolf.worker.deployment import default_name
from agentwolf.workflows.types import SEARCH_ATTRIBUTES
from tests.conftest import make_manifest, tools_server, wait_for
from tests.support.deploys import answered, build_worker, has_build, history_facts, is_current, wolf_cli
from tests.support.polls import in_state

ROLLBACK_TARGET_S = 60.0
WAIT = 600.0
"""Seconds any one condition may take on a loaded machine before the bench gives up."""


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


async def all_answer(wolf: WolfClient, sids: list[str], turns: int, build: str) -> None:
    """Every session answered turn `turns`, on `build`."""
    answers = await asyncio.gather(
        *(wait_for(lambda sid=sid: answered(wolf, sid, turns), timeout=WAIT, interval=0.5) for sid in sids)
    )
    wrong = {sid: a for sid, a in zip(sids, answers, strict=True) if a != f"served by {build}"}
    if wrong:
        raise AssertionError(f"{len(wrong)} sessions did not answer on {build}: {wrong}")


async def deploy(
    address: str, wolf: WolfClient, task_queue: str, n_busy: int, n_idle: int, work: Path
) -> None:
    client, name = wolf.client, default_name(task_queue)
    manifest = make_manifest(
        {"permissions": {"rules": [{"tool": "record", "action": "confirm"}]}},
        mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(work / "effects"))},
    )
    workers = [build_worker(address, task_queue, "A", {})]
    try:
        await wait_for(lambda: is_current(client, name, "A"), timeout=WAIT, interval=0.5)
        idle = list(
            await asyncio.gather(*(wolf.start_session("a", manifest, prompt="hi") for _ in range(n_idle)))
        )
        busy = list(
            await asyncio.gather(*(wolf.start_session("a", manifest, prompt="record") for _ in range(n_busy)))
        )
        await all_answer(wolf, idle, 1, "A")
        await asyncio.gather(
            *(
                wait_for(lambda s=s: in_state(wolf, s, "waiting_approval"), timeout=WAIT, interval=0.5)
                for s in busy
            )
        )
        print(f"on A: {len(idle)} idle, {len(busy)} waiting for approval  ({load()})")

        workers.append(build_worker(address, task_queue, "B", {}, "--changed"))
        await wait_for(lambda: has_build(client, name, "B"), timeout=WAIT, interval=0.5)
        started = time.monotonic()
        wolf_cli(address, "deploy", "promote", "B", "--deployment", name)
        await wait_for(lambda: is_current(client, name, "B"), timeout=WAIT, interval=0.5)
        print(f"promoted B: routed in {time.monotonic() - started:.1f} s  ({load()})")

        started = time.monotonic()
        for sid in idle:
            await wolf.prompt(sid, "again")
        await all_answer(wolf, idle, 2, "B")
        print(
            f"idle sessions: {len(idle)}/{len(idle)} answered their next turn on B in "
            f"{time.monotonic() - started:.1f} s  ({load()})"
        )
        started = time.monotonic()
        for sid in busy:
            await wolf.approve(sid, "rec")
        await all_answer(wolf, busy, 1, "A")
        for sid in busy:
            await wolf.prompt(sid, "next")
        await all_answer(wolf, busy, 2, "B")
        print(
            f"busy sessions: {len(busy)}/{len(busy)} finished their turn on A, then answered on B in "
            f"{time.monotonic() - started:.1f} s  ({load()})"
        )

        started = time.monotonic()
        wolf_cli(address, "deploy", "rollback", "--deployment", name)
        await wait_for(lambda: is_current(client, name, "A"), timeout=WAIT, interval=0.2)
        routed = time.monotonic() - started
        everyone = [*idle, *busy]
        for sid in everyone:
            await wolf.prompt(sid, "and again")
        await asyncio.gather(all_answer(wolf, idle, 3, "A"), all_answer(wolf, busy, 3, "A"))
        took = time.monotonic() - started
        print(
            f"rollback to A: routed in {routed:.1f} s, all {len(everyone)} sessions answered on A "
            f"{took:.1f} s after `wolf deploy rollback`  goal < {ROLLBACK_TARGET_S:.0f} s  ({load()})"
        )

        failed, timers = await history_facts(client, everyone, wolf.tenant)
        print(f"nondeterminism failures: {len(failed)}  goal 0; timers only B emits: {timers}")
        for line in failed[:10]:
            print(f"  {line}")
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.wait(timeout=30)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--busy", type=int, default=20, help="sessions mid-turn (waiting for approval) on A")
    parser.add_argument("--idle", type=int, default=20, help="idle sessions on A")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wolf-deploy-") as tmp:
        os.environ["WOLF_PAYLOAD_STORE"] = str(Path(tmp) / "payloads")  # this process and the workers'
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=dynamic_config_args(),
        )
        try:
            task_queue = f"deploy-{uuid.uuid4().hex[:8]}"
            address = env.client.service_client.config.target_host
            await deploy(
                address,
                WolfClient(env.client, task_queue=task_queue),
                task_queue,
                args.busy,
                args.idle,
                Path(tmp),
            )
        finally:
            await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
