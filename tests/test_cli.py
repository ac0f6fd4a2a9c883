"""The real `wolf` CLI as a subprocess against the real dev server and a worker."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import TOOLS_SERVER

WOLF = str(Path(sys.executable).parent / "wolf")


def _manifest(tmp_path: Path) -> Path:
    path = tmp_path / "wolf.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "host": {"mcp_servers": {"tools": {"command": sys.executable, "args": [TOOLS_SERVER]}}},
                "agents": {"tester": {"model": "test", "capabilities": [{"mcp": "tools"}]}},
            }
        )
    )
    return path


async def _wolf(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "TEMPORAL_ADDRESS": address}
    return await asyncio.to_thread(
        subprocess.run, [WOLF, *args], capture_output=True, text=True, env=env, timeout=120
    )


async def test_submit_wait_json_and_status(env, client, tmp_path):
    from agentwolf.worker.main import TASK_QUEUE, create_worker

    address = client.service_client.config.target_host
    worker, hosts = create_worker(client, task_queue=TASK_QUEUE)
    async with worker:
        done = await _wolf(address, "submit", "use your tools", "--agent", "tester", "--config", str(_manifest(tmp_path)), "--wait", "--json")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()
        result, last = json.loads(lines[0]), json.loads(lines[-1])
        assert result["outcome"] == "completed" and result["counters"]["usage"]["tool_calls"] == 5
        status = await _wolf(address, "status", last["session_id"], "--json")
        assert json.loads(status.stdout)["state"] == "done"
        await hosts.close()


async def test_config_errors_exit_2_and_name_the_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("agents:\n  a:\n    modle: fast\n")
    run = await _wolf("127.0.0.1:1", "validate", str(bad))
    assert run.returncode == 2
    assert f"{bad}:3: agents.a.modle: unknown key" in " ".join(run.stderr.split())


async def test_unreachable_server_exits_3(tmp_path):
    run = await _wolf("127.0.0.1:1", "status", "nope")
    assert run.returncode == 3, run.stderr
    assert "cannot reach Temporal" in run.stderr
