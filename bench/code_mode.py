"""Code mode vs plain tool calling on a task of 20 tool calls with filtering.

The task: look up records 1..20 (`lookup(id)`, a worker plugin's function tool returning a record of
about 500 characters) and answer with the ids whose score is over 50. Both agents run on one Temporal
dev server (AgentWolf's `dynamic_config_args()`) and one in-process worker, with scripted models:

  plain      the model calls `lookup` once per step (it reads each record before the next call, as
             a model filtering as it goes does), then answers: 21 model requests.
  code mode  the model sends one `run_code` script that loops over the 20 lookups and prints the
             ids over the threshold, then answers: 2 model requests.

Input tokens are estimated as characters / 4 of what each request sends: its messages and its tool
definitions (code mode's `run_code` carries the tools' signatures). Per-call overhead compares a
script's tool call (the `run_code` call's duration / 20: tool call plus sandbox resume) with a plain
tool call's duration, from the `tool_call_finished` events. One untimed warm-up turn each, then
three timed turns each; medians.

Run:  python bench/code_mode.py
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.testing import WorkflowEnvironment

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.ops.devserver import dynamic_config_args, temporal_binary
from agentwolf.payloads import data_converter
from agentwolf.plugins import PluginRegistry, Plugins
from agentwolf.worker.bootstrap import create_worker
from agentwolf.workflows.types import SEARCH_ATTRIBUTES

RECORDS, THRESHOLD, REPEATS = 20, 50, 3
SCRIPT = f"""
over = []
for i in range(1, {RECORDS + 1}):
    record = await lookup(id=i)
    if record["score"] > {THRESHOLD}:
        over.append(i)
print(over)
"""


def record(id: int) -> dict[str, Any]:
    return {"id": id, "name": f"record {id}", "score": (id * 37) % 100, "notes": f"note {id} " * 60}


def expected() -> list[int]:
    return [i for i in range(1, RECORDS + 1) if record(i)["score"] > THRESHOLD]


class Scripted:
    """A FunctionModel answering as `plain` or `code` does, counting requests and estimated input tokens."""

    def __init__(self, code: bool) -> None:
        self.code = code
        self.requests = 0
        self.input_chars = 0
        self.model = FunctionModel(self._answer)

    async def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests += 1
        tools = [{"name": t.name, "description": t.description, "parameters": t.parameters_json_schema}
                 for t in info.function_tools]  # fmt: skip
        self.input_chars += len(ModelMessagesTypeAdapter.dump_json(messages)) + len(json.dumps(tools))
        returns = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        if self.code:
            if not returns:
                return ModelResponse(parts=[ToolCallPart("run_code", {"code": SCRIPT})])
            return ModelResponse(parts=[TextPart(f"over {THRESHOLD}: {returns[-1].content.strip()}")])
        if len(returns) < RECORDS:
            return ModelResponse(parts=[ToolCallPart("lookup", {"id": len(returns) + 1})])
        over = [
            json.loads(str(r.content))["id"]
            for r in returns
            if json.loads(str(r.content))["score"] > THRESHOLD
        ]
        return ModelResponse(parts=[TextPart(f"over {THRESHOLD}: {over}")])


def manifest(code: bool) -> Manifest:
    capabilities: list[dict[str, Any]] = [{"mcp": "records"}] + ([{"code_mode": {}}] if code else [])
    return Manifest.model_validate(
        {
            "host": {"mcp_servers": {"records": {"plugin": "records", "fast_call_ms": 0}}},
            "agents": {
                "a": {"model": f"local:{'code' if code else 'plain'}", "capabilities": capabilities,
                      "limits": {"max_steps": RECORDS + 5}},
            },
        }
    )  # fmt: skip


async def turn(wolf: WolfClient, model: Scripted, code: bool) -> dict[str, float]:
    before_requests, before_chars = model.requests, model.input_chars
    start = time.perf_counter()
    sid = await wolf.submit("Which records are over the threshold?", "a", manifest(code))
    result = await wolf.result(sid)
    seconds = time.perf_counter() - start
    assert result.output == f"over {THRESHOLD}: {expected()}", result.output
    finished = [e async for _, e in wolf.events(sid, live=False) if e.kind == "tool_call_finished"]
    if code:
        (run,) = [e for e in finished if e.tool == "run_code"]
        per_call = (run.duration_ms or 0) / RECORDS
    else:
        per_call = statistics.mean(e.duration_ms or 0 for e in finished)
    return {
        "requests": model.requests - before_requests,
        "tokens": (model.input_chars - before_chars) / 4,
        "seconds": seconds,
        "per_call_ms": per_call,
    }


async def main() -> None:
    registry = PluginRegistry("records")
    registry.tool(record, name="lookup")
    plugins = Plugins()
    plugins.add(registry)
    plain, code = Scripted(code=False), Scripted(code=True)
    with tempfile.TemporaryDirectory(prefix="wolf-code-mode-") as tmp:
        os.environ["WOLF_PAYLOAD_STORE"] = str(Path(tmp) / "payloads")
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=dynamic_config_args(),
        )
        try:
            worker, hosts = create_worker(
                env.client, task_queue="bench", local_models={"plain": plain.model, "code": code.model},
                plugins=plugins,
            )  # fmt: skip
            wolf = WolfClient(env.client, task_queue="bench")
            async with worker:
                try:
                    await turn(wolf, plain, False)  # warm-up: host, plugin, sandbox
                    await turn(wolf, code, True)
                    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
                    for _ in range(REPEATS):
                        for mode in (False, True):
                            runs[mode].append(await turn(wolf, code if mode else plain, mode))
                finally:
                    await hosts.close()
        finally:
            await env.shutdown()
    med = {mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in runs.items()}
    p, c = med[False], med[True]
    print(f"task: {RECORDS} lookups, keep scores over {THRESHOLD}; medians of {REPEATS} turns each")
    print(f"{'':18}{'plain':>12}{'code mode':>12}{'ratio':>10}")
    for key, label, fmt in (
        ("requests", "model requests", "{:.0f}"),
        ("tokens", "input tokens", "{:.0f}"),
        ("seconds", "wall time (s)", "{:.3f}"),
        ("per_call_ms", "per tool call (ms)", "{:.1f}"),
    ):
        print(f"{label:18}{fmt.format(p[key]):>12}{fmt.format(c[key]):>12}{c[key] / p[key]:>9.2f}x")
    print("goals: requests <= 0.2x, input tokens <= 0.3x, per tool call <= 1.5x")


if __name__ == "__main__":
    asyncio.run(main())
