"""An MCP server's progress message reaches `tool_progress` events (`wolf follow --json`) and the
plain live view (`  .. tool: message (n/total)`), redaction aside, as the issue-24 review asked.

Live events exist only while the tool runs, so the tool's last step lasts until both followers have
shown progress (a gate file), not for a time that a busy machine can spend starting them."""

from __future__ import annotations

import asyncio
import json
import os
import re

from temporalio.testing import ActivityEnvironment

from agentwolf.activities.live import tool_progress
from agentwolf.config.policy import Secrets, WorkerPolicy
from agentwolf.worker.bootstrap import TASK_QUEUE
from tests.support.models import Script, sequence, text, tool
from tests.test_cli import WOLF, _wolf
from tests.test_follow import _progress_manifest

PLAIN = re.compile(r"^  \.\. steps: step [1-6] of 6 \([0-5]/6\)$", re.M)


async def test_progress_messages_reach_the_event_and_the_plain_view(client, run_worker, tmp_path):
    script = Script(sequence(tool("steps", {"count": 6, "seconds": 0.2}), text("all done")))
    address = client.service_client.config.target_host
    gate = tmp_path / "gate"
    config = str(_progress_manifest(tmp_path, WOLF_PROGRESS_GATE=str(gate)))
    tenant = ("--tenant", "progress-text")
    async with run_worker(task_queue=TASK_QUEUE, local_models={"m": script.model}):
        started = await _wolf(address, "submit", "work", "-a", "a", "-c", config, "--json", *tenant)
        assert started.returncode == 0, started.stderr
        sid = json.loads(started.stdout.splitlines()[-1])["session_id"]
        as_json, plain = _Follower(address, sid, tenant, "--json"), _Follower(address, sid, tenant)
        await asyncio.gather(as_json.start(), plain.start())
        await asyncio.wait_for(
            asyncio.gather(
                as_json.shows(lambda line: '"kind":"tool_progress"' in line), plain.shows(PLAIN.match)
            ),
            timeout=120,
        )
        gate.touch()
        await asyncio.gather(as_json.ends(), plain.ends())
    progress = [json.loads(line) for line in as_json.lines if '"kind":"tool_progress"' in line]
    assert progress, as_json.lines
    assert all(re.fullmatch(r"step [1-6] of 6|finished", p["text"]) for p in progress), progress
    assert all(p["tool"] == "steps" and p["total"] == 6 for p in progress), progress
    assert PLAIN.search("\n".join(plain.lines)), plain.lines


async def test_a_progress_report_without_a_message_keeps_the_last_message():
    """Servers often say what they do once per phase and send bare counts between: the heartbeat
    carries only the newest report, which would drop the message a follower had not read yet."""
    beats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.extend(details)

    async def report() -> object:
        on_progress, details = tool_progress("call-1", "steps", Secrets(WorkerPolicy(), "default", {}))
        await on_progress(1, 6, "copying files")
        await on_progress(2, 6, None)
        return details()

    (latest,) = await env.run(report)
    assert (latest.tool, latest.progress, latest.total, latest.message) == ("steps", 2, 6, "copying files")
    assert beats and all(b.tool == "steps" for b in beats)


class _Follower:
    """`wolf follow` in a process whose output is read line by line as it comes."""

    def __init__(self, address: str, sid: str, tenant: tuple[str, ...], *args: str) -> None:
        self.argv = [WOLF, "follow", sid, *args, *tenant]
        self.env = {**os.environ, "NO_COLOR": "1", "TEMPORAL_ADDRESS": address, "PYTHONUNBUFFERED": "1"}
        self.lines: list[str] = []
        self._new = asyncio.Event()

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=self.env
        )
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            self.lines.append(raw.decode().rstrip("\n"))
            self._new.set()
        self._new.set()

    async def shows(self, wanted) -> None:
        while True:
            self._new.clear()
            if any(wanted(line) for line in self.lines):
                return
            assert not self._reader.done(), f"`wolf follow` ended: {self.lines}"
            await self._new.wait()

    async def ends(self) -> None:
        await self._reader
        stderr = await self.proc.stderr.read() if self.proc.stderr else b""
        assert await self.proc.wait() == 0, stderr.decode()
