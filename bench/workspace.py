"""Workspaces: what a workspace tool call costs against a plain tool call, and what snapshots and
restores cost.

1. Per call, on one Temporal dev server and one worker (in this process): a turn of N rounds (a
   model request and one tool call each, a scripted FunctionModel) calling, on the MCP stdio test
   server, `add` (read-only: a local activity once known fast) or `record` (side effects: a
   regular activity), the plain tool calls; or `read_file` of a small file (read-only: a local
   activity when the session's worker is the workspace's home host), or `bash "true"` (a regular
   activity on the home host's queue, a sandboxed process per call). One warm-up turn each, then
   the median of three timed turns; prints ms per round and each workspace tool's ratio to the
   plain calls (goal <= 1.5).
2. Snapshot: a 5,000-file tree (50 folders of 100 files) snapshotted once, then 3 files changed
   and snapshotted again: the bytes that second snapshot stored and its time (goal: about the 3
   files, <= 200 ms).
3. Restore: a 50 MB tree (500 files of 100 KB) restored into a fresh folder with no index, as a
   worker that never held it would (goal <= 3 s).

Run:  python bench/workspace.py [--rounds 20] [--no-calls]   (--no-calls: parts 2 and 3 only, no server)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio.testing import WorkflowEnvironment

from agentwolf import workspace_store
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.ops.devserver import dynamic_config_args, temporal_binary
from agentwolf.payloads import data_converter
from agentwolf.worker.bootstrap import create_worker
from agentwolf.workflows.types import SEARCH_ATTRIBUTES

TOOLS_SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "support" / "tools_server.py")
REPEATS = 3
CALLS: dict[str, tuple[str, Callable[[int], dict[str, Any]]]] = {
    # Arguments differ by round (`n`): the loop guard ends a turn repeating one call.
    "plain (MCP add)": ("add", lambda n: {"a": n, "b": 2}),
    "plain (MCP record)": ("record", lambda n: {"tag": f"t{n}"}),
    "read_file": ("read_file", lambda n: {"path": "README.md", "limit": n + 1}),
    'bash "true"': ("bash", lambda n: {"command": f"true {n}"}),
}


def model(tool: str, args: Callable[[int], dict[str, Any]]) -> FunctionModel:
    """Calls `tool` once per round until the prompt's number of results is there, then "done"."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        rounds = int(str(messages[0].parts[-1].content).split()[-1])  # type: ignore[union-attr]
        done = sum(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        if done >= rounds:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(tool, args(done), tool_call_id=f"c{done}")])

    return FunctionModel(answer)


async def per_call(env: WorkflowEnvironment, rounds: int, seed: Path) -> dict[str, float]:
    """ms per round of each kind of call."""
    out: dict[str, float] = {}
    effects = seed.parent / "effects"
    server = {"command": sys.executable, "args": [TOOLS_SERVER], "env": {"WOLF_SIDE_EFFECTS": str(effects)}}
    for name, (tool, args) in CALLS.items():
        manifest = Manifest.model_validate(
            {
                "host": {"mcp_servers": {"tools": server}},
                "agents": {
                    "a": {
                        "model": "local:m",
                        "capabilities": [{"mcp": "tools"}],
                        "workspace": {},
                        "limits": {"max_steps": rounds + 5},
                    }
                },
            }
        )
        queue = f"bench-ws-{tool}"
        worker, hosts = create_worker(env.client, task_queue=queue, local_models={"m": model(tool, args)})
        async with worker:
            try:
                wolf = WolfClient(env.client, task_queue=queue)

                async def turn(n: int, wolf: WolfClient = wolf, manifest: Manifest = manifest) -> float:
                    started = time.perf_counter()
                    sid = await wolf.submit(f"rounds {n}", "a", manifest, workspace=seed)
                    result = await wolf.result(sid)
                    assert result.output == "done", result
                    return time.perf_counter() - started

                await turn(2)
                seconds = [await turn(rounds) for _ in range(REPEATS)]
            finally:
                await hosts.close()
        out[name] = statistics.median(seconds) * 1000 / rounds
    return out


async def off_loop(fn: Any, *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)


async def snapshots(tmp: Path) -> tuple[int, float, int, float]:
    """(stored bytes, ms) of a snapshot after 3 of 5,000 files changed, and the 3 files' bytes and
    the first snapshot's ms."""
    converter = data_converter(str(tmp / "store-snap"))
    root = tmp / "tree"
    for i in range(50):
        folder = root / f"pkg{i}"
        folder.mkdir(parents=True)
        for j in range(100):
            (folder / f"mod{j}.py").write_text(f"# module {i}.{j}\n" + "x = 1\n" * 40)
    index = workspace_store.index_path(root)
    started = time.perf_counter()
    await workspace_store.take(converter, root, off_loop, index)
    first = (time.perf_counter() - started) * 1000
    changed = [root / "pkg0" / "mod0.py", root / "pkg7" / "mod3.py", root / "pkg42" / "mod99.py"]
    for path in changed:
        path.write_text(path.read_text() + "y = 2\n")
    started = time.perf_counter()
    taken = await workspace_store.take(converter, root, off_loop, index)
    second = (time.perf_counter() - started) * 1000
    return taken.stored_bytes, second, sum(p.stat().st_size for p in changed), first


async def restore(tmp: Path) -> tuple[float, int]:
    """(seconds, bytes) to restore a 50 MB tree into a folder that never held it."""
    converter = data_converter(str(tmp / "store-restore"))
    root = tmp / "big"
    for i in range(10):
        folder = root / f"data{i}"
        folder.mkdir(parents=True)
        for j in range(50):
            (folder / f"blob{j}.bin").write_bytes(os.urandom(100_000))
    taken = await workspace_store.take(converter, root, off_loop)
    fresh = tmp / "fresh-worker" / "big"
    started = time.perf_counter()
    restored = await workspace_store.restore(converter, taken.tree, fresh, off_loop)
    return time.perf_counter() - started, restored.bytes


async def timed_calls(rounds: int, seed: Path) -> dict[str, float]:
    """Part 1 on a dev server of its own."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=data_converter(),
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=dynamic_config_args(),
    )
    try:
        return await per_call(env, rounds, seed)
    finally:
        await env.shutdown()


def report_calls(calls: dict[str, float], rounds: int) -> None:
    local, remote = calls["plain (MCP add)"], calls["plain (MCP record)"]
    print(f"per call: median of {REPEATS} turns of {rounds} rounds (model request + one call)")
    print(f"  {'plain (MCP add)':<19} {local:7.1f} ms/round  (read-only: a local activity once known fast)")
    print(f"  {'plain (MCP record)':<19} {remote:7.1f} ms/round  (side effects: a regular activity)")
    for name in ("read_file", 'bash "true"'):
        ms = calls[name]
        print(
            f"  {name:<19} {ms:7.1f} ms/round  {ms / local:.2f}x add, {ms / remote:.2f}x record  goal <= 1.5x"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="tool calls per timed turn")
    parser.add_argument("--no-calls", action="store_true", help="only the snapshot and restore parts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        os.environ["WOLF_PAYLOAD_STORE"] = str(tmp / "payloads")
        os.environ["WOLF_HOME"] = str(tmp / "home")
        seed = tmp / "seed"
        seed.mkdir()
        (seed / "README.md").write_text("A small file to read.\n" * 20)
        calls = {} if args.no_calls else await timed_calls(args.rounds, seed)
        stored, second, changed, first = await snapshots(tmp)
        seconds, restored = await restore(tmp)
    if calls:
        report_calls(calls, args.rounds)
    print(f"snapshot of 5,000 files: first {first:.0f} ms; after 3 files changed ({changed} bytes):")
    print(f"  stored {stored} bytes (3 files, a bucket and tree per folder, the root tree), {second:.0f} ms")
    print("  goal: bytes ~ the 3 files, <= 200 ms")
    print(f"restore of {restored / 1e6:.0f} MB (500 files) on a fresh folder: {seconds:.2f} s  goal <= 3 s")


if __name__ == "__main__":
    asyncio.run(main())
