"""Scale: idle sessions per worker process, and concurrent throughput against pydantic-ai's Temporal
durable execution.

The setup is bench/tool_round.py's: one Temporal dev server started by `WorkflowEnvironment.start_local`
with AgentWolf's raised dispatch throttle (`dynamic_config_args()`), the same pydantic-ai
`FunctionModel` script (a round is one model request plus one `add` call on the MCP stdio server
tests/support/tools_server.py, ~500 chars of text alongside), and its pydantic-ai baseline
(`Agent(..., capabilities=[TemporalDurability()])` with an `MCPToolset`, `PydanticAIPlugin` client).

Every worker runs in a process of its own (bench/workers.py); this process only drives clients.

(a) Idle sessions. One AgentWolf worker process (`create_worker` with the model registered as
    `local:m`, production data converter), so its RSS is its own. Five warm-up sessions (one turn,
    then closed) load what every worker loads once (the sandbox's modules, the host, its MCP
    connection); then the baseline RSS. Then, for each N in `--sizes` in turn, sessions are added
    until N are open: each starts without a prompt (one workflow task; `--setup-concurrency` at a
    time) and stays idle. Once no workflow task waits on the queue: the worker's RSS, and the latency
    (p50, p95) of `WolfClient.prompt` (a workflow update) to a random idle session, `--probes` times,
    one at a time, each probe's one-round turn finished before the next. The worker caches at most
    1,000 workflow runs (temporalio's default `max_cached_workflows`): above that, idle sessions are
    evicted and cost no memory, and a prompt to one of them replays its history first; `cached` says
    how many runs the worker holds. RSS readings follow a `gc.collect()` in the worker; `trimmed`
    is after the probes and glibc's `malloc_trim` (what the process holds, not what its allocator keeps).
(b) Throughput. For each C in `--concurrency`, C sessions (C workflows for pydantic-ai) start at
    once and each runs `--rounds` tool rounds; rounds/s = C x R / wall time from the first start to
    the last result. Both workers run throughout, on the same server; one runtime is measured at a
    time, alternating, `--repeats` times (median). AgentWolf is measured once per `--workers` count:
    that many worker processes share a task queue of their own (a fleet serving one namespace; each
    process keeps its own MCP pool). Printed as ratios: one AgentWolf worker / pydantic-ai, and two
    AgentWolf workers / one; beside each rate the CPU milliseconds per round spent by the runtime's
    worker processes (their MCP servers included) and by the dev server, which tell where a round's
    cost goes and vary less with the machine's load than rates do; and how many CPUs the whole
    machine kept busy meanwhile (other work included): at its CPU count, rounds/s measure the share
    of CPU the runtime got, and a second worker process can only split that share.

Targets (from the issue): RSS bounded by the cache from 1k to 10k idle sessions, prompt update p95
<= 50 ms; throughput >= 3x pydantic-ai with one worker, two workers >= 1.7x one.

Measured 2026-12-02 on 2 CPUs shared with other work (docs/features/versions.md): 10,000 idle
sessions 333 MB, prompt p50 24 / p95 39 ms (load 4.8); throughput x1/pai 1.70 at CPU per round
13.1 + 11.4 ms against 21.6 + 19.6 ms (load 9-15); x2/x1 0.73-1.42 across runs at load 5-15,
the machine's 2 CPUs busy throughout.

Run:  python bench/scale.py [--sizes 1000,5000,10000] [--concurrency 20,50] [--rounds 20] [--probes 40]
      [--workers 1,2] [--parts idle,throughput]
Smaller: python bench/scale.py --sizes 200,1000 --concurrency 20 --rounds 10
Needs `pydantic-ai-slim[mcp]` (pip install --group bench).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent), str(BENCH)]  # agentwolf from this checkout; tool_round beside us

import tool_round
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from workers import TOOLS_SERVER, WorkerProcess, prompt_for

from agentwolf.client.wolf_client import WolfClient
from agentwolf.config.manifest import Manifest
from agentwolf.ops.devserver import dynamic_config_args, temporal_binary
from agentwolf.payloads import data_converter
from agentwolf.workflows.types import SEARCH_ATTRIBUTES, workflow_id

WARMUP_SESSIONS = 5
IDLE_GROWTH_TARGET, IDLE_P95_TARGET_MS = 1.2, 50
"""Worker RSS at the largest N over the smallest (the cache bounds it), and prompt update p95."""
THROUGHPUT_TARGET = 3.0
"""One AgentWolf worker over pydantic-ai, rounds per second (the issue's goal)."""
SCALE_OUT_TARGET = 1.7
"""Two AgentWolf worker processes over one, rounds per second (the issue's goal)."""


def manifest(rounds: int) -> Manifest:
    """tool_round.py's manifest: agent `a` on the worker's `local:m` with the MCP test tools."""
    server = {"command": sys.executable, "args": [TOOLS_SERVER]}
    agent = {"model": "local:m", "capabilities": [{"mcp": "tools"}], "limits": {"max_steps": rounds + 5}}
    return Manifest.model_validate({"host": {"mcp_servers": {"tools": server}}, "agents": {"a": agent}})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- (a) idle sessions ---------------------------------------------------------------------------


async def _idle(wolf: WolfClient, sid: str, turns: int, interval: float) -> None:
    """Wait until the session has finished `turns` turns and is idle."""
    deadline = time.monotonic() + 600
    while True:
        try:
            status = await wolf.status(sid)
        except RPCError:  # a query times out while the worker is saturated: ask again
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(interval)
            continue
        if status.counters.turns >= turns and status.state == "idle":
            if status.last_outcome != "completed":
                raise RuntimeError(f"{sid}: turn {turns} ended {status.last_outcome}")
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sid}: turn {turns} did not finish ({status.state})")
        await asyncio.sleep(interval)


async def _start_idle(wolf: WolfClient, spec: Manifest, count: int, concurrency: int) -> list[str]:
    """Start `count` sessions without a first prompt (one workflow task each), `concurrency` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> str:
        async with gate:
            return await wolf.start_session("a", spec)

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def _started(client: Client, wolf: WolfClient, sid: str) -> None:
    """Wait until the session's first workflow task completed (its history has more than two events)."""
    handle = client.get_workflow_handle(workflow_id(wolf.tenant, sid))
    deadline = time.monotonic() + 600
    while (await handle.describe()).raw_description.workflow_execution_info.history_length <= 2:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sid}: its first workflow task did not run in 600 s")
        await asyncio.sleep(0.25)


async def idle_sessions(
    client: Client, sizes: list[int], probes: int, work: Path, rng: random.Random, setup_concurrency: int
) -> list[dict[str, float]]:
    """One worker process; sessions added up to each size in turn, then its RSS and the prompt latency."""
    task_queue = f"scale-idle-{uuid.uuid4().hex[:6]}"
    wolf = WolfClient(client, task_queue=task_queue)
    spec = manifest(rounds=1)
    worker = WorkerProcess("wolf", client, task_queue, work / "worker.log")
    rows: list[dict[str, float]] = []
    try:
        await worker.ready()
        for _ in range(WARMUP_SESSIONS):
            sid = await wolf.start_session("a", spec, prompt=prompt_for(1))
            await _idle(wolf, sid, 1, 0.05)
            await wolf.close(sid)
            await wolf.result(sid)
        await asyncio.sleep(1)
        base = await worker.stats()
        sids: list[str] = []
        turns: dict[str, int] = {}
        for n in sorted(sizes):
            started = time.monotonic()
            added = await _start_idle(wolf, spec, n - len(sids), setup_concurrency)
            sids += added
            # The first workflow tasks ran (the last sessions started, and a sample of the others):
            # read from the server, since a query to a session whose first task waits queues there.
            sample = added[-20:] + rng.sample(added, min(30, len(added)))
            await asyncio.gather(*(_started(client, wolf, sid) for sid in sample))
            setup = time.monotonic() - started
            await asyncio.sleep(2)
            held = await worker.stats()
            latencies = []
            for _ in range(probes):
                sid = rng.choice(sids)
                turns[sid] = turns.get(sid, 0) + 1
                t0 = time.perf_counter()
                await wolf.prompt(sid, prompt_for(1))
                latencies.append((time.perf_counter() - t0) * 1000)
                await _idle(wolf, sid, turns[sid], 0.02)
            after = await worker.stats(trim=True)
            rows.append(
                {
                    "n": n,
                    "base_mb": base["rss_kb"] / 1024,
                    "rss_mb": held["rss_kb"] / 1024,
                    "cached": held["cached"],
                    "after_probes_mb": after["rss_kb"] / 1024,
                    "trimmed_mb": after["trimmed_kb"] / 1024,
                    "p50": statistics.median(latencies),
                    "p95": percentile(latencies, 0.95),
                    "setup_s": setup,
                    "load": os.getloadavg()[0],
                }
            )
            print(f"  idle N={n}: {rows[-1]}", file=sys.stderr)
    finally:
        worker.stop()
    return rows


# -- (b) throughput --------------------------------------------------------------------------------


@dataclass
class Rate:
    """One batch: rounds per second, and CPU milliseconds per round spent by the runtime's worker
    processes (their MCP servers included) and by the Temporal dev server."""

    rps: float
    worker_ms: float
    server_ms: float
    busy_cores: float = 0.0
    """CPUs the whole machine kept busy during the batch (every process, other work included)."""


def machine_busy_seconds() -> float:
    """CPU seconds the machine has spent on anything but idling, summed over its CPUs (Linux counts
    guests' time inside user and nice too: not twice)."""
    times = psutil.cpu_times()
    skip = ("idle", "iowait", "guest", "guest_nice")
    return sum(times) - sum(getattr(times, name, 0.0) for name in skip)


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """User + system CPU seconds of these processes and their descendants."""
    total = 0.0
    for proc in procs:
        for one in [proc, *proc.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                times = one.cpu_times()
                total += times.user + times.system
    return total


class Runtime:
    name = ""
    stalled = False
    """A batch did not finish in time: this runtime is not measured again (its sessions still run)."""
    workers: list[psutil.Process] = []
    server: list[psutil.Process] = []

    async def batch(self, c: int, rounds: int, timeout: float) -> Rate:
        """Run `c` sessions of `rounds` rounds at once (rounds per second 0 when they stalled)."""
        worker_cpu, server_cpu = cpu_seconds(self.workers), cpu_seconds(self.server)
        machine = machine_busy_seconds()
        started = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.gather(*(self.session(rounds) for _ in range(c))), timeout)
        except TimeoutError:
            self.stalled = True
            print(f"  C={c} {self.name}: not finished after {timeout:.0f}s: stalled", file=sys.stderr)
            return Rate(0.0, 0.0, 0.0)
        elapsed, total = time.perf_counter() - started, c * rounds
        return Rate(
            total / elapsed,
            (cpu_seconds(self.workers) - worker_cpu) * 1000 / total,
            (cpu_seconds(self.server) - server_cpu) * 1000 / total,
            (machine_busy_seconds() - machine) / elapsed,
        )

    async def session(self, rounds: int) -> None:
        raise NotImplementedError


class AgentWolf(Runtime):
    def __init__(self, client: Client, rounds: int, workers: int = 1) -> None:
        self.name = f"agentwolf x{workers}"
        self.queue = f"scale-wolf-{workers}"
        self.wolf = WolfClient(client, task_queue=self.queue)
        self.manifest = manifest(rounds)  # one manifest throughout: one host, one MCP process

    async def session(self, rounds: int) -> None:
        sid = await self.wolf.submit(prompt_for(rounds), "a", self.manifest)
        result = await self.wolf.result(sid)
        assert result.output == "done" and result.counters.usage.tool_calls == rounds, result


class PydanticAI(Runtime):
    name = "pydantic-ai"

    def __init__(self, client: Client) -> None:
        self.client = client

    async def session(self, rounds: int) -> None:
        wid = f"scale-pai-{uuid.uuid4().hex[:10]}"
        args = [prompt_for(rounds), rounds]
        output = await self.client.execute_workflow(
            tool_round.PaiTurn.run, args=args, id=wid, task_queue="scale-pai"
        )
        assert output == "done", output


async def throughput(
    client: Client,
    sizes: list[int],
    rounds: int,
    repeats: int,
    work: Path,
    timeout: float,
    worker_counts: list[int],
) -> dict[int, dict[str, Rate]]:
    """AgentWolf once per worker count (that many worker processes on a task queue of their own),
    and pydantic-ai with one."""
    address, namespace = client.service_client.config.target_host, client.namespace
    pai_client = await Client.connect(address, namespace=namespace, plugins=[tool_round.PydanticAIPlugin()])
    server = [p for p in psutil.Process().children() if "temporal" in p.name()]
    runtimes: list[Runtime] = [*(AgentWolf(client, rounds, n) for n in worker_counts), PydanticAI(pai_client)]
    workers: list[WorkerProcess] = []
    try:
        for runtime, n in zip(runtimes, [*worker_counts, 1], strict=True):
            kind, queue = ("wolf", runtime.queue) if isinstance(runtime, AgentWolf) else ("pai", "scale-pai")
            mine = [await WorkerProcess(kind, client, queue, work / "worker.log").ready() for _ in range(n)]
            workers += mine
            runtime.workers, runtime.server = [psutil.Process(w.proc.pid) for w in mine], server
        measured: dict[int, dict[str, list[Rate]]] = {c: {r.name: [] for r in runtimes} for c in sizes}
        for runtime in runtimes:  # warm-up: process spawns, MCP connects, sandbox loads
            await runtime.batch(2, tool_round.WARMUP_STEPS, timeout)
        for rep in range(repeats):
            for c in sizes:
                for runtime in runtimes if rep % 2 == 0 else runtimes[::-1]:
                    if runtime.stalled:
                        continue
                    rate = await runtime.batch(c, rounds, timeout)
                    measured[c][runtime.name].append(rate)
                    print(
                        f"  C={c} {runtime.name}: {rate.rps:.1f} rounds/s, CPU per round: worker "
                        f"{rate.worker_ms:.1f} ms, server {rate.server_ms:.1f} ms; machine busy "
                        f"{rate.busy_cores:.2f} of {psutil.cpu_count()} CPUs (load {os.getloadavg()[0]:.1f})",
                        file=sys.stderr,
                    )
    finally:
        for worker in workers:
            worker.stop()
    return {c: {name: _median(v) for name, v in by.items()} for c, by in measured.items()}


def _median(rates: list[Rate]) -> Rate:
    """The batch of median rounds per second (its CPU figures with it)."""
    if not rates:
        return Rate(0.0, 0.0, 0.0)
    return sorted(rates, key=lambda r: r.rps)[(len(rates) - 1) // 2]


# -- main ----------------------------------------------------------------------------------------


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,5000,10000", help="idle sessions open at each reading")
    parser.add_argument("--probes", type=int, default=40, help="prompt updates timed per size")
    parser.add_argument("--setup-concurrency", type=int, default=50, help="idle sessions starting at once")
    parser.add_argument("--concurrency", default="20,50", help="concurrent sessions, comma-separated")
    parser.add_argument("--rounds", type=int, default=20, help="tool rounds per session in (b)")
    parser.add_argument("--repeats", type=int, default=2, help="measurements per runtime and C in (b)")
    parser.add_argument(
        "--batch-timeout",
        type=float,
        default=600,
        help="seconds a batch of (b) may take before it counts as stalled",
    )
    parser.add_argument(
        "--workers", default="1,2", help="AgentWolf worker processes in (b), comma-separated counts"
    )
    parser.add_argument("--parts", default="idle,throughput", help="idle, throughput or both")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",")}
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    concurrency = [int(c) for c in args.concurrency.split(",") if c.strip()]
    rng = random.Random(args.seed)

    with tempfile.TemporaryDirectory(prefix="wolf-scale-") as tmp:
        work = Path(tmp)
        os.environ["WOLF_PAYLOAD_STORE"] = str(work / "payloads")  # this process and the worker's
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=dynamic_config_args(),
        )
        idle, rates = [], {}
        try:
            if "idle" in parts:
                idle = await idle_sessions(env.client, sizes, args.probes, work, rng, args.setup_concurrency)
            if "throughput" in parts:
                counts = [int(n) for n in args.workers.split(",") if n.strip()]
                rates = await throughput(
                    env.client, concurrency, args.rounds, args.repeats, work, args.batch_timeout, counts
                )
        except BaseException:
            log = work / "worker.log"
            tail = log.read_text(errors="replace")[-6000:] if log.exists() else "(none)"
            print(f"the workers' log ended with:\n{tail}", file=sys.stderr)
            raise
        finally:
            await env.shutdown()

    if idle:
        print(
            f"(a) idle sessions on one worker process (sessions added up to each N); {args.probes} prompt "
            "updates to random idle sessions"
        )
        print(
            f"{'N':>6} {'base MB':>8} {'RSS MB':>7} {'cached':>6} {'probed MB':>9} {'trimmed MB':>10} "
            f"{'p50 ms':>7} {'p95 ms':>7} {'setup s':>7} {'load':>5}"
        )
        for r in idle:
            print(
                f"{r['n']:>6} {r['base_mb']:>8.0f} {r['rss_mb']:>7.0f} {r['cached']:>6} "
                f"{r['after_probes_mb']:>9.0f} {r['trimmed_mb']:>10.0f} {r['p50']:>7.1f} {r['p95']:>7.1f} "
                f"{r['setup_s']:>7.0f} {r['load']:>5.1f}"
            )
        first, last = idle[0], idle[-1]
        print(
            f"RSS from N={first['n']} to N={last['n']}: {first['rss_mb']:.0f} -> {last['rss_mb']:.0f} MB "
            f"({last['rss_mb'] / first['rss_mb']:.2f}x; the cache holds {last['cached']} runs)  goal: "
            f"bounded by the cache, <= {IDLE_GROWTH_TARGET}x"
        )
        worst = max(r["p95"] for r in idle)
        print(f"prompt update p95: at most {worst:.1f} ms  goal <= {IDLE_P95_TARGET_MS} ms")
    if rates:
        print(
            f"(b) concurrent sessions of {args.rounds} tool rounds; median of {args.repeats} per runtime; "
            "CPU ms per round of the runtime's workers (MCP servers included) and of the dev server"
        )
        print(f"{'C':>4} {'runtime':>14} {'rounds/s':>9} {'worker ms':>9} {'server ms':>9} {'busy CPUs':>9}")
        none = Rate(0.0, 0.0, 0.0)
        for c, by in rates.items():
            for name, rate in by.items():
                print(
                    f"{c:>4} {name:>14} {rate.rps:>9.1f} {rate.worker_ms:>9.1f} {rate.server_ms:>9.1f} "
                    f"{rate.busy_cores:>9.2f}"
                )
            one, two = by.get("agentwolf x1", none).rps, by.get("agentwolf x2", none).rps
            pai = by["pydantic-ai"].rps
            print(
                f"{c:>4} ratios: x1/pai {one / pai if pai else float('nan'):.2f}  "
                f"goal >= {THROUGHPUT_TARGET}; "
                f"x2/x1 {two / one if one else float('nan'):.2f}  goal >= {SCALE_OUT_TARGET}"
            )
        if any(not rate.rps for by in rates.values() for rate in by.values()):
            print("0.0 rounds/s: stalled (see --batch-timeout); medians are of the batches that ran")


if __name__ == "__main__":
    asyncio.run(main())
