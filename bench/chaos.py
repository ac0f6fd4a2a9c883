"""Chaos: sessions run multi-step turns while the worker is SIGKILLed, the MCP server is killed, or
the Temporal dev server is stopped and restarted on its SQLite file, at random points; every session must finish with every message and tool result exactly once.

Each iteration submits `--sessions` background tasks (a scripted OpenAI-compatible model on
127.0.0.1 calling `record(tag)` and `slow(0.3)` in parallel for `--steps` steps), kills something
at a random moment, and checks:
- the session completes, its prompt appears once, every tool call has exactly one result;
- the side-effect tool ran at most twice per tag (the documented guarantee: a completed call never
  re-runs; a call in flight when its worker dies is retried once on another worker), and at least
  once unless the MCP server itself was killed during that call (then the model sees an error).

Run:  python bench/chaos.py [--iterations 50] [--seed 1]     (tests/chaos runs a small seeded version)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart
from temporalio.client import Client
from temporalio.service import RPCError

from agentwolf.client.devserver import start_dev_command
from agentwolf.client.local_stack import listening
from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.payloads import data_converter
from tests.support.openai_server import Reply, ScriptedOpenAI, tool_outputs

TOOLS_SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "support" / "tools_server.py")


@dataclass
class Report:
    iterations: int = 0
    sessions: int = 0
    completed: int = 0
    lost: int = 0
    duplicated: int = 0
    over_guarantee: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return self.completed == self.sessions and not (self.lost or self.duplicated or self.over_guarantee)


def _prompt_of(request: dict) -> str:
    for item in request.get("input", []):
        if item.get("role") == "user":
            content = item["content"]
            return content if isinstance(content, str) else content[0]["text"]
    raise ValueError("no user prompt")


def _model(steps: int):
    def reply(request: dict) -> Reply:
        done = len(tool_outputs(request)) // 2
        if done >= steps:
            return Reply(text="finished")
        tag = f"{_prompt_of(request)}-{done}"
        return Reply(tool_calls=[("record", {"tag": tag}), ("slow", {"seconds": 0.3 + done / 1000})])

    return reply


def _start_worker(address: str, task_queue: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "agentwolf.worker", "--address", address, "--task-queue", task_queue],
            stdout=out,
            stderr=out,
        )


def _mcp_pids(pid_file: Path) -> list[int]:
    return [int(p) for p in pid_file.read_text().split()] if pid_file.exists() else []


async def run_chaos(iterations: int, seed: int, sessions: int = 3, steps: int = 4) -> Report:
    rng = random.Random(seed)
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="wolf-chaos-"))
    previous_store = os.environ.get("WOLF_PAYLOAD_STORE")
    os.environ["WOLF_PAYLOAD_STORE"] = str(work / "payloads")  # shared with the worker processes
    server = _DevServer(work / "temporal.db")
    try:
        client = await server.start()
        with ScriptedOpenAI(_model(steps)) as model:
            for it in range(iterations):
                t0 = time.monotonic()
                await _iteration(server, client, model.base_url, work, it, rng, sessions, steps, report)
                report.iterations += 1
                print(f"iteration {it}: {time.monotonic() - t0:.1f}s", file=sys.stderr)
    finally:
        server.stop()
        if previous_store is None:
            os.environ.pop("WOLF_PAYLOAD_STORE", None)
        else:
            os.environ["WOLF_PAYLOAD_STORE"] = previous_store
    return report


class _DevServer:
    """A dev server on a SQLite file, as `wolf up` runs it, that chaos can stop and restart."""

    def __init__(self, db: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.db = db
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> Client:
        self.proc = subprocess.Popen(  # noqa: ASYNC220 - returns at once
            start_dev_command(self.port, str(self.db), ui=False), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        while not listening(self.address):
            await asyncio.sleep(0.1)
        return await Client.connect(self.address, data_converter=data_converter())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


async def _results(wolf: WolfClient, sids: list[str]) -> list:
    """Wait for every result, riding out a server restart (the client's RPCs fail meanwhile)."""
    deadline = time.monotonic() + 180
    while True:
        try:
            return await asyncio.gather(*(wolf.result(s) for s in sids))
        except RPCError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1)


async def _iteration(server, client, base_url, work, it, rng, sessions, steps, report) -> None:
    effects, pid_file, task_queue = work / f"effects-{it}", work / f"pids-{it}", f"chaos-{it}"
    manifest = Manifest.model_validate(
        {
            "host": {
                "models": {"providers": {"openai": {"api_key": "k", "base_url": base_url}}},
                "mcp_servers": {
                    "tools": {
                        "command": sys.executable,
                        "args": [TOOLS_SERVER],
                        "env": {"WOLF_SIDE_EFFECTS": str(effects), "WOLF_PID_FILE": str(pid_file)},
                        "fast_call_ms": 0,
                    }
                },
            },
            "agents": {"a": {"model": "openai:gpt-4o-mini", "capabilities": [{"mcp": "tools"}]}},
        }
    )
    address = server.address
    wolf = WolfClient(client, task_queue=task_queue)
    workers = [_start_worker(address, task_queue, work / "worker.log")]
    fault = rng.choice(["worker", "worker", "mcp", "server"])
    try:
        sids = [await wolf.submit(f"it{it}s{i}", "a", manifest) for i in range(sessions)]
        await asyncio.sleep(rng.uniform(0.3, 0.3 * steps * 2))
        if fault == "worker":
            workers[0].send_signal(signal.SIGKILL)
            workers[0].wait()
            workers.append(_start_worker(address, task_queue, work / "worker.log"))
        elif fault == "server":
            server.stop()
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            await server.start()
        else:
            for pid in _mcp_pids(pid_file):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        report.faults[fault] += 1
        results = await _results(wolf, sids)
        for i, (sid, result) in enumerate(zip(sids, results, strict=True)):
            report.sessions += 1
            report.completed += result.outcome == "completed"
            _check(report, sid, f"it{it}s{i}", await wolf.transcript(sid), steps)
        recorded = Counter(effects.read_text().split()) if effects.exists() else Counter()
        for i in range(sessions):
            for n in range(steps):
                count = recorded[f"it{it}s{i}-{n}"]
                if count > 2 or (count == 0 and fault == "worker"):
                    report.over_guarantee += 1
                    report.problems.append(f"it{it}s{i}-{n} ran {count} times ({fault} fault)")
    finally:
        for proc in workers:  # chaos needs no graceful shutdown: the next iteration has its own queue
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _check(report: Report, sid: str, prompt: str, transcript, steps: int) -> None:
    prompts = [
        p.content
        for m in transcript
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart) and p.content == prompt
    ]
    calls = [p.tool_call_id for m in transcript if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)]
    returns = [p.tool_call_id for m in transcript if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    if len(prompts) != 1:
        if not prompts:
            report.lost += 1
        else:
            report.duplicated += 1
        report.problems.append(f"{sid}: prompt appears {len(prompts)} times")
    missing, extra = set(calls) - set(returns), len(returns) - len(set(returns))
    if missing or len(calls) != 2 * steps:
        report.lost += 1
        report.problems.append(f"{sid}: {len(calls)} calls, unanswered {sorted(missing)}")
    if extra:
        report.duplicated += 1
        report.problems.append(f"{sid}: {extra} duplicated tool results")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    started = time.monotonic()
    report = asyncio.run(run_chaos(args.iterations, args.seed, args.sessions, args.steps))
    print(json.dumps({k: v for k, v in report.__dict__.items() if k != "problems"}, default=dict))
    for problem in report.problems:
        print("problem:", problem)
    print(
        f"{report.completed}/{report.sessions} sessions complete over {report.iterations} iterations "
        f"(faults: {dict(report.faults)}), {report.lost} lost, {report.duplicated} duplicated, "
        f"{report.over_guarantee} side effects outside the guarantee; {time.monotonic() - started:.0f}s"
    )
    sys.stdout.flush()
    os._exit(0 if report.ok() else 1)  # skip interpreter finalization (see agentwolf.client.cli._run)


if __name__ == "__main__":
    main()
