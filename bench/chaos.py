"""Chaos: sessions run multi-step turns while the worker is SIGKILLed, the MCP server is killed, or
the Temporal dev server is stopped and restarted on its SQLite file, at random points; every session
must finish with every message and tool result exactly once.

Each iteration runs `--sessions` sessions against a scripted OpenAI-compatible model on 127.0.0.1
that calls `record(tag)` and `slow(0.3)` in parallel for `--steps` steps, in one of four scenarios:
- `steps`: background tasks of `--steps` steps; the worker is SIGKILLed, the MCP server killed or
  the dev server restarted at a random moment;
- `continue_as_new`: interactive sessions that snapshot at every idle point
  (`host.sessions.continue_as_new_bytes: 1`) and run `--steps` one-step turns, each prompt sent
  when the previous turn is over; the worker is SIGKILLed 0-80 ms after the model gives one
  turn's final answer, i.e. around the workflow task that ends the turn and continues as new
  (here that task ends 30-50 ms after the answer);
- `approval`: background tasks whose `record` calls need approval (`confirm`), answered by a
  person 0.1-1.5 s after they are asked (by signal: an answer can arrive while no worker runs);
  the worker is SIGKILLed 50-600 ms after the model asks for a chosen step's calls, i.e. while
  that approval waits or just after it is answered;
- `local_activity`: background tasks calling `record(tag)` and `lookup(tag, 0.3)` in parallel, both
  servers with `fast_call_ms: 2000`; `lookup` (tests/chaos/lookup_server.py) is annotated read-only,
  so from its second call on it runs as a local activity, while `record` (not annotated) must stay
  a regular activity however fast it is. The worker is SIGKILLed 0-100 ms after a chosen step's
  `lookup` started (it sleeps 300 ms), i.e. during that local activity.
It checks:
- the session completes, each of its prompts appears once, every tool call has exactly one result;
- the side-effect tool ran at most once per tag (the documented guarantee: a completed call never
  re-runs; a call in flight when its worker dies is not run again by the retry, which tells the
  model it was cut), and at least once unless the MCP server itself was killed during that call
  (then the model sees an error);
- approved calls ran (their results say so); continue-as-new sessions did continue as new;
- `local_activity`: every `lookup` ran, and at most once more than once per worker kill (a local
  activity's result is durable only when its workflow task completes, so the call in flight when
  the worker dies runs again: the documented guarantee for tools safe to repeat; counted as
  `reran_repeat_safe`); `record` never ran as a local activity (read back from the histories: no
  local-activity marker carries its result, each call is a scheduled activity) and keeps the
  guarantee above; the killed call was a local activity.
Where the worker kills landed (read back from the histories) is reported, not judged.

Run:  python bench/chaos.py [--iterations 50] [--seed 1]
        [--scenarios steps,continue_as_new,approval,local_activity]
(tests/chaos runs small seeded versions)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.connection import connect
from agentwolf.ops.devserver import start_dev_command
from agentwolf.ops.local_stack import listening
from agentwolf.workflows.session.workflow import SessionWorkflow
from agentwolf.workflows.types import Approval, workflow_id
from tests.support.openai_server import Reply, ScriptedOpenAI

TOOLS_SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "support" / "tools_server.py")
LOOKUP_SERVER = str(Path(__file__).resolve().parents[1] / "tests" / "chaos" / "lookup_server.py")
SCENARIOS = ("steps", "continue_as_new", "approval", "local_activity")
LOOKUP_SECONDS = 0.3
"""How long a `lookup` call takes: the worker is killed during it."""
FAST_CALL_MS = 2000
"""The `local_activity` scenario's `fast_call_ms`: `lookup` (and `record`, were it safe to repeat)
count as known fast."""
ITERATION_DEADLINE = 240.0
"""Seconds an iteration may take before its sessions count as stuck."""


@dataclass
class Report:
    iterations: int = 0
    sessions: int = 0
    completed: int = 0
    lost: int = 0
    duplicated: int = 0
    over_guarantee: int = 0
    reran_repeat_safe: int = 0
    """Repeat-safe calls that ran again after a worker kill (local activities): within the guarantee."""
    local_side_effects: int = 0
    """Calls of the side-effect tool that ran as local activities (each one is outside the guarantee)."""
    faults: Counter[str] = field(default_factory=Counter)
    scenarios: Counter[str] = field(default_factory=Counter)
    landed: Counter[str] = field(default_factory=Counter)
    """Where the worker kills of the continue-as-new and approval scenarios landed."""
    problems: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return self.completed == self.sessions and not (
            self.lost or self.duplicated or self.over_guarantee or self.problems
        )


def _user_prompts(request: dict) -> list[str]:
    prompts = []
    for item in request.get("input", []):
        if item.get("role") == "user":
            content = item["content"]
            prompts.append(content if isinstance(content, str) else content[0]["text"])
    if not prompts:
        raise ValueError("no user prompt")
    return prompts


def _outputs_this_turn(request: dict) -> int:
    """Tool results sent since the turn's prompt (the last user message)."""
    items = request.get("input", [])
    last_user = max(i for i, item in enumerate(items) if item.get("role") == "user")
    return sum(item.get("type") == "function_call_output" for item in items[last_user:])


class _Model:
    """Each turn's prompt is `<tag>x<n>`: `n` steps of `record(<tag>-<step>)` and `slow`, then "finished".

    `on(prompt, moment, callback)` runs `callback` (once, on the server's thread) when the model
    answers that turn's step `moment` (an int: with its tool calls) or its last request ("final")."""

    def __init__(self) -> None:
        self.watch: dict[tuple[str, int | str], Callable[[], None]] = {}

    def on(self, prompt: str, moment: int | str, callback: Callable[[], None]) -> None:
        self.watch[(prompt, moment)] = callback

    def reply(self, request: dict) -> Reply:
        prompt = _user_prompts(request)[-1]
        steps = int(re.search(r"x(\d+)$", prompt).group(1))  # type: ignore[union-attr]
        done = _outputs_this_turn(request) // 2
        if done >= steps:
            if callback := self.watch.pop((prompt, "final"), None):
                callback()
            return Reply(text="finished")
        if callback := self.watch.pop((prompt, done), None):
            callback()
        tag = f"{prompt}-{done}"
        if prompt.startswith("la"):  # the local_activity scenario
            return Reply(
                tool_calls=[("record", {"tag": tag}), ("lookup", {"tag": tag, "seconds": LOOKUP_SECONDS})]
            )
        return Reply(tool_calls=[("record", {"tag": tag}), ("slow", {"seconds": 0.3 + done / 1000})])


def _start_worker(address: str, task_queue: str, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "agentwolf.worker", "--address", address, "--task-queue", task_queue],
            stdout=out,
            stderr=out,
        )


def _mcp_pids(pid_file: Path) -> list[int]:
    return [int(p) for p in pid_file.read_text().split()] if pid_file.exists() else []


async def run_chaos(
    iterations: int,
    seed: int,
    sessions: int = 3,
    steps: int = 4,
    scenarios: tuple[str, ...] = SCENARIOS,
    *,
    rotate: bool = False,
) -> Report:
    """`iterations` rounds, each of one scenario drawn at random (`rotate`: taken in turn)."""
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown or not scenarios:
        raise ValueError(f"unknown scenarios {sorted(unknown)}; choose from {SCENARIOS}")
    rng = random.Random(seed)
    report = Report()
    work = Path(tempfile.mkdtemp(prefix="wolf-chaos-"))
    previous_store = os.environ.get("WOLF_PAYLOAD_STORE")
    os.environ["WOLF_PAYLOAD_STORE"] = str(work / "payloads")  # shared with the worker processes
    server = _DevServer(work / "temporal.db")
    model = _Model()
    try:
        client = await server.start()
        with ScriptedOpenAI(model.reply) as openai:
            for it in range(iterations):
                t0 = time.monotonic()
                if rotate or len(scenarios) == 1:
                    scenario = scenarios[it % len(scenarios)]
                else:
                    scenario = rng.choice(scenarios)
                chaos = _Iteration(
                    server, client, model, openai.base_url, work, it, rng, sessions, steps, report
                )
                try:
                    await getattr(chaos, f"run_{scenario}")()
                except Exception as exc:  # noqa: BLE001 - a stuck or failed iteration is a finding, not a crash
                    report.problems.append(f"iteration {it} ({scenario}) failed: {type(exc).__name__}: {exc}")
                report.scenarios[scenario] += 1
                report.iterations += 1
                print(f"iteration {it} ({scenario}): {time.monotonic() - t0:.1f}s", file=sys.stderr)
    finally:
        server.stop()
        if previous_store is None:
            os.environ.pop("WOLF_PAYLOAD_STORE", None)
        else:
            os.environ["WOLF_PAYLOAD_STORE"] = previous_store
    if report.ok():
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"kept for diagnosis: {work} (temporal.db, worker.log, side effects)", file=sys.stderr)
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
            start_dev_command(self.port, str(self.db), ui=False),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while not listening(self.address):
            await asyncio.sleep(0.1)
        return await connect(self.address)

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


async def _patiently(call: Callable[[], object], deadline: float, timeout: float = 10.0):
    """`await call()`, retried while no worker answers queries (one was just killed)."""
    while True:
        try:
            return await asyncio.wait_for(call(), timeout)  # type: ignore[arg-type]
        except (RPCError, WorkflowQueryFailedError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


class _Iteration:
    def __init__(self, server, client, model, base_url, work, it, rng, sessions, steps, report) -> None:
        self.server, self.client, self.model, self.base_url, self.work = server, client, model, base_url, work
        self.it, self.rng, self.sessions, self.steps, self.report = it, rng, sessions, steps, report
        self.effects, self.pid_file, self.task_queue = (
            work / f"effects-{it}",
            work / f"pids-{it}",
            f"chaos-{it}",
        )
        self.wolf = WolfClient(client, task_queue=self.task_queue)
        self.workers: list[subprocess.Popen[bytes]] = []
        self.deadline = time.monotonic() + ITERATION_DEADLINE

    def manifest(self, *, fast_call_ms: int = 0, lookups: Path | None = None, **host: object) -> Manifest:
        """The test tools (`record`, `slow`...), and with `lookups` the lookup server counting into it."""
        servers: dict[str, object] = {
            "tools": {
                "command": sys.executable,
                "args": [TOOLS_SERVER],
                "env": {"WOLF_SIDE_EFFECTS": str(self.effects), "WOLF_PID_FILE": str(self.pid_file)},
                "fast_call_ms": fast_call_ms,
            }
        }
        if lookups is not None:
            servers["lookups"] = {
                "command": sys.executable,
                "args": [LOOKUP_SERVER],
                "env": {"WOLF_LOOKUPS": str(lookups)},
                "fast_call_ms": fast_call_ms,
            }
        return Manifest.model_validate(
            {
                "host": {
                    "models": {"providers": {"openai": {"api_key": "k", "base_url": self.base_url}}},
                    "mcp_servers": servers,
                    **host,
                },
                "agents": {
                    "a": {"model": "openai:gpt-4o-mini", "capabilities": [{"mcp": name} for name in servers]}
                },
            }
        )

    def start_worker(self) -> None:
        self.workers.append(_start_worker(self.server.address, self.task_queue, self.work / "worker.log"))

    def kill_worker(self) -> None:
        self.workers[-1].send_signal(signal.SIGKILL)
        self.workers[-1].wait()
        self.start_worker()
        self.report.faults["worker"] += 1

    def stop_workers(self) -> None:
        for proc in self.workers:  # chaos needs no graceful shutdown: the next iteration has its own queue
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    # -- scenarios ---------------------------------------------------------------------------------

    async def run_steps(self) -> None:
        """Background tasks; a random fault at a random moment."""
        rng, it, steps = self.rng, self.it, self.steps
        manifest = self.manifest()
        self.start_worker()
        fault = rng.choice(["worker", "worker", "mcp", "server"])
        try:
            prompts = [f"it{it}s{i}x{steps}" for i in range(self.sessions)]
            sids = [await self.wolf.submit(p, "a", manifest) for p in prompts]
            await asyncio.sleep(rng.uniform(0.3, 0.3 * steps * 2))
            if fault == "worker":
                self.kill_worker()
            elif fault == "server":
                self.server.stop()
                await asyncio.sleep(rng.uniform(0.5, 2.0))
                await self.server.start()
                self.report.faults[fault] += 1
            else:
                for pid in _mcp_pids(self.pid_file):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                self.report.faults[fault] += 1
            await self.check(sids, [[p] for p in prompts], fault)
        finally:
            self.stop_workers()

    async def run_continue_as_new(self) -> None:
        """Interactive sessions of one-step turns, continuing as new at every idle point; the worker
        is killed around the end of one turn (its continue-as-new)."""
        rng, it, turns = self.rng, self.it, self.steps
        manifest = self.manifest(sessions={"continue_as_new_bytes": 1})
        prompts = [[f"it{it}s{i}t{k}x1" for k in range(turns)] for i in range(self.sessions)]
        target_session, target_turn = rng.randrange(self.sessions), rng.randrange(max(1, turns - 1))
        delay = rng.uniform(0.0, 0.08)
        reached = asyncio.Event()
        loop = asyncio.get_running_loop()
        self.model.on(
            prompts[target_session][target_turn], "final", lambda: loop.call_soon_threadsafe(reached.set)
        )
        self.start_worker()
        try:
            sids = [await self.wolf.start_session("a", manifest) for _ in range(self.sessions)]

            async def converse(sid: str, session_prompts: list[str]) -> None:
                for k, prompt in enumerate(session_prompts):
                    # Not retried: a second update would be a second prompt. It waits for a worker.
                    await asyncio.wait_for(self.wolf.prompt(sid, prompt), self.deadline - time.monotonic())
                    await _patiently(lambda n=k + 1: self._turns_done(sid, n), self.deadline)
                await self.wolf.close(sid)

            async def kill() -> None:
                await asyncio.wait_for(reached.wait(), ITERATION_DEADLINE)
                await asyncio.sleep(delay)
                self.kill_worker()

            async with asyncio.TaskGroup() as group:
                group.create_task(kill())
                for sid, session_prompts in zip(sids, prompts, strict=True):
                    group.create_task(converse(sid, session_prompts))
            await self.check(sids, prompts, "worker")
            self.report.landed[
                await _continue_as_new_landing(self.client, workflow_id("default", sids[target_session]))
            ] += 1
            for sid in sids:
                runs = (await self.wolf.result(sid)).counters.continued_as_new
                if runs < turns - 1:  # the last one may meet the close
                    self.report.problems.append(f"{sid}: continued as new {runs} times over {turns} turns")
        finally:
            self.model.watch.clear()
            self.stop_workers()

    async def run_approval(self) -> None:
        """Background tasks whose `record` calls wait for approval; the worker is killed while one waits."""
        rng, it, steps = self.rng, self.it, self.steps
        manifest = self.manifest(permissions={"rules": [{"tool": "record", "action": "confirm"}]})
        prompts = [f"it{it}s{i}x{steps}" for i in range(self.sessions)]
        target, step = rng.randrange(self.sessions), rng.randrange(steps)
        delay = rng.uniform(0.05, 0.6)
        asked = asyncio.Event()
        loop = asyncio.get_running_loop()
        self.model.on(prompts[target], step, lambda: loop.call_soon_threadsafe(asked.set))
        self.start_worker()
        try:
            sids = [await self.wolf.submit(p, "a", manifest) for p in prompts]
            finished = asyncio.Event()

            async def person(sid: str) -> None:
                """Approves each call asked for, after a while, by signal (no status check: the
                worker may be dead when the answer goes out)."""
                handle = self.client.get_workflow_handle(workflow_id("default", sid))
                answered: set[str] = set()
                while not finished.is_set():
                    try:
                        status = await asyncio.wait_for(self.wolf.status(sid), 2)
                    except (RPCError, WorkflowQueryFailedError, TimeoutError):
                        await asyncio.sleep(0.2)
                        continue
                    for pending in status.pending_approvals:
                        if pending.call_id not in answered:
                            answered.add(pending.call_id)
                            await asyncio.sleep(rng.uniform(0.1, 1.5))
                            await handle.signal(SessionWorkflow.approve, Approval(call_id=pending.call_id))
                    await asyncio.sleep(0.1)

            async def kill() -> None:
                await asyncio.wait_for(asked.wait(), ITERATION_DEADLINE)
                await asyncio.sleep(delay)
                try:
                    state = (await asyncio.wait_for(self.wolf.status(sids[target]), 2)).state
                except (RPCError, WorkflowQueryFailedError, TimeoutError):
                    state = "unknown"
                self.kill_worker()
                self.report.landed[f"approval: session {state}"] += 1

            people = [asyncio.create_task(person(sid)) for sid in sids]
            try:
                await kill()
                await self.check(sids, [[p] for p in prompts], "worker")
            finally:
                finished.set()
                await asyncio.gather(*people, return_exceptions=True)
            for sid, prompt in zip(sids, prompts, strict=True):
                transcript = await self.wolf.transcript(sid)
                records = [
                    p.content
                    for m in transcript
                    if isinstance(m, ModelRequest)
                    for p in m.parts
                    if isinstance(p, ToolReturnPart) and p.tool_name == "record"
                ]
                if records != [f"recorded {prompt}-{n}" for n in range(steps)]:
                    self.report.problems.append(f"{sid}: approved records returned {records}")
        finally:
            self.model.watch.clear()
            self.stop_workers()

    async def run_local_activity(self) -> None:
        """Background tasks calling `record` and the read-only `lookup` in parallel, both known fast;
        the worker is killed while a chosen step's `lookup` runs as a local activity."""
        rng, it, steps = self.rng, self.it, self.steps
        if steps < 2:
            raise ValueError(
                "local_activity needs --steps >= 2: a tool's first call is never a local activity"
            )
        lookups = self.work / f"lookups-{it}"
        manifest = self.manifest(fast_call_ms=FAST_CALL_MS, lookups=lookups)
        prompts = [f"la{it}s{i}x{steps}" for i in range(self.sessions)]
        target = rng.randrange(self.sessions)
        tag = f"{prompts[target]}-{rng.randrange(1, steps)}"  # step 0's calls are regular activities
        delay = rng.uniform(0.0, 0.1)
        self.start_worker()
        try:
            sids = [await self.wolf.submit(p, "a", manifest) for p in prompts]
            await _started(lookups, tag, self.deadline)
            await asyncio.sleep(delay)
            self.kill_worker()
            await self.check(sids, [[p] for p in prompts], "worker")
            ran = Counter(lookups.read_text().split())
            for n_tag in (f"{p}-{n}" for p in prompts for n in range(steps)):
                if not 1 <= ran[n_tag] <= 2:  # one kill: the call in flight may run once more
                    self.report.over_guarantee += 1
                    self.report.problems.append(f"lookup {n_tag} ran {ran[n_tag]} times (1 worker kill)")
                self.report.reran_repeat_safe += ran[n_tag] == 2
            for sid, prompt in zip(sids, prompts, strict=True):
                local, scheduled = await _tool_calls(self.client, workflow_id("default", sid))
                side_effects = [c for c in local if c.startswith("recorded ")]
                if side_effects:
                    self.report.local_side_effects += len(side_effects)
                    self.report.over_guarantee += len(side_effects)
                    self.report.problems.append(f"{sid}: `record` ran as a local activity: {side_effects}")
                if scheduled.count("record") != steps:
                    self.report.problems.append(
                        f"{sid}: {scheduled.count('record')} `record` activities for {steps} steps"
                    )
                if prompt == prompts[target]:
                    where = "a local activity" if f"looked up {tag}" in local else "a regular activity"
                    self.report.landed[f"local_activity: during {where}"] += 1
                    if where != "a local activity":
                        self.report.problems.append(
                            f"{sid}: the killed lookup {tag} was not a local activity"
                        )
        finally:
            self.stop_workers()

    async def _turns_done(self, sid: str, n: int) -> bool:
        while True:
            status = await self.wolf.status(sid)
            if status.counters.turns >= n and status.state == "idle":
                return True
            if time.monotonic() > self.deadline:
                raise TimeoutError(f"{sid}: turn {n} did not finish")
            await asyncio.sleep(0.1)

    # -- checks --------------------------------------------------------------------------------------

    async def check(self, sids: list[str], prompts: list[list[str]], fault: str) -> None:
        results = await asyncio.wait_for(
            _results(self.wolf, sids), max(1.0, self.deadline - time.monotonic())
        )
        for sid, result, session_prompts in zip(sids, results, prompts, strict=True):
            self.report.sessions += 1
            self.report.completed += result.outcome == "completed"
            transcript = await _patiently(lambda s=sid: self.wolf.transcript(s), self.deadline)
            _check(self.report, sid, session_prompts, transcript, self.steps)
        recorded = Counter(self.effects.read_text().split()) if self.effects.exists() else Counter()
        for session_prompts in prompts:
            steps_each = self.steps // len(session_prompts)
            for tag in (f"{p}-{n}" for p in session_prompts for n in range(steps_each)):
                count = recorded[tag]
                if count > 1 or (count == 0 and fault == "worker"):
                    self.report.over_guarantee += 1
                    self.report.problems.append(f"{tag} ran {count} times ({fault} fault)")


def _check(report: Report, sid: str, prompts: list[str], transcript, steps: int) -> None:
    """Every prompt once, `steps` steps of two calls in all, each call answered exactly once."""
    said = [
        p.content
        for m in transcript
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]
    for prompt in prompts:
        if said.count(prompt) != 1:
            if prompt not in said:
                report.lost += 1
            else:
                report.duplicated += 1
            report.problems.append(f"{sid}: prompt {prompt!r} appears {said.count(prompt)} times")
    calls = [
        p.tool_call_id
        for m in transcript
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart)
    ]
    returns = [
        p.tool_call_id
        for m in transcript
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    ]
    missing, extra = set(calls) - set(returns), len(returns) - len(set(returns))
    if missing or len(calls) != 2 * steps:
        report.lost += 1
        report.problems.append(f"{sid}: {len(calls)} calls, unanswered {sorted(missing)}")
    if extra:
        report.duplicated += 1
        report.problems.append(f"{sid}: {extra} duplicated tool results")


async def _started(log: Path, tag: str, deadline: float) -> None:
    """Wait until a call of `lookup` for `tag` has started (its line is in the log)."""
    while not (log.exists() and tag in log.read_text().split()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"lookup {tag} never started")
        await asyncio.sleep(0.005)


async def _tool_calls(client: Client, wid: str) -> tuple[list[str], list[str]]:
    """(results of the tool calls that ran as local activities, tools called as regular activities),
    read from the history: a local activity leaves only a marker with its result, a regular one its
    scheduled input."""
    history = await client.get_workflow_handle(wid).fetch_history()
    local, scheduled = [], []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            details = event.marker_recorded_event_attributes.details
            if "result" in details and details["result"].payloads:
                result = json.loads(details["result"].payloads[0].data)
                if isinstance(result, dict) and isinstance(result.get("content"), str):
                    local.append(result["content"])
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            if attributes.activity_type.name == "wolf.call_tool":
                scheduled.append(json.loads(attributes.input.payloads[0].data)["tool"])
    return local, scheduled


async def _continue_as_new_landing(client: Client, wid: str) -> str:
    """Where a worker kill landed in a continue-as-new session, read from its runs' histories: the
    first workflow task that timed out (its worker died) or the first retried activity."""
    runs = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        runs.insert(0, history.events)
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            break
    for events in runs:
        continued = bool(events[0].workflow_execution_started_event_attributes.continued_execution_run_id)
        kinds = [e.event_type for e in events]
        for i, kind in enumerate(kinds):
            if kind in (
                EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
                EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
            ):
                if continued and EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED not in kinds[:i]:
                    return "continue-as-new: the new run's first task"
                after = kinds[i:]
                if kinds[-1] == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW and (
                    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in after
                ):
                    return "continue-as-new: the task that ends the turn"
                return "continue-as-new session: a task mid-turn"
            if (
                kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                and events[i].activity_task_started_event_attributes.attempt > 1
            ):
                return "continue-as-new session: an activity (retried)"
    return "continue-as-new session: no task lost in history (idle, or an update's speculative task)"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}"
    )
    args = parser.parse_args()
    started = time.monotonic()
    scenarios = tuple(s.strip() for s in args.scenarios.split(",") if s.strip())
    report = asyncio.run(run_chaos(args.iterations, args.seed, args.sessions, args.steps, scenarios))
    print(json.dumps({k: v for k, v in report.__dict__.items() if k != "problems"}, default=dict))
    for problem in report.problems:
        print("problem:", problem)
    print(
        f"{report.completed}/{report.sessions} sessions complete over {report.iterations} iterations "
        f"(scenarios: {dict(report.scenarios)}; faults: {dict(report.faults)}), {report.lost} lost, "
        f"{report.duplicated} duplicated, {report.over_guarantee} side effects outside the guarantee "
        f"({report.local_side_effects} side-effect calls as local activities; {report.reran_repeat_safe} "
        "repeat-safe "
        f"calls ran again after a kill, as allowed); "
        f"{time.monotonic() - started:.0f}s"
    )
    if report.landed:
        print(f"worker kills landed: {dict(report.landed)}")
    sys.stdout.flush()
    os._exit(0 if report.ok() else 1)  # skip interpreter finalization (see agentwolf.cli._run)


if __name__ == "__main__":
    main()
