"""Per-round cost of a tool-using agent turn: AgentWolf vs pydantic-ai's Temporal durable execution.

One Temporal dev server, one process. Both runtimes drive the same pydantic-ai `FunctionModel`
against the same MCP stdio server (tests/support/tools_server.py). A round is one model request
plus one `add` tool call; the model keeps calling `add` (distinct args each round, ~500 chars of
text alongside) until the turn has N tool results, then answers "done".

  (A) AgentWolf: `create_worker` + `WolfClient.submit` / `result`.
  (B) pydantic-ai: `Agent(..., capabilities=[TemporalDurability()])` with an `MCPToolset` over a
      FastMCP `StdioTransport`, run from a workflow on a worker whose client has `PydanticAIPlugin`.
Each worker runs in a process of its own (bench/workers.py; this process only drives clients), so
AgentWolf's worker imports what a real one does and not fastmcp, whose beartype import hook would
make Temporal's sandbox re-import beartype for every session run.

For each: one untimed warm-up turn (process spawn, MCP connect, sandbox load), then three timed
N-round turns; prints the median ms per round, MCP server processes spawned (PIDs the server
writes to $WOLF_PID_FILE), and workflow history bytes of the N-round turn (sum of protobuf
`HistoryEvent.ByteSize()` over every run of the workflow, following continue-as-new).

Run:  python bench/tool_round.py [--steps 50] [--default-dispatch] [--trace]
(`--default-dispatch` keeps the dev server's default transfer-queue throttle, i.e. without
AgentWolf's `dynamic_config_args()`.) Needs the `bench` dependency group (pydantic-ai-slim[mcp]
and fastmcp-slim, whose `fastmcp` module is FastMCP's client).

`--trace` measures tracing's cost instead of pydantic-ai: AgentWolf untraced and traced (its client
here and its worker export OTLP/HTTP to a receiver in this process that decodes every request), on
two workers at once with their timed turns alternating, and prints the per-round ratio of the
medians (goal <= 1.10) and the spans received. Needs the `otel` extra.

`--capabilities` measures pydantic-ai capabilities' cost the same way: an agent without any, and one
with an empty capability and a do-nothing model-request and tool hook (bench/workers.py), their timed
turns alternating; prints the per-round ratio of the medians (goal <= 1.05, issue 43).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

from temporalio import workflow

# The workflow sandbox re-runs this module for every pydantic-ai workflow: share the host's copies
# of these modules instead of re-importing them there.
with workflow.unsafe.imports_passed_through():
    if str(Path(__file__).parent) not in sys.path:  # bench/workers.py (the sandbox re-runs this module)
        sys.path.insert(0, str(Path(__file__).parent))
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin, PydanticAIWorkflow, TemporalDurability
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.usage import UsageLimits
    from temporalio.client import Client
    from temporalio.testing import WorkflowEnvironment
    from workers import MODEL, TOOLS_SERVER, WorkerProcess, prompt_for

    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.config.manifest import Manifest
    from agentwolf.ops.devserver import dynamic_config_args, temporal_binary
    from agentwolf.payloads import data_converter
    from agentwolf.telemetry import tracing
    from agentwolf.workflows.types import SEARCH_ATTRIBUTES, workflow_id

WARMUP_STEPS, REPEATS = 2, 3
TRACE_REPEATS = 7  # alternating pairs: the ratio of two medians needs more than three

# (B) pydantic-ai: a module-level agent, as its Temporal integration requires. The sandbox re-runs
# this module, so nothing here may touch the filesystem: the PID file env is set by the worker
# process (bench/workers.py).
PAI_TRANSPORT = StdioTransport(sys.executable, [TOOLS_SERVER])  # keep_alive=True: one process
PAI_AGENT = Agent(
    MODEL, name="bench", toolsets=[MCPToolset(PAI_TRANSPORT, id="tools")], capabilities=[TemporalDurability()]
)


@workflow.defn
class PaiTurn(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (PAI_AGENT,)

    @workflow.run
    async def run(self, prompt: str, steps: int) -> str:
        result = await PAI_AGENT.run(prompt, usage_limits=UsageLimits(request_limit=steps + 5))
        return result.output


async def history_bytes(client: Client, wid: str) -> tuple[int, int]:
    """(protobuf bytes, runs) of a workflow's history, walking back through continue-as-new."""
    total, runs, run_id = 0, 0, None
    while True:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        total, runs = total + sum(e.ByteSize() for e in history.events), runs + 1
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            return total, runs


class Measure:
    """Timed turns of one runtime, the last turn's history (bytes, runs), and MCP processes spawned."""

    def __init__(self, steps: int, pid_file: Path) -> None:
        self.steps = steps
        self.pid_file = pid_file
        self.seconds: list[float] = []
        self.history = (0, 0)

    async def time(self, turn: Callable[[int], Awaitable[str]]) -> str:
        start = time.perf_counter()
        wid = await turn(self.steps)
        self.seconds.append(time.perf_counter() - start)
        return wid

    @property
    def turn_seconds(self) -> float:
        return statistics.median(self.seconds)

    @property
    def processes(self) -> int:
        return len(self.pid_file.read_text().split()) if self.pid_file.exists() else 0


@asynccontextmanager
async def agentwolf_turns(
    client: Client,
    measure: Measure,
    log: Path,
    worker_env: dict[str, str] | None = None,
    capabilities: tuple[str, ...] = (),
) -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """A worker process of its own and, while it runs, a function running one N-round turn (its
    workflow id); one untimed warm-up turn first. With `capabilities`, the manifest also has agent
    `h`, agent `a` with them (`turn(steps, "h")`)."""
    # One manifest for warm-up and timed turns: hosts (and their MCP pools) are keyed by its identity.
    server = {
        "command": sys.executable,
        "args": [TOOLS_SERVER],
        "env": {"WOLF_PID_FILE": str(measure.pid_file)},
    }
    agent = {
        "model": "local:m",
        "capabilities": [{"mcp": "tools"}],
        "limits": {"max_steps": measure.steps + 5},
    }
    agents = {"a": agent}
    if capabilities:
        agents["h"] = {**agent, "capabilities": [{"mcp": "tools"}, *capabilities]}
    manifest = Manifest.model_validate({"host": {"mcp_servers": {"tools": server}}, "agents": agents})

    queue = f"bench-wolf-{uuid.uuid4().hex[:6]}"
    worker = await WorkerProcess("wolf", client, queue, log, worker_env).ready()
    try:
        wolf = WolfClient(client, task_queue=queue)

        async def turn(steps: int, agent: str = "a") -> str:
            sid = await wolf.submit(prompt_for(steps), agent, manifest)
            result = await wolf.result(sid)
            assert result.output == "done" and result.counters.usage.tool_calls == steps, result
            return workflow_id(wolf.tenant, sid)

        for name in agents:
            await turn(WARMUP_STEPS, name)
        yield turn
    finally:
        worker.stop()


async def run_agentwolf(client: Client, measure: Measure, log: Path) -> None:
    async with agentwolf_turns(client, measure, log) as turn:
        for _ in range(REPEATS):
            wid = await measure.time(turn)
        measure.history = await history_bytes(client, wid)


async def run_pydantic_ai(client: Client, measure: Measure, log: Path) -> None:
    worker = await WorkerProcess(
        "pai", client, "bench-pai", log, {"WOLF_PID_FILE": str(measure.pid_file)}
    ).ready()
    target, namespace = client.service_client.config.target_host, client.namespace
    client = await Client.connect(target, namespace=namespace, plugins=[PydanticAIPlugin()])
    try:

        async def turn(steps: int) -> str:
            wid = f"bench-pai-{uuid.uuid4().hex[:8]}"
            args = [prompt_for(steps), steps]
            output = await client.execute_workflow(PaiTurn.run, args=args, id=wid, task_queue="bench-pai")
            assert output == "done", output
            return wid

        await turn(WARMUP_STEPS)
        for _ in range(REPEATS):
            wid = await measure.time(turn)
        measure.history = await history_bytes(client, wid)
    finally:
        worker.stop()


async def run_traced(client: Client, plain: Measure, traced: Measure, log: Path) -> int:
    """AgentWolf untraced and traced (its client and worker export OTLP/HTTP to a receiver in this
    process), each on a worker of its own, their timed turns alternating so the machine's drift
    reaches both alike; returns the spans received."""
    sys.path.insert(0, str(Path(__file__).parent.parent))  # the tests' receiver, from this checkout
    from tests.support.otlp_receiver import OtlpReceiver

    receiver = OtlpReceiver()
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "bench"}
    try:
        async with agentwolf_turns(client, plain, log) as plain_turn:
            os.environ.update(otel)  # this process's tracer provider, and the traced worker's environment
            target, namespace = client.service_client.config.target_host, client.namespace
            traced_client = await Client.connect(
                target,
                namespace=namespace,
                data_converter=data_converter(),
                interceptors=tracing.interceptors(),
            )
            async with agentwolf_turns(traced_client, traced, log, otel) as traced_turn:
                for _ in range(TRACE_REPEATS):
                    await plain.time(plain_turn)
                    await traced.time(traced_turn)
        tracing.flush()
        return len(receiver.spans)
    finally:
        receiver.close()


async def run_capabilities(client: Client, plain: Measure, hooked: Measure, log: Path) -> None:
    """AgentWolf without capabilities and with an empty one and do-nothing hooks: two agents on one
    worker, their timed turns alternating, each going first in every other pair."""
    async with agentwolf_turns(client, plain, log, capabilities=("Empty", "NoOpHooks")) as turn:
        for i in range(TRACE_REPEATS):
            pair = [(plain, "a"), (hooked, "h")]
            for measure, agent in pair if i % 2 == 0 else pair[::-1]:
                await measure.time(partial(turn, agent=agent))


def report_capabilities(plain: Measure, hooked: Measure) -> None:
    print(f"tool rounds, {plain.steps} per turn; median of {TRACE_REPEATS} alternating timed turns each")
    for name, m in (("none", plain), ("hooked", hooked)):  # one worker, two agents
        print(f"{name:<7} {m.turn_seconds * 1000 / m.steps:>7.1f} ms/round")
    ratio = hooked.turn_seconds / plain.turn_seconds
    print(f"capability overhead per round (empty + no-op hooks / none): {ratio:.3f}  goal <= 1.05")


def report_trace(plain: Measure, traced: Measure, spans: int) -> None:
    print(f"tool rounds, {plain.steps} per turn; median of {TRACE_REPEATS} alternating timed turns each")
    for name, m in (("untraced", plain), ("traced", traced)):
        print(f"{name:<9} {m.turn_seconds * 1000 / m.steps:>7.1f} ms/round")
    per_turn = spans / (TRACE_REPEATS + 1)
    print(f"spans received: {spans} (~{per_turn:.0f} per turn)")
    ratio = traced.turn_seconds / plain.turn_seconds
    print(f"tracing overhead per round (traced / untraced): {ratio:.2f}  goal <= 1.10")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="rounds (model request + tool call) per turn")
    parser.add_argument(
        "--default-dispatch", action="store_true", help="don't pass AgentWolf's dynamic config"
    )
    parser.add_argument("--trace", action="store_true", help="AgentWolf traced vs untraced, not pydantic-ai")
    parser.add_argument(
        "--capabilities", action="store_true", help="AgentWolf with do-nothing capabilities vs none"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        wolf = Measure(args.steps, Path(tmp) / "agentwolf.pids")
        pai = Measure(args.steps, Path(tmp) / "pydantic-ai.pids")
        traced = Measure(args.steps, Path(tmp) / "traced.pids")
        os.environ["WOLF_PAYLOAD_STORE"] = str(Path(tmp) / "payloads")  # this process and the workers'
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=[] if args.default_dispatch else dynamic_config_args(),
        )
        try:
            if args.trace:
                spans = await run_traced(env.client, wolf, traced, Path(tmp) / "worker.log")
            elif args.capabilities:
                await run_capabilities(env.client, wolf, traced, Path(tmp) / "worker.log")
            else:
                await run_agentwolf(env.client, wolf, Path(tmp) / "worker.log")
                await run_pydantic_ai(env.client, pai, Path(tmp) / "worker.log")
        finally:
            await env.shutdown()
        if args.trace:
            report_trace(wolf, traced, spans)
            return
        if args.capabilities:
            report_capabilities(wolf, traced)
            return

        dispatch = "dev-server default" if args.default_dispatch else "agentwolf dynamic_config_args()"
        print(f"dispatch: {dispatch}; {args.steps} rounds per turn; median of {REPEATS} timed turns")
        print(f"{'runtime':<12} {'ms/round':>9} {'turn s':>7} {'MCP procs':>9} {'history B':>10} {'runs':>4}")
        for name, m in (("agentwolf", wolf), ("pydantic-ai", pai)):
            ms = m.turn_seconds * 1000 / m.steps
            print(
                f"{name:<12} {ms:>9.1f} {m.turn_seconds:>7.2f} {m.processes:>9} {m.history[0]:>10} "
                f"{m.history[1]:>4}"
            )
        print(
            f"ratio per round (agentwolf / pydantic-ai): {wolf.turn_seconds / pai.turn_seconds:.2f}  goal "
            "<= 0.35 (issue 31)"
        )
        print(f"history bytes ratio: {wolf.history[0] / pai.history[0]:.2f} goal <= 0.15")
        print(f"MCP processes: agentwolf={wolf.processes} pydantic-ai={pai.processes}")


if __name__ == "__main__":
    asyncio.run(main())
