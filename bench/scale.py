"""Scale: idle sessions per worker process, and concurrent throughput against pydantic-ai's Temporal
durable execution.

The setup is bench/tool_round.py's: one Temporal dev server started by `WorkflowEnvironment.start_local`
with AgentWolf's raised dispatch throttle (`dynamic_config_args()`), the same pydantic-ai
`FunctionModel` script (a round is one model request plus one `add` call on the MCP stdio server
tests/support/tools_server.py, ~500 chars of text alongside), and its pydantic-ai baseline
(`Agent(..., capabilities=[TemporalDurability()])` with an `MCPToolset`, `PydanticAIPlugin` client).

Every worker runs in a process of its own (bench/workers.py); this process only drives clients.

(a) Idle sessions. For each N in `--sizes`, a fresh AgentWolf worker process (`create_worker` with
    the model registered as `local:m`, production data converter), so its RSS is its own. Five
    warm-up sessions (one turn, then closed) load what every worker loads once (the
    sandbox's modules, the host, its MCP connection); then the baseline RSS; then N interactive
    sessions, each with one short turn (one tool round; `--setup-concurrency` at a time), left idle;
    then the RSS again. Printed: RSS
    over the baseline divided by N, and the latency (p50, p95) of `WolfClient.prompt` (a workflow
    update) to a random idle session, `--probes` times, one at a time, each probe's turn finished
    before the next. The worker caches at most 1,000 workflow runs (temporalio's default
    `max_cached_workflows`): above that, idle sessions are evicted, cost no memory, and a prompt to
    one of them replays its history first; the `cached` column says how many the worker holds.
    Both RSS readings follow a `gc.collect()` in the worker.
(b) Throughput. For each C in `--concurrency`, C sessions (C workflows for pydantic-ai) start at
    once and each runs `--rounds` tool rounds; rounds/s = C x R / wall time from the first start to
    the last result. Both workers run throughout, on the same server; one runtime is measured at a
    time, alternating, `--repeats` times (median). AgentWolf is measured once per `--workers` count:
    that many worker processes share a task queue of their own (a fleet serving one namespace; each
    process keeps its own MCP pool). Printed as ratios: one AgentWolf worker / pydantic-ai, and two
    AgentWolf workers / one.

Targets (from the issue): idle sessions <= 150 KB each; throughput >= 1.7x pydantic-ai.

Run:  python bench/scale.py [--sizes 100,500,1500] [--concurrency 20,50] [--rounds 20] [--probes 40]
      [--workers 1,2] [--parts idle,throughput]
Smaller: python bench/scale.py --sizes 100,500 --concurrency 20 --rounds 10
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
from pathlib import Path

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
IDLE_TARGET_KB, THROUGHPUT_TARGET = 150, 1.7
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


async def idle_sessions(
    client: Client, n: int, probes: int, work: Path, rng: random.Random, setup_concurrency: int
) -> dict[str, float]:
    task_queue = f"scale-idle-{n}-{uuid.uuid4().hex[:6]}"
    wolf = WolfClient(client, task_queue=task_queue)
    spec = manifest(rounds=1)
    worker = WorkerProcess("wolf", client, task_queue, work / "worker.log")
    sids: list[str] = []
    try:
        await worker.ready()
        for _ in range(WARMUP_SESSIONS):
            sid = await wolf.start_session("a", spec, prompt=prompt_for(1))
            await _idle(wolf, sid, 1, 0.05)
            await wolf.close(sid)
            await wolf.result(sid)
        await asyncio.sleep(1)
        base = await worker.stats()

        started = time.monotonic()
        gate = asyncio.Semaphore(setup_concurrency)

        async def one() -> str:
            async with gate:
                sid = await wolf.start_session("a", spec, prompt=prompt_for(1))
                await _idle(wolf, sid, 1, 0.25)
                return sid

        sids = list(await asyncio.gather(*(one() for _ in range(n))))
        setup = time.monotonic() - started
        await asyncio.sleep(2)
        held = await worker.stats()

        latencies, turns = [], dict.fromkeys(sids, 1)
        for _ in range(probes):
            sid = rng.choice(sids)
            t0 = time.perf_counter()
            await wolf.prompt(sid, "and again?")
            latencies.append((time.perf_counter() - t0) * 1000)
            turns[sid] += 1
            await _idle(wolf, sid, turns[sid], 0.02)
        after = await worker.stats()
    finally:
        worker.stop()
        await _terminate(client, wolf, sids)
    return {
        "n": n,
        "base_mb": base["rss_kb"] / 1024,
        "rss_mb": held["rss_kb"] / 1024,
        "kb_each": (held["rss_kb"] - base["rss_kb"]) / n,
        "cached": held["cached"],
        "after_probes_mb": after["rss_kb"] / 1024,
        "p50": statistics.median(latencies),
        "p95": percentile(latencies, 0.95),
        "setup_s": setup,
    }


async def _terminate(client: Client, wolf: WolfClient, sids: list[str]) -> None:
    """End what (a) left running (the worker is gone): the next size starts from a quiet server."""
    gate = asyncio.Semaphore(50)

    async def end(sid: str) -> None:
        async with gate:
            with contextlib.suppress(RPCError):
                await client.get_workflow_handle(workflow_id(wolf.tenant, sid)).terminate("bench done")

    await asyncio.gather(*(end(s) for s in sids))


# -- (b) throughput --------------------------------------------------------------------------------


class Runtime:
    name = ""
    stalled = False
    """A batch did not finish in time: this runtime is not measured again (its sessions still run)."""

    async def batch(self, c: int, rounds: int, timeout: float) -> float:
        """Run `c` sessions of `rounds` rounds at once; rounds per second (0 when they stalled)."""
        started = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.gather(*(self.session(rounds) for _ in range(c))), timeout)
        except TimeoutError:
            self.stalled = True
            print(f"  C={c} {self.name}: not finished after {timeout:.0f}s: stalled", file=sys.stderr)
            return 0.0
        return c * rounds / (time.perf_counter() - started)

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
) -> dict[int, dict[str, float]]:
    """AgentWolf once per worker count (that many worker processes on a task queue of their own),
    and pydantic-ai with one."""
    address, namespace = client.service_client.config.target_host, client.namespace
    pai_client = await Client.connect(address, namespace=namespace, plugins=[tool_round.PydanticAIPlugin()])
    wolves = [AgentWolf(client, rounds, n) for n in worker_counts]
    workers = [
        await WorkerProcess("wolf", client, wolf.queue, work / "worker.log").ready()
        for wolf, n in zip(wolves, worker_counts, strict=True)
        for _ in range(n)
    ]
    workers.append(await WorkerProcess("pai", client, "scale-pai", work / "worker.log").ready())
    runtimes: list[Runtime] = [*wolves, PydanticAI(pai_client)]
    measured: dict[int, dict[str, list[float]]] = {c: {r.name: [] for r in runtimes} for c in sizes}
    try:
        for runtime in runtimes:  # warm-up: process spawns, MCP connects, sandbox loads
            await runtime.batch(2, tool_round.WARMUP_STEPS, timeout)
        for rep in range(repeats):
            for c in sizes:
                for runtime in runtimes if rep % 2 == 0 else runtimes[::-1]:
                    if runtime.stalled:
                        continue
                    rps = await runtime.batch(c, rounds, timeout)
                    measured[c][runtime.name].append(rps)
                    print(f"  C={c} {runtime.name}: {rps:.1f} rounds/s", file=sys.stderr)
    finally:
        for worker in workers:
            worker.stop()
    return {
        c: {name: statistics.median(v) if v else 0.0 for name, v in by.items()} for c, by in measured.items()
    }


# -- main ----------------------------------------------------------------------------------------


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="100,500,1500", help="idle sessions per worker, comma-separated")
    parser.add_argument("--probes", type=int, default=40, help="prompt updates timed per size")
    parser.add_argument(
        "--setup-concurrency", type=int, default=5, help="idle sessions starting their first turn at once"
    )
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
                for n in sizes:
                    idle.append(
                        await idle_sessions(env.client, n, args.probes, work, rng, args.setup_concurrency)
                    )
                    print(f"  idle N={n}: {idle[-1]}", file=sys.stderr)
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
            f"(a) idle sessions on one worker process; {args.probes} prompt updates to random idle sessions"
        )
        print(
            f"{'N':>5} {'base MB':>8} {'RSS MB':>7} {'KB/session':>10} {'cached':>6} "
            f"{'p50 ms':>7} {'p95 ms':>7} {'setup s':>7}"
        )
        for r in idle:
            print(
                f"{r['n']:>5} {r['base_mb']:>8.0f} {r['rss_mb']:>7.0f} {r['kb_each']:>10.1f} "
                f"{r['cached']:>6} "
                f"{r['p50']:>7.1f} {r['p95']:>7.1f} {r['setup_s']:>7.0f}"
            )
        worst = max(r["kb_each"] for r in idle)
        print(f"RSS per idle session: at most {worst:.0f} KB  goal <= {IDLE_TARGET_KB} KB")
    if rates:
        print(f"(b) concurrent sessions of {args.rounds} tool rounds; median of {args.repeats} per runtime")
        names = list(next(iter(rates.values())))
        print(
            f"{'C':>4} " + " ".join(f"{name + ' r/s':>17}" for name in names) + f" {'x1/pai':>7} {'x2/x1':>6}"
        )
        for c, by in rates.items():
            one, two, pai = by.get("agentwolf x1", 0.0), by.get("agentwolf x2", 0.0), by["pydantic-ai"]
            print(
                f"{c:>4} "
                + " ".join(f"{by[name]:>17.1f}" for name in names)
                + f" {one / pai if pai else float('nan'):>7.2f} {two / one if one else float('nan'):>6.2f}"
            )
        if any(not rate for by in rates.values() for rate in by.values()):
            print("0.0 rounds/s: stalled (see --batch-timeout); medians are of the batches that ran")
        worst_ratio = min(
            by.get("agentwolf x1", 0.0) / by["pydantic-ai"] if by["pydantic-ai"] else 0.0
            for by in rates.values()
        )
        print(
            f"throughput ratio (agentwolf x1 / pydantic-ai): at least {worst_ratio:.2f}  goal >= "
            f"{THROUGHPUT_TARGET}; two workers over one: goal >= {SCALE_OUT_TARGET}"
        )


if __name__ == "__main__":
    asyncio.run(main())
