"""A versioned worker process for deploy tests: `deploy_worker.py ADDRESS TASK_QUEUE BUILD [--changed]`.

It joins the deployment named after TASK_QUEUE as BUILD (current if the deployment has none). Its
model `local:m` calls the `record` tool for a prompt that says "record", else answers "served by
BUILD", so a test reads which build ran a turn. `--changed` makes every turn start with a timer that
other builds never emit, unpatched: a history of another build replayed here fails as nondeterministic."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import workflow

from agentwolf.connection import connect
from agentwolf.worker.bootstrap import create_worker, run_worker
from agentwolf.worker.deployment import Deployment, default_name, take_current
from agentwolf.workflows.session.loop import TurnRunner
from agentwolf.workflows.types import Prompt


def model(build: str) -> FunctionModel:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        asked = isinstance(last, ModelRequest) and any(
            isinstance(p, UserPromptPart) and "record" in str(p.content) for p in last.parts
        )
        if asked:
            return ModelResponse(parts=[ToolCallPart("record", {"tag": build}, tool_call_id="rec")])
        return ModelResponse(parts=[TextPart(f"served by {build}")])

    return FunctionModel(answer)


def changed(
    run_turn: Callable[[TurnRunner, Prompt], Awaitable[None]],
) -> Callable[[TurnRunner, Prompt], Awaitable[None]]:
    """`TurnRunner.run_turn` with a timer first: a command sequence no other build emits, unpatched."""

    async def timed(self: TurnRunner, prompt: Prompt) -> None:
        await workflow.sleep(timedelta(milliseconds=1))
        await run_turn(self, prompt)

    return timed


async def main(address: str, task_queue: str, build: str) -> None:
    client = await connect(address)
    deployment = Deployment(default_name(task_queue), build)
    worker, hosts = create_worker(
        client, task_queue=task_queue, local_models={"m": model(build)}, deployment=deployment
    )
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    joining = asyncio.create_task(take_current(client, deployment, always=False))
    await run_worker(worker, hosts, stop)
    joining.cancel()


if __name__ == "__main__":
    if "--changed" in sys.argv:
        TurnRunner.run_turn = changed(TurnRunner.run_turn)  # type: ignore[method-assign]
    asyncio.run(main(*sys.argv[1:4]))
