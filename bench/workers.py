"""What the benchmarks share: the scripted model, and workers that run in processes of their own.

The model: a pydantic-ai `FunctionModel` that calls `add(i, 1)` for round i (with ~500 chars of text
alongside) until the transcript holds `rounds` tool results, then answers "done"; `prompt_for(rounds)`
is the prompt that asks for that.

The workers: `python bench/workers.py wolf|pai ADDRESS NAMESPACE TASK_QUEUE` runs AgentWolf's
(`create_worker`, the model registered as `local:m`, the production data converter) or pydantic-ai's
(bench/tool_round.py's `PaiTurn` on a `PydanticAIPlugin` client) until `stop` or the end of stdin,
answering each `stats` line with a JSON line (`rss_kb`, `cached` workflow runs, after `gc.collect()`,
and `garbage`: the unreachable objects that collection found, which only a full collection frees;
and for `stats trim`, `trimmed_kb`: the RSS once glibc's `malloc_trim` returned the free heap to the
system, which tells what the process holds from what its allocator keeps; with `memory`,
where the RSS is: heap, other anonymous mappings, files, pymalloc's arenas, threads);
its answers start with `@@bench ` (Temporal's core SDK logs to stdout too).
In its own process each worker's RSS is its own, and AgentWolf's worker imports only what a real one
does: importing fastmcp (pydantic-ai's MCP toolset) installs beartype's import hook process-wide,
after which Temporal's sandbox re-imports beartype (about 250 modules) for every workflow run of
any workflow module that is not passed through (pydantic-ai passes beartype through for its own).

AgentWolf's worker also has two capabilities for `tool_round.py --capabilities`: `Empty` (no hooks,
nothing contributed) and `NoOpHooks` (a model-request hook and a tool hook that change nothing).

This module imports neither fastmcp nor pydantic-ai's Temporal integration.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

# __file__ is already absolute; Path.resolve() is off-limits in the workflow sandbox.
ROOT = Path(__file__).parents[1]
TOOLS_SERVER = str(ROOT / "tests" / "support" / "tools_server.py")
FILLER = ("Thinking about the next addition before calling the tool again. " * 10)[:500]
MARK = "@@bench "


def prompt_for(steps: int) -> str:
    return f"rounds={steps}: add numbers with the tool until you have {steps} results."


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call `add(i, 1)` for round i until the transcript holds `rounds` tool results, then say "done"."""
    parts = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts]
    prompt = next(p.content for p in parts if isinstance(p, UserPromptPart) and isinstance(p.content, str))
    rounds = int(prompt.split(":", 1)[0].removeprefix("rounds="))
    done = sum(isinstance(p, ToolReturnPart) for p in parts)
    if done >= rounds:
        return ModelResponse(parts=[TextPart("done")])
    return ModelResponse(
        parts=[
            TextPart(f"Round {done}. {FILLER}"),
            ToolCallPart("add", {"a": done, "b": 1}, tool_call_id=f"call-{done}"),
        ]
    )


MODEL = FunctionModel(script)


# -- worker processes ------------------------------------------------------------------------------


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def _memory() -> dict[str, Any]:
    """Where the RSS is (KB): the main heap (`[heap]`: glibc's main arena), other anonymous mappings
    (other threads' glibc arenas, large mallocs, pymalloc's arenas, stacks), files; pymalloc's arenas
    and the bytes in their used blocks (`sys._debugmallocstats`, which writes to the C stderr)."""
    rss = {"heap_kb": 0, "anon_kb": 0, "file_kb": 0}
    kind = "anon_kb"
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if not head[0].endswith(":"):  # a mapping's first line: range perms offset dev inode [path]
            path = head[5] if len(head) > 5 else ""
            kind = "heap_kb" if path == "[heap]" else "file_kb" if path.startswith("/") else "anon_kb"
        elif head[0] == "Rss:":
            rss[kind] += int(head[1])
    saved = os.dup(2)
    with tempfile.TemporaryFile() as out:
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode()
    arenas = re.search(r"# arenas allocated current\s+=\s+([\d,]+)", text)
    used = re.search(r"# bytes in allocated blocks\s+=\s+([\d,]+)", text)
    pymalloc = {
        "pymalloc_kb": int(arenas.group(1).replace(",", "")) * 1024 if arenas else -1,
        "pymalloc_used_kb": int(used.group(1).replace(",", "")) // 1024 if used else -1,
    }
    return {**rss, **pymalloc, "threads": len(os.listdir("/proc/self/task")), "grown": _traced()}


_first: list[tracemalloc.Snapshot] = []


def _traced() -> list[str]:
    """With WOLF_BENCH_TRACE=1: tracemalloc from the first reading on (slow), and at each later one
    the live Python allocations that grew most since, by traceback (the frames nearest the caller)."""
    if os.environ.get("WOLF_BENCH_TRACE") != "1":
        return []
    if not _first:
        tracemalloc.start(int(os.environ.get("WOLF_BENCH_TRACE_FRAMES", "12")))
        _first.append(tracemalloc.take_snapshot())
        return []
    grown = tracemalloc.take_snapshot().compare_to(_first[0], "traceback")[:8]
    return [f"traced now {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MB"] + [
        f"{d.size_diff / 1024:+.0f} KB in {d.count_diff:+d} blocks at "
        + " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in list(d.traceback)[::-1][:6])
        for d in grown
    ]


async def _serve(worker: object, on_exit: object = None) -> None:
    """Run `worker` (a temporalio Worker) and answer `stats` lines until `stop` or the end of stdin."""
    loop = asyncio.get_running_loop()
    async with worker:  # type: ignore[attr-defined]
        print(f"{MARK}ready", flush=True)
        while (line := (await loop.run_in_executor(None, sys.stdin.readline)).strip()) not in ("", "stop"):
            garbage = gc.collect()
            running = getattr(getattr(worker, "_workflow_worker", None), "_running_workflows", None)
            stats = {
                "rss_kb": _rss_kb(),
                "cached": len(running) if running is not None else -1,
                "garbage": garbage,
                "collections": [g["collections"] for g in gc.get_stats()],
            }
            if "trim" in line.split():
                ctypes.CDLL("libc.so.6").malloc_trim(0)
                stats["trimmed_kb"] = _rss_kb()
            if "memory" in line.split():  # after a trim: what the process holds
                stats.update(_memory())
            print(MARK + json.dumps(stats), flush=True)


@dataclass
class Empty(AbstractCapability[Any]):
    """A capability that contributes nothing and hooks nothing."""


@dataclass
class NoOpHooks(AbstractCapability[Any]):
    """A model-request hook and a tool hook that change nothing."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        return request_context

    async def before_tool_execute(
        self, ctx: RunContext[Any], *, call: ToolCallPart, tool_def: ToolDefinition, args: dict[str, Any]
    ) -> dict[str, Any]:
        return args


async def wolf_worker(address: str, namespace: str, task_queue: str) -> None:
    from temporalio.client import Client

    from agentwolf.payloads import data_converter
    from agentwolf.plugins import PluginRegistry, Plugins
    from agentwolf.worker.bootstrap import create_worker
    from agentwolf.worker.memory import tune_malloc

    tune_malloc()  # before connecting, as `python -m agentwolf.worker` does
    client = await Client.connect(address, namespace=namespace, data_converter=data_converter())
    registry = PluginRegistry("bench")
    registry.capability(Empty)
    registry.capability(NoOpHooks)
    plugins = Plugins()
    plugins.add(registry)
    worker, hosts = create_worker(client, task_queue=task_queue, local_models={"m": MODEL}, plugins=plugins)
    try:
        await _serve(worker)
    finally:
        await hosts.close()


async def pai_worker(address: str, namespace: str, task_queue: str) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    import tool_round  # fastmcp and pydantic-ai's Temporal integration: only in this process
    from temporalio.client import Client
    from temporalio.worker import Worker

    if pid_file := os.environ.get("WOLF_PID_FILE"):
        tool_round.PAI_TRANSPORT.env = {"WOLF_PID_FILE": pid_file}  # before the first connect
    client = await Client.connect(address, namespace=namespace, plugins=[tool_round.PydanticAIPlugin()])
    try:
        await _serve(Worker(client, task_queue=task_queue, workflows=[tool_round.PaiTurn]))
    finally:
        await tool_round.PAI_TRANSPORT.close()


class WorkerProcess:
    """A worker of `kind` (`wolf` or `pai`) in a child process; `extra_env` adds to its environment."""

    def __init__(
        self, kind: str, client: object, task_queue: str, log: Path, extra_env: dict[str, str] | None = None
    ) -> None:
        address = client.service_client.config.target_host  # type: ignore[attr-defined]
        namespace = client.namespace  # type: ignore[attr-defined]
        self.log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, kind, address, namespace, task_queue],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, **(extra_env or {})},
        )

    async def _line(self) -> str:
        """The worker's next answer; anything else it prints goes to the log."""
        while True:
            line = await asyncio.to_thread(self.proc.stdout.readline)  # type: ignore[union-attr]
            if not line:
                raise RuntimeError(f"the worker process ended (exit {self.proc.wait()}); see {self.log.name}")
            if line.startswith(MARK):
                return line.removeprefix(MARK).strip()
            self.log.write(line.encode(errors="replace"))

    async def ready(self) -> WorkerProcess:
        if (answer := await self._line()) != "ready":
            raise RuntimeError(f"the worker process said {answer!r}, not ready")
        return self

    async def stats(self, trim: bool = False, memory: bool = False) -> dict[str, Any]:
        """`memory`: with where the RSS is (`_memory`)."""
        line = "stats" + " trim" * trim + " memory" * memory
        self.proc.stdin.write(line + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return json.loads(await self._line())

    def stop(self) -> None:
        """Ask the worker to stop (it drains and closes its MCP servers); kill it if it takes too long."""
        try:
            self.proc.stdin.write("stop\n")  # type: ignore[union-attr]
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.log.close()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # agentwolf from this checkout
    kind, *where = sys.argv[1:]
    if kind == "floor":
        from memory_floor import floor_worker  # bench/memory_floor.py's bare temporalio session

        asyncio.run(floor_worker(*where))
    else:
        asyncio.run({"wolf": wolf_worker, "pai": pai_worker}[kind](*where))
