"""An MCP server's progress message reaches `tool_progress` events (`wolf follow --json`) and the
plain live view (`  .. tool: message (n/total)`), redaction aside, as the issue-24 review asked."""

from __future__ import annotations

import asyncio
import json
import re

from agentwolf.worker.bootstrap import TASK_QUEUE
from tests.support.models import Script, sequence, text, tool
from tests.test_cli import _wolf
from tests.test_follow import _progress_manifest


async def test_progress_messages_reach_the_event_and_the_plain_view(client, run_worker, tmp_path):
    script = Script(sequence(tool("steps", {"count": 6, "seconds": 1.0}), text("all done")))
    address = client.service_client.config.target_host
    config = str(_progress_manifest(tmp_path))
    tenant = ("--tenant", "progress-text")
    async with run_worker(task_queue=TASK_QUEUE, local_models={"m": script.model}):
        started = await _wolf(address, "submit", "work", "-a", "a", "-c", config, "--json", *tenant)
        assert started.returncode == 0, started.stderr
        sid = json.loads(started.stdout.splitlines()[-1])["session_id"]
        # Live events exist only while the tool runs: both follow it as it runs.
        as_json, plain = await asyncio.gather(
            _follow(address, sid, tenant, "--json"), _follow(address, sid, tenant)
        )
    progress = [json.loads(line) for line in as_json.stdout.splitlines() if '"kind":"tool_progress"' in line]
    assert progress, as_json.stdout
    assert all(re.fullmatch(r"step [1-6] of 6|finished", p["text"]) for p in progress), progress
    assert all(p["tool"] == "steps" and p["total"] == 6 for p in progress)
    assert re.search(r"^  \.\. steps: step [1-6] of 6 \([0-5]/6\)$", plain.stdout, re.M), plain.stdout


async def _follow(address: str, sid: str, tenant: tuple[str, ...], *args: str):
    run = await _wolf(address, "follow", sid, *args, *tenant)
    assert run.returncode == 0, run.stderr
    return run
