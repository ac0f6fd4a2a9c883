"""A session that outlives its model's context window: 200 turns, each with an 8 KB tool result,
against the scripted OpenAI-compatible server (tests/support/openai_server.py) in window mode: a
32k-token window, requests past it refused 400 `context_length_exceeded`, as OpenAI does.

The model is one genai-prices does not know and the manifest names no window, so the session learns
it from the first refusal, then compacts before requests would overflow. Facts: turns 0-9 each state
one (`CODE-<i>-<hex>`), two of them are also pinned; the scripted summariser keeps every fact it reads.

Prints, as ratios where they have a goal (issue 25):
- turns completed, requests refused as too long (goal <= 1), compactions by tier;
- the largest request and the last one against the window (goal: under it);
- turn latency at turn 200 against turn 10 (medians of turns 6-15 and 191-200; goal <= 1.5), with
  what it follows on a machine other work shares: the worker's CPU time per turn, and the input
  items per request (provider clients build a request item by item);
- history bytes of each run against `continue_as_new_bytes`, and the continue-as-new input's bytes
  in history (the transcript goes to the payload store by reference past 256 KiB);
- the worker's RSS at turns 50, 100, 150 and 200 (goal: flat after 50), and its growth per turn
  beside the transcript's (bytes of JSON: what the session keeps whole by design); with `--trim`, also once
  glibc's `malloc_trim` returned the free heap at each of them (what the worker holds, not what its
  allocator keeps; the later plain figures are then after a trim too); with `--memory`, where it is
  (glibc's main heap, other anonymous mappings, files, pymalloc's arenas, threads; with
  WOLF_BENCH_TRACE=1 in the environment, the Python allocations that grew most since the first reading);
- requests after the fifth compaction that lack one of the ten facts (goal: 0).

Run:  python bench/longrun.py [--turns 200] [--window 32768] [--can-bytes 1000000] [--trim] [--memory]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))  # bench/workers.py
sys.path.insert(0, str(Path(__file__).parents[1]))  # agentwolf and tests.support from this checkout

from pydantic_ai.messages import ModelMessagesTypeAdapter  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from workers import TOOLS_SERVER, WorkerProcess  # noqa: E402

from agentwolf.client.wolf_client import WolfClient  # noqa: E402
from agentwolf.config.manifest import Manifest  # noqa: E402
from agentwolf.ops.devserver import dynamic_config_args, temporal_binary  # noqa: E402
from agentwolf.payloads import data_converter  # noqa: E402
from agentwolf.workflows.compaction import SUMMARY_INSTRUCTIONS  # noqa: E402
from agentwolf.workflows.types import SEARCH_ATTRIBUTES, Event, workflow_id  # noqa: E402
from tests.support.openai_server import Reply, ScriptedOpenAI  # noqa: E402

RESULT_CHARS = 8192
FACTS = [f"CODE-{i}-{uuid.uuid5(uuid.NAMESPACE_OID, str(i)).hex[:8]}" for i in range(10)]
FACT = re.compile(r"CODE-\d+-[0-9a-f]{8}")


def is_summary(request: dict[str, Any]) -> bool:
    return SUMMARY_INSTRUCTIONS[:40] in (request.get("instructions") or "")


ANSWERED: list[tuple[float, dict[str, Any]]] = []
"""Turn requests the server answered, with the time they arrived."""


def reply(request: dict[str, Any]) -> Reply:
    """A turn: one 8 KB tool result, then a short answer. A summary: every fact it was given."""
    if not is_summary(request):
        ANSWERED.append((time.time(), request))
    if is_summary(request):
        found = sorted(set(FACT.findall(json.dumps(request))))
        return Reply(text="The user stated these codes, to keep: " + ", ".join(found))
    if request["input"][-1].get("type") == "function_call_output":
        return Reply(text="Noted; the result is in.")
    return Reply(tool_calls=[("big", {"size": RESULT_CHARS})])


def manifest(base_url: str, can_bytes: int) -> Manifest:
    return Manifest.model_validate(
        {
            "host": {
                "models": {"providers": {"openai": {"api_key": "k", "base_url": base_url}}},
                "mcp_servers": {"tools": {"command": sys.executable, "args": [TOOLS_SERVER]}},
                "sessions": {"continue_as_new_bytes": can_bytes},
            },
            "agents": {
                "a": {
                    "model": "openai:longrun-model",
                    "instructions": "You are a long-running assistant. Keep every code the user gives you.",
                    "capabilities": [{"mcp": "tools"}],
                    "stream": False,
                }
            },
        }
    )


async def runs(client: Client, wid: str) -> list[tuple[int, int]]:
    """(history bytes, continue-as-new input bytes in history) of every run, oldest first."""
    out, run_id = [], None
    while True:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        out.append((sum(e.ByteSize() for e in history.events), started.input.ByteSize()))
        run_id = started.continued_execution_run_id
        if not run_id:
            return out[::-1]


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def session(
    client: Client, args: argparse.Namespace, server: ScriptedOpenAI, log: Path
) -> dict[str, Any]:
    queue = f"bench-longrun-{uuid.uuid4().hex[:6]}"
    worker = await WorkerProcess("wolf", client, queue, log).ready()
    wolf = WolfClient(client, task_queue=queue)
    seconds: list[float] = []
    cpu: list[float] = []  # the worker's CPU seconds per turn
    rss: dict[int, tuple[int, int]] = {}  # turn: RSS, RSS once malloc_trim returned the free heap
    cached: dict[int, int] = {}  # turn: workflow runs the worker holds
    memory: dict[int, dict[str, Any]] = {}  # turn: the worker's stats (with --memory, where its RSS is)
    transcript: dict[int, int] = {}  # turn: the session's transcript, bytes of JSON
    events: list[Event] = []  # all of them: each continue-as-new keeps only the last `events_kept`
    offset = 0
    try:
        sid = await wolf.start_session("a", manifest(server.base_url, args.can_bytes))
        for fact in FACTS[:2]:
            await wolf.pin(sid, f"Remember the code {fact}.")
        for turn in range(1, args.turns + 1):
            text = f"Turn {turn}." + (f" Remember the code {FACTS[turn - 1]}." if turn <= len(FACTS) else "")
            start, used = time.perf_counter(), cpu_seconds(worker.proc.pid)
            turn_id = await wolf.prompt(sid, text)
            async for position, event in wolf.events(sid, offset, live=False):  # as a client waits
                events.append(event)
                offset = position + 1
                if event.kind == "turn_finished" and event.turn_id == turn_id:
                    break
            seconds.append(time.perf_counter() - start)
            cpu.append(cpu_seconds(worker.proc.pid) - used)
            if turn % 50 == 0 or turn == args.turns:
                stats = await worker.stats(trim=args.trim, memory=args.memory)
                rss[turn] = stats["rss_kb"], stats.get("trimmed_kb", 0)
                cached[turn] = stats["cached"]
                memory[turn] = stats
                # After the reading: the query's own allocations (the worker serialises it) come later.
                transcript[turn] = len(ModelMessagesTypeAdapter.dump_json(await wolf.transcript(sid)))
        status = await wolf.status(sid)
        wid = workflow_id(wolf.tenant, sid)
        await wolf.close(sid)
        await wolf.result(sid)
        events.extend([e async for _, e in wolf.events(sid, offset, live=False)])  # ends with the session
        return {
            "seconds": seconds,
            "cpu": cpu,
            "rss": rss,
            "cached": cached,
            "memory": memory,
            "transcript": transcript,
            "status": status,
            "events": events,
            "runs": await runs(client, wid),
        }
    finally:
        worker.stop()


def report(args: argparse.Namespace, server: ScriptedOpenAI, measured: dict[str, Any], wall: float) -> None:
    seconds, events, status = measured["seconds"], measured["events"], measured["status"]
    finished = [e for e in events if e.kind == "turn_finished"]
    compacted = [e for e in events if e.kind == "context_compacted"]
    tiers = {tier: sum(e.tier == tier for e in compacted) for tier in (1, 2)}
    turns = [r for r in server.requests if not is_summary(r)]
    sizes = [t for r, t in zip(server.requests, server.tokens, strict=True) if not is_summary(r)]
    learnt = next((i for i, t in enumerate(sizes) if t > args.window), 0)  # the first refusal
    answered = max(t for t in sizes[learnt:] if t <= args.window)
    completed = sum(e.outcome == "completed" for e in finished)
    print(f"longrun: {args.turns} turns, {RESULT_CHARS} B tool result each, window {args.window} tokens")
    per_turn = wall / args.turns * 1000
    print(f"turns completed: {completed}/{args.turns}  wall {wall:.0f} s ({per_turn:.0f} ms/turn)")
    errors = [e.text for e in events if e.kind == "error"]
    if errors:
        print(f"errors: {len(errors)}, first: {errors[0]}")
    print(f"requests: {len(turns)} turn requests, {len(server.requests) - len(turns)} summaries")
    print(f"refused as too long: {server.refused}  goal <= 1")
    print(f"compactions: {len(compacted)} (tier 1: {tiers[1]}, tier 2: {tiers[2]})")
    print(
        f"request / window: largest answered once the window was learnt {answered / args.window:.2f}, "
        f"before {max(sizes[:learnt] or [0]) / args.window:.2f}, largest refused "
        f"{max(sizes) / args.window:.2f}, last {sizes[-1] / args.window:.2f}  goal < 1"
    )
    early, late = statistics.median(seconds[5:15]), statistics.median(seconds[-10:])
    print(
        f"turn latency, median of turns 6-15 vs last 10: {early * 1000:.0f} -> {late * 1000:.0f} ms "
        f"= {late / early:.2f}x  (turn 10 {seconds[9] * 1000:.0f} ms, turn {args.turns} "
        f"{seconds[-1] * 1000:.0f} ms = {seconds[-1] / seconds[9]:.2f}x)  goal <= 1.5"
    )
    slow = sorted(range(len(seconds)), key=lambda i: seconds[i])[-3:][::-1]
    print("slowest turns: " + ", ".join(f"turn {i + 1} {seconds[i] * 1000:.0f} ms" for i in slow))
    cpu = measured["cpu"]
    early_cpu, late_cpu = statistics.mean(cpu[5:15]), statistics.mean(cpu[-10:])
    items = [len(r["input"]) for _, r in ANSWERED]
    print(
        f"worker CPU per turn, mean of turns 6-15 vs last 10: {early_cpu * 1000:.0f} -> "
        f"{late_cpu * 1000:.0f} ms = {late_cpu / early_cpu:.2f}x; input items per request, median of "
        f"requests 11-30 vs last 20: {statistics.median(items[10:30])} -> {statistics.median(items[-20:])}"
    )
    started = {e.turn_id: e.at for e in events if e.kind == "turn_started"}
    inside = [(e.at - started[e.turn_id]).total_seconds() for e in finished if e.turn_id in started]
    early_in, late_in = statistics.median(inside[5:15]), statistics.median(inside[-10:])
    print(
        f"turn time inside the session (turn_started -> turn_finished): {early_in * 1000:.0f} -> "
        f"{late_in * 1000:.0f} ms = {late_in / early_in:.2f}x"
    )
    history = measured["runs"]
    print(
        f"runs: {len(history)}; history bytes per run / continue_as_new_bytes: max "
        f"{max(b for b, _ in history) / args.can_bytes:.3f} ({max(b for b, _ in history):,} B)  goal < 1; "
        f"continue-as-new input in history: max {max(i for _, i in history[1:] or [(0, 0)]):,} B"
    )
    rss = measured["rss"]
    for i, what in enumerate(("worker RSS", "worker RSS after malloc_trim")[: 1 + args.trim]):
        base = (rss.get(50) or next(iter(rss.values())))[i]
        print(
            f"{what}: "
            + ", ".join(f"turn {t}: {kb[i] / 1024:.0f} MB ({kb[i] / base:.2f}x)" for t, kb in rss.items())
        )
    size = measured["transcript"]
    first, last = min(rss), max(rss)
    if last > first:
        turns = last - first
        print(
            f"growth per turn, turn {first} -> {last}: worker RSS "
            f"{(rss[last][0] - rss[first][0]) / turns:.1f} KB, transcript (JSON) "
            f"{(size[last] - size[first]) / 1024 / turns:.1f} KB ({size[last] / 2**20:.1f} MB at turn {last})"
        )
    held = ", ".join(f"turn {t}: {n}" for t, n in measured["cached"].items())
    print(f"workflow runs the worker holds: {held}")
    if args.memory:
        print("worker memory (MB; heap = glibc's main arena, anon = other anonymous mappings):")
        for turn, m in measured["memory"].items():
            print(
                f"  turn {turn}: heap {m['heap_kb'] / 1024:.0f}, anon {m['anon_kb'] / 1024:.0f}, files "
                f"{m['file_kb'] / 1024:.0f}; pymalloc arenas {m['pymalloc_kb'] / 1024:.0f} "
                f"(used {m['pymalloc_used_kb'] / 1024:.0f}); threads {m['threads']}; garbage collected "
                f"{m['garbage']:,} objects; collections by generation so far {m['collections']}"
            )
            for line in m["grown"]:
                print(f"    {line}")
    if len(compacted) < 5:
        print("facts: fewer than 5 compactions, not checked")
    else:
        fifth = compacted[4].at.timestamp()
        checked = [r for at, r in ANSWERED if at > fifth]
        missing = [r for r in checked if not all(f in json.dumps(r) for f in FACTS)]
        print(f"facts: {len(checked)} requests after the 5th compaction, {len(missing)} lack one  goal 0")
    print(
        f"status: context {status.context_tokens}/{status.context_window}, compactions {status.compactions}"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--window", type=int, default=32_768)
    parser.add_argument(
        "--can-bytes", type=int, default=1_000_000, help="host.sessions.continue_as_new_bytes"
    )
    parser.add_argument("--trim", action="store_true", help="also the worker's RSS after malloc_trim")
    parser.add_argument("--memory", action="store_true", help="where the worker's RSS is, at each reading")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, ScriptedOpenAI(reply, window=args.window) as server:
        os.environ["WOLF_PAYLOAD_STORE"] = str(Path(tmp) / "payloads")  # this process and the worker's
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=dynamic_config_args(),
        )
        try:
            start = time.perf_counter()
            measured = await session(env.client, args, server, Path(tmp) / "worker.log")
            wall = time.perf_counter() - start
        finally:
            await env.shutdown()
        report(args, server, measured, wall)


if __name__ == "__main__":
    asyncio.run(main())
