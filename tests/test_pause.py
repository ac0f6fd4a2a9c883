"""`wolf pause` / `wolf unpause` on Temporal's workflow pause: a paused session takes no step (a steer
waits, a prompt is refused with a clear error) until unpaused, then what waited runs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentwolf.access import TenantError
from agentwolf.client.pausing import PauseError, pause, unpause
from agentwolf.workflows.types import workflow_id
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, sequence, text
from tests.support.polls import idle

WOLF = str(Path(sys.executable).parent / "wolf")


async def test_a_paused_session_holds_its_next_step_until_unpaused(env, wolf, client, run_worker):
    address = env.client.service_client.config.target_host
    script = Script(sequence(text("first"), text("second")))
    async with run_worker(local_models={"m": script.model}):
        sid = await wolf.start_session("a", make_manifest(), prompt="hello")
        await wait_for(lambda: idle(wolf, sid, 1))
        done = subprocess.run(
            [WOLF, "pause", sid, "-r", "backend down", "--address", address],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0 and "paused" in done.stdout, done.stderr
        with pytest.raises(PauseError, match="already paused"):
            await pause(client, "default", sid, "again")
        # A signal waits with the session (WolfClient.steer asks its status first, which temporalio
        # 1.35 cannot read of a paused workflow: status 8 is unknown to it).
        await client.get_workflow_handle(workflow_id("default", sid)).signal("steer", "go on")
        with pytest.raises(Exception, match="paused"):
            await wolf.prompt(sid, "refused")
        await asyncio.sleep(1.5)
        assert script.calls == 1, "no step while paused"
        with pytest.raises(TenantError):
            await unpause(client, "default", f"wolf/other/{sid}")
        released = subprocess.run(
            [WOLF, "unpause", sid, "-j", "--address", address], capture_output=True, text=True, timeout=120
        )
        assert json.loads(released.stdout) == {"session_id": sid, "paused": False}, released.stderr
        await wait_for(lambda: idle(wolf, sid, 2))
        assert script.calls == 2
        with pytest.raises(PauseError, match="not paused"):
            await unpause(client, "default", sid)
        with pytest.raises(PauseError, match="no session"):
            await pause(client, "default", "nope", "x")
