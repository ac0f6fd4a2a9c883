"""Deploys with Temporal Worker Versioning, on the real dev server with two worker processes of
different builds: build B changes the session's command sequence without a patch. Sessions stay on
the build they started on, turns in flight (an approval wait) finish there, idle sessions move to
the current build at their next input, nothing fails as nondeterministic, a rollback moves them back,
and a build whose workers are gone has its sessions adopted by a new build (the local stack's case).
bench/deploy.py runs the same at full size (20 busy and 20 idle sessions) and times the rollback."""

from __future__ import annotations

from agentwolf.worker.deployment import Deployment, current_build, default_name, take_current
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, record_history, tools_server, wait_for
from tests.support.deploys import (
    answered,
    build_worker,
    has_build,
    history_facts,
    is_current,
    runs,
    serves,
    wolf_cli,
)
from tests.support.polls import in_state


async def test_a_deploy_pins_busy_sessions_moves_idle_ones_and_rolls_back(
    env, client, wolf, task_queue, tmp_path, process_mark
):
    address = env.client.service_client.config.target_host
    name = default_name(task_queue)
    manifest = make_manifest(
        {"permissions": {"rules": [{"tool": "record", "action": "confirm"}]}},
        mcp_servers={"tools": tools_server(WOLF_SIDE_EFFECTS=str(tmp_path / "effects"))},
    )
    workers = [build_worker(address, task_queue, "A", process_mark)]
    try:
        # The first build of a deployment becomes current by itself.
        await wait_for(lambda: is_current(client, name, "A"), timeout=120, interval=0.5)
        idle_ones = [await wolf.start_session("a", manifest, prompt="hello") for _ in range(2)]
        busy = [await wolf.start_session("a", manifest, prompt="record this") for _ in range(2)]
        for sid in idle_ones:
            assert await wait_for(lambda sid=sid: answered(wolf, sid, 1), timeout=120) == "served by A"
        for sid in busy:
            await wait_for(lambda sid=sid: in_state(wolf, sid, "waiting_approval"), timeout=120)

        workers.append(build_worker(address, task_queue, "B", process_mark, "--changed"))
        await wait_for(lambda: has_build(client, name, "B"), timeout=120, interval=0.5)
        assert await current_build(client, name) == "A", "a later build waits to be promoted"
        # Visibility counts lag a little behind.
        await wait_for(lambda: serves(client, name, "A", 4), timeout=60, interval=0.5)

        assert wolf_cli(address, "deploy", "promote", "B", "--deployment", name)["current"] == "B"
        await wait_for(
            lambda: is_current(client, name, "B"), timeout=120, interval=0.5
        )  # routed: sessions see it
        for sid in idle_ones:  # their next input moves them: the turn runs on B
            await wolf.prompt(sid, "again")
            assert await wait_for(lambda sid=sid: answered(wolf, sid, 2), timeout=120) == "served by B"
        for sid in busy:  # the turn in flight finishes on A, the next one runs on B
            await wolf.approve(sid, "rec")
            assert await wait_for(lambda sid=sid: answered(wolf, sid, 1), timeout=120) == "served by A"
            await wolf.prompt(sid, "next")
            assert await wait_for(lambda sid=sid: answered(wolf, sid, 2), timeout=120) == "served by B"
        shown = wolf_cli(address, "deploy", "status", "--deployment", name)
        assert shown["current"] == "B" and {b["build_id"] for b in shown["builds"]} == {"A", "B"}

        assert wolf_cli(address, "deploy", "rollback", "--deployment", name)["current"] == "A"
        await wait_for(lambda: is_current(client, name, "A"), timeout=120, interval=0.5)
        sid = idle_ones[0]
        await wolf.prompt(sid, "and again")
        assert await wait_for(lambda sid=sid: answered(wolf, sid, 3), timeout=120) == "served by A"

        # The local stack's case: A's worker stops, a new build of the same code (A2) adopts its
        # sessions, whose histories it replays. B's sessions close first: A2 could not replay them.
        for sid in (idle_ones[1], *busy):
            await wolf.close(sid)
            await wolf.result(sid)
        workers[0].terminate()
        workers[0].wait(timeout=30)
        workers.append(build_worker(address, task_queue, "A2", process_mark))
        await wait_for(lambda: has_build(client, name, "A2"), timeout=120, interval=0.5)
        await take_current(client, Deployment(name, "A2"), always=True, sole=True)
        sid = idle_ones[0]  # on A since the rollback
        await wolf.prompt(sid, "still there?")
        assert await wait_for(lambda: answered(wolf, sid, 4), timeout=120) == "served by A2"

        failed, timers_on_b = await history_facts(client, [*idle_ones, *busy])
        assert failed == [], "no workflow task failed as nondeterministic"
        assert timers_on_b, "build B ran its changed command sequence"
        for sid, name in ((idle_ones[1], "deploy_idle_moves"), (busy[1], "deploy_turn_finishes_then_moves")):
            wid = workflow_id("default", sid)
            await record_history(client, wid, name, run_id=(await runs(client, wid))[0])
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.wait(timeout=30)
