"""The memory floor of a long session on this stack: a bare temporalio workflow with a session's
Temporal traffic per turn and none of AgentWolf, whose worker RSS growth per turn is what a session's
worker grows by before it keeps anything of its own (issue 25: "worker RSS flat after turn 50").

Each turn, as `bench/longrun.py`'s session does it: a prompt arrives as an update; a model request
(an activity answering ~1 KB), a tool call (a local activity answering 8 KB), a second model request;
eight events published on a Workflow Stream (the session's event log); the update answers. The run
continues as new at idle once its history passes `--can-bytes`, carrying the stream's last 1,000
events, as a session does. It keeps no transcript: whatever its worker grows by is Temporal's SDK,
its core, Python and the allocator.

Prints the worker's RSS (after `malloc_trim`) at turns 50, 100, ... and its growth per turn from
turn 50, to set beside `python bench/longrun.py --trim`'s.

Run:  python bench/memory_floor.py [--turns 200] [--can-bytes 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.contrib.workflow_streams import WorkflowStream, WorkflowStreamState

RESULT_CHARS = 8192
EVENTS_KEPT = 1000


class FloorInput(BaseModel):
    can_bytes: int
    stream: WorkflowStreamState | None = None


class Answer(BaseModel):
    text: str
    input_tokens: int
    output_tokens: int


class FloorEvent(BaseModel):
    kind: str
    turn: int
    text: str


@activity.defn
async def model(turn: int) -> Answer:
    return Answer(text=f"Turn {turn}: " + "a considered answer. " * 50, input_tokens=900, output_tokens=120)


@activity.defn
async def tool(turn: int) -> str:
    return (f"result of turn {turn} " * 1000)[:RESULT_CHARS]


@workflow.defn
class FloorSession:
    @workflow.init
    def __init__(self, inp: FloorInput) -> None:
        self.stream = WorkflowStream(inp.stream)
        self.events = self.stream.topic("events", type=FloorEvent)
        self.queue: list[int] = []
        self.done = 0

    @workflow.run
    async def run(self, inp: FloorInput) -> None:
        while True:
            await workflow.wait_condition(lambda: bool(self.queue))
            turn = self.queue.pop(0)
            self.events.publish(FloorEvent(kind="turn_started", turn=turn, text=""))
            for step in range(2):
                answer = await workflow.execute_activity(
                    model, turn, start_to_close_timeout=timedelta(seconds=30)
                )
                self.events.publish(FloorEvent(kind="model_text", turn=turn, text=answer.text))
                if step == 0:
                    result = await workflow.execute_local_activity(
                        tool, turn, start_to_close_timeout=timedelta(seconds=30)
                    )
                    self.events.publish(FloorEvent(kind="tool_call", turn=turn, text="add(1, 2)"))
                    self.events.publish(FloorEvent(kind="tool_result", turn=turn, text=result[:500]))
            for kind in ("usage", "context", "turn_finished"):
                self.events.publish(FloorEvent(kind=kind, turn=turn, text=""))
            self.done = turn
            if workflow.info().get_current_history_size() >= inp.can_bytes:
                await workflow.wait_condition(workflow.all_handlers_finished)
                state = self.stream.get_state()
                dropped = max(0, len(state.log) - EVENTS_KEPT)
                state.log = state.log[dropped:]
                state.base_offset += dropped
                workflow.continue_as_new(FloorInput(can_bytes=inp.can_bytes, stream=state))

    @workflow.update
    async def prompt(self, turn: int) -> None:
        self.queue.append(turn)
        await workflow.wait_condition(lambda: self.done >= turn)


async def floor_worker(address: str, namespace: str, task_queue: str) -> None:
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.worker import Worker
    from workers import _serve

    client = await Client.connect(address, namespace=namespace, data_converter=pydantic_data_converter)
    await _serve(Worker(client, task_queue=task_queue, workflows=[FloorSession], activities=[model, tool]))


async def main() -> None:
    from temporalio.contrib.pydantic import pydantic_data_converter
    from temporalio.testing import WorkflowEnvironment
    from workers import WorkerProcess

    from agentwolf.ops.devserver import dynamic_config_args, temporal_binary

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--can-bytes", type=int, default=1_000_000)
    args = parser.parse_args()
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=pydantic_data_converter,
        dev_server_extra_args=dynamic_config_args(),
    )
    rss: dict[int, int] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            queue = f"bench-floor-{uuid.uuid4().hex[:6]}"
            worker = await WorkerProcess("floor", env.client, queue, Path(tmp) / "worker.log").ready()
            try:
                handle = await env.client.start_workflow(
                    FloorSession.run, FloorInput(can_bytes=args.can_bytes), id=queue, task_queue=queue
                )
                for turn in range(1, args.turns + 1):
                    await handle.execute_update(FloorSession.prompt, turn)
                    if turn % 50 == 0 or turn == args.turns:
                        rss[turn] = (await worker.stats(trim=True))["trimmed_kb"]
                await handle.terminate()
            finally:
                worker.stop()
    finally:
        await env.shutdown()
    base = rss.get(50) or next(iter(rss.values()))
    print(
        f"memory floor: {args.turns} turns of a bare temporalio session, "
        f"continue-as-new past {args.can_bytes:,} B"
    )
    print(
        "worker RSS after malloc_trim: "
        + ", ".join(f"turn {t}: {kb / 1024:.0f} MB ({kb / base:.2f}x)" for t, kb in rss.items())
    )
    first, last = min(rss), max(rss)
    if last > first:
        print(f"growth per turn, turn {first} -> {last}: {(rss[last] - rss[first]) / (last - first):.1f} KB")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))  # bench/workers.py
    sys.path.insert(0, str(Path(__file__).parents[1]))  # agentwolf from this checkout
    asyncio.run(main())
