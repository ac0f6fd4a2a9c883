"""`wolf run` and `wolf schedule ...` as subprocesses against the real dev server and a worker."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from tests.conftest import TOOLS_SERVER, wait_for
from tests.test_cli import _wolf


def _manifest(tmp_path: Path) -> Path:
    path = tmp_path / "wolf.yaml"
    schema = {
        "type": "object",
        "properties": {"severity": {"enum": ["low", "high"]}, "summary": {"type": "string"}},
        "required": ["severity", "summary"],
    }
    path.write_text(
        yaml.safe_dump(
            {
                "host": {"mcp_servers": {"tools": {"command": sys.executable, "args": [TOOLS_SERVER]}}},
                "agents": {"tester": {"model": "test"}},
                "jobs": {
                    "triage": {
                        "agent": "tester",
                        "prompt": "Triage {issue}.",
                        "vars": {"issue": {}},
                        "output": schema,
                    }
                },
            }
        )
    )
    return path


async def test_run_and_schedule_round_trip_with_json(env, client, tmp_path):
    from agentwolf.defaults import TASK_QUEUE
    from agentwolf.worker.bootstrap import create_worker

    address = client.service_client.config.target_host
    config = str(_manifest(tmp_path))
    worker, hosts = create_worker(client, task_queue=TASK_QUEUE)
    async with worker:
        try:
            ran = await _wolf(address, "run", "triage", "--var", "issue=#7", "--config", config, "--json")
            assert ran.returncode == 0, ran.stderr
            run = json.loads(ran.stdout)
            assert run["outcome"] == "completed" and run["output"]["severity"] in ("low", "high")
            shown = await _wolf(address, "result", run["session_id"], "--json")
            assert json.loads(shown.stdout)["structured"] == run["output"]

            bad = await _wolf(address, "run", "triage", "--var", "colour=red", "--config", config)
            assert bad.returncode == 2 and "unknown variable 'colour'" in bad.stderr

            made = await _wolf(
                address, "schedule", "create", "cli-job", "--every", "1h", "--job", "triage",
                "--var", "issue=#8", "--config", config, "--pause", "--json",
            )  # fmt: skip
            assert made.returncode == 0, made.stderr
            schedule = json.loads(made.stdout)[0]
            assert (schedule["name"], schedule["target"], schedule["when"], schedule["paused"]) == (
                "cli-job", "job triage", "every 1h", True
            )  # fmt: skip
            listed = json.loads((await _wolf(address, "schedule", "list", "--json")).stdout)
            assert [s["name"] for s in listed] == ["cli-job"]
            for action in ("resume", "pause", "trigger"):
                done = await _wolf(address, "schedule", action, "cli-job", "--json")
                assert json.loads(done.stdout) == {"schedule": "cli-job", "action": action}, done.stderr

            async def fired() -> list[str]:
                described = await _wolf(address, "schedule", "describe", "cli-job", "--json")
                return json.loads(described.stdout)["recent_runs"]

            runs = await wait_for(fired, timeout=60, interval=0.5)
            assert runs[0].startswith("_cli-job-")  # job runs: ids only the system picks
            backfill = await _wolf(
                address, "schedule", "backfill", "cli-job", "--start", "2026-01-01T00:00:00",
                "--end", "2026-01-01T00:00:00", "--json",
            )  # fmt: skip
            assert backfill.returncode == 2 and "end must come after its start" in backfill.stderr
            assert (await _wolf(address, "schedule", "delete", "cli-job", "--json")).returncode == 0
            gone = await _wolf(address, "schedule", "describe", "cli-job")
            assert gone.returncode == 2 and "schedule 'cli-job' not found in tenant 'default'" in gone.stderr
            cron = await _wolf(
                address, "schedule", "create", "bad", "--cron", "99 * * * *", "--job", "triage",
                "--var", "issue=1", "--config", config,
            )  # fmt: skip
            assert cron.returncode == 2 and "refused" in cron.stderr
            assert json.loads((await _wolf(address, "schedule", "list", "--json")).stdout) == []
        finally:
            await hosts.close()
