"""Fork latency for a long session: `WolfClient.fork` of a 200-turn session, against starting a fresh
session in the same run.

One Temporal dev server (AgentWolf's `dynamic_config_args()`), one in-process worker, a scripted
model (pydantic-ai FunctionModel) that answers each prompt with ~500 characters, and every tenth
turn calls the read-only `echo` tool of tests/support/tools_server.py first. The source session runs
`--turns` turns (continue-as-new happens as it would); then, `--repeats` times each, alternating:

  start  `start_session` of a fresh session, until it is idle (the baseline),
  fork   `fork(at=<a random finished turn>)` until the fork is idle: the snapshot query, the cut,
         the start with the prefix as its input.

Prints p50 and p95 of both, the ratio of the p50s, the fork's history bytes (protobuf
`HistoryEvent.ByteSize()`; the prefix travels in the start input, in the payload store when over
256 KiB) beside the source's, and the activities a fork scheduled (expected: none).

Run:  python bench/fork.py [--turns 200] [--repeats 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.ops.devserver import dynamic_config_args, temporal_binary
from agentwolf.payloads import data_converter
from agentwolf.worker.bootstrap import create_worker
from agentwolf.workflows.types import SEARCH_ATTRIBUTES, workflow_id

TOOLS_SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "support" / "tools_server.py")
ANSWER = "All right. " * 50


async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    if any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart(ANSWER)])
    prompt = str(last.parts[-1].content)
    if prompt.endswith("0"):  # every tenth turn: one read-only tool call first
        return ModelResponse(parts=[ToolCallPart("echo", {"text": prompt})])
    return ModelResponse(parts=[TextPart(ANSWER)])


async def history(client: Client, wid: str) -> tuple[int, int]:
    """(protobuf bytes over every run, activities scheduled in its first run)."""
    total, run_id, activities = 0, None, 0
    while True:
        events = (await client.get_workflow_handle(wid, run_id=run_id).fetch_history()).events
        total += sum(e.ByteSize() for e in events)
        activities = sum(e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED for e in events)
        run_id = events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            return total, activities


async def idle(wolf: WolfClient, sid: str) -> None:
    while (await wolf.status(sid)).state != "idle":
        await asyncio.sleep(0.01)


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    manifest = Manifest.model_validate(
        {
            "host": {"mcp_servers": {"tools": {"command": sys.executable, "args": [TOOLS_SERVER]}}},
            "agents": {"a": {"model": "local:m", "capabilities": [{"mcp": "tools"}]}},
        }
    )
    with tempfile.TemporaryDirectory(prefix="wolf-fork-") as tmp:
        os.environ["WOLF_PAYLOAD_STORE"] = str(Path(tmp) / "payloads")
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=dynamic_config_args(),
        )
        try:
            worker, hosts = create_worker(
                env.client, task_queue="bench", local_models={"m": FunctionModel(answer)}
            )
            wolf = WolfClient(env.client, task_queue="bench")
            async with worker:
                try:
                    sid = await wolf.start_session("a", manifest)
                    began = time.perf_counter()
                    for n in range(1, args.turns + 1):
                        await wolf.prompt(sid, f"prompt {n}")
                        while (await wolf.status(sid)).counters.turns < n:
                            await asyncio.sleep(0.01)
                    built = time.perf_counter() - began
                    starts: list[float] = []
                    forks: list[float] = []
                    fork_bytes: list[int] = []
                    scheduled = 0
                    for _ in range(args.repeats):
                        t0 = time.perf_counter()
                        fresh = await wolf.start_session("a", manifest)
                        await idle(wolf, fresh)
                        starts.append(time.perf_counter() - t0)
                        at = random.randint(1, args.turns)
                        t0 = time.perf_counter()
                        made = await wolf.fork(sid, at=str(at))
                        await idle(wolf, made.session_id)
                        forks.append(time.perf_counter() - t0)
                        size, activities = await history(env.client, workflow_id("default", made.session_id))
                        fork_bytes.append(size)
                        scheduled += activities
                    whole = await wolf.fork(sid, at=str(args.turns))
                    await idle(wolf, whole.session_id)
                    whole_bytes, _ = await history(env.client, workflow_id("default", whole.session_id))
                    source_bytes, _ = await history(env.client, workflow_id("default", sid))
                    messages = whole.messages
                finally:
                    await hosts.close()
        finally:
            await env.shutdown()
    print(
        f"source: {args.turns} turns, {messages} messages, built in {built:.1f} s, history {source_bytes} B"
    )
    print(f"{'':28}{'p50 (ms)':>10}{'p95 (ms)':>10}")
    print(
        f"{'start a session (baseline)':28}{pct(starts, 0.5) * 1000:>10.0f}{pct(starts, 0.95) * 1000:>10.0f}"
    )
    print(f"{'fork at a random turn':28}{pct(forks, 0.5) * 1000:>10.0f}{pct(forks, 0.95) * 1000:>10.0f}")
    print(f"fork / start p50: {pct(forks, 0.5) / pct(starts, 0.5):.2f}x (goal: fork p50 <= 1 s)")
    print(
        f"fork history: median {statistics.median(fork_bytes):.0f} B at a random turn, {whole_bytes} B "
        f"at turn {args.turns}; activities a fork scheduled: {scheduled}"
    )


if __name__ == "__main__":
    asyncio.run(main())
