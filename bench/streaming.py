"""Streaming: how fast streamed model text reaches a follower, and what streaming adds to history.

One Temporal dev server (AgentWolf's `dynamic_config_args()`), one scripted OpenAI-compatible
streaming server (tests/support/openai_server.py's ScriptedOpenAI, in a process of its own) answering
every request with the same text: `--tokens` word-sized SSE chunks, one every 1/`--rate` s, after a
0.5-0.6 s pause (so every follower is attached before the first token; see START_DELAY); each
chunk's send time is recorded per request (the prompt carries a tag the server files it under).
All three runtimes use the real OpenAI provider code (`openai-chat:` by default, `--api responses`
for `openai:`) against that server; each runs on a worker in a process of its own (this process
runs the followers):

  hb  AgentWolf as built: the model_request activity streams and puts the cumulative text in its
      heartbeat details; the follower is `WolfClient.events(sid)` (the session's feed: durable
      events by query, live text by a describe every POLL_EVERY while the follower waits).
  ws  AgentWolf, design A (only here, in bench/): the same activity publishing delta batches
      (100 ms) to the session's Workflow Stream from inside the activity
      (`WorkflowStreamClient.from_within_activity`), topic `bench.deltas`; the follower subscribes
      to that topic (`WorkflowStreamClient.subscribe`, default 100 ms poll cooldown).
  pai pydantic-ai: `Agent(..., capabilities=[TemporalDurability(event_stream_topic="events")])`
      (bench/streaming_pai.py; 100 ms batches, its default) in a workflow hosting an
      `AgentEventStream`; the follower is `stream_agent_events`.

Per runtime: `--runs` turns one at a time, then (`--sessions` > 1) that many turns at once on the
same worker, each with its own follower. Figures:
- first delta: follower receive time of the first text minus the server's send time of the first
  token (p50 over the turns);
- lag: for every token, the receive time of the first delta whose cumulative text covers it, minus
  the token's send time (matched by cumulative text length; p50 / p95 over the tokens of all turns);
- history added: history bytes of a streamed turn (followed) minus the same turn unstreamed and not
  followed (AgentWolf `stream: false`; pydantic-ai without `event_stream_topic`), medians of the
  turns; also relative to the answer's own size (UTF-8 bytes). For AgentWolf also the same turn
  unstreamed but followed by the same follower (what only the deltas add).
History bytes: sum of protobuf `HistoryEvent.ByteSize()` over every run of the workflow.
While the sessions run at once, CPU seconds per wall second of the worker, of this process (the
followers) and of the dev server: what each design costs, which the shared machine's noise does not
change as much as it changes latencies.

Run:   python bench/streaming.py                    (2,000 tokens at 50/s, 5 runs, 20 sessions)
Quick: python bench/streaming.py --tokens 500 --runs 3
Other: --rate 50 --api chat|responses --runtimes hb,ws,pai --sessions 1 (skip the concurrent part)
What-ifs (bench-only overrides of AgentWolf's values): --throttle-ms 50 (the workers'
HEARTBEAT_THROTTLE_MS, default 100) --poll-every 0.025 (the follower's POLL_EVERY, default 0.05)
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [
    str(BENCH.parent),
    str(BENCH),
]  # agentwolf and tests.support from this checkout; workers beside us

from temporalio import activity
from temporalio.client import Client
from temporalio.contrib.workflow_streams import TopicHandle, WorkflowStreamClient
from workers import MARK, WorkerProcess, _serve

from agentwolf.activities import live
from agentwolf.activities.session import SessionActivities
from agentwolf.workflows.contracts import ModelRequestInput, ModelRequestOutput

START_DELAY = (0.5, 0.6)
"""Seconds the server waits before answering (uniform in this range, per request): every follower is
attached before the first token, and the first token lands at a random phase of the runtimes' 100 ms
cycles (heartbeat throttle, periodic heartbeats, publish batches), as a provider's time to first
token would. A fixed delay that is a multiple of 100 ms puts it at the same phase every time: first
deltas then come out bimodal (~25 ms or ~135 ms for AgentWolf)."""
DELTAS_TOPIC = "bench.deltas"
BATCH = timedelta(milliseconds=100)
"""Design A's publish batch interval (pydantic-ai's default for its event stream)."""
GOAL_FIRST_MS, GOAL_LAG_MS, GOAL_VS_PAI, GOAL_VS_ANSWER = 150, 300, 0.25, 1.0
NAMES = {"hb": "agentwolf (heartbeat)", "ws": "agentwolf A (wf stream)", "pai": "pydantic-ai"}


def answer_chunks(tokens: int) -> list[str]:
    """`tokens` word-sized chunks (a word and its trailing space), the same for every request."""
    vocabulary = (
        "stream",
        "durable",
        "token",
        "worker",
        "history",
        "follower",
        "latency",
        "answer",
        "model",
        "delta",
    )
    return [f"{vocabulary[i % len(vocabulary)]}{i % 97} " for i in range(tokens)]


# -- the scripted server, in a process of its own ---------------------------------------------------


def serve(tokens: int, rate: float) -> None:
    """Answer every request with `answer_chunks(tokens)`; on `sent TAG`, print the (send time,
    cumulative text length) of each text chunk streamed for the request whose prompt says `tag=TAG`."""
    from tests.support.openai_server import Reply, ScriptedOpenAI

    chunks = answer_chunks(tokens)
    tags: dict[int, str] = {}
    log: dict[str, list[tuple[float, int]]] = {}
    lock = threading.Lock()

    class Sent:
        """Stands in for `ScriptedOpenAI.sent`: files each text delta under its request's tag (each
        request is served on a thread of its own, which `reply` tagged)."""

        def append(self, item: tuple[float, str]) -> None:
            sent_at, delta = item
            with lock:
                entries = log.setdefault(tags.get(threading.get_ident(), "?"), [])
                entries.append((sent_at, (entries[-1][1] if entries else 0) + len(delta)))

    def reply(body: dict[str, Any]) -> Reply:
        found = re.search(r"tag=(\w+)", json.dumps(body))
        tags[threading.get_ident()] = found.group(1) if found else "?"
        return Reply(chunks=chunks, interval=1 / rate, delay=random.uniform(*START_DELAY))

    with ScriptedOpenAI(reply) as server:
        server.sent = Sent()  # type: ignore[assignment]
        print(MARK + server.base_url, flush=True)
        for line in sys.stdin:
            command, _, arg = line.strip().partition(" ")
            if command != "sent":
                break
            with lock:
                entries = log.pop(arg, [])
            print(MARK + json.dumps(entries), flush=True)


# -- workers -------------------------------------------------------------------------------------------

_deltas: contextvars.ContextVar[TopicHandle[Any] | None] = contextvars.ContextVar(
    "bench_deltas", default=None
)


class PublishingResponse(live.LiveResponse):
    """Design A: each update publishes the new text to the session's Workflow Stream (the client
    batches them, 100 ms) instead of putting it in the heartbeat details (which stay empty)."""

    def __init__(self, turn_id: str, step: int, secrets: Any) -> None:
        super().__init__(turn_id, step, secrets)
        self.published = 0

    def update(self, partial: Any) -> None:
        """`partial()` is the stream's response so far (built on demand)."""
        topic = _deltas.get()
        start, text = self._window(partial().text or "")
        if topic is None or start + len(text) <= self.published:
            return
        index = max(self.published, start)
        d = self.details
        topic.publish(
            {
                "turn_id": d.turn_id,
                "step": d.step,
                "attempt": d.attempt,
                "index": index,
                "text": text[index - start :],
            }
        )
        self.published = start + len(text)


class PublishingActivities(SessionActivities):
    """Design A's model_request: the activity as built, with a Workflow Stream publisher around it
    (flushed before the activity completes)."""

    @activity.defn(name="wolf.model_request")
    async def model_request(self, inp: ModelRequestInput) -> ModelRequestOutput:
        stream = WorkflowStreamClient.from_within_activity(batch_interval=BATCH)
        token = _deltas.set(stream.topic(DELTAS_TOPIC))
        try:
            async with stream:
                return await super().model_request(inp)
        finally:
            _deltas.reset(token)


async def run_worker(kind: str, address: str, namespace: str, task_queue: str) -> None:
    if kind == "pai":
        import streaming_pai
        from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
        from temporalio.worker import Worker

        client = await Client.connect(address, namespace=namespace, plugins=[PydanticAIPlugin()])
        workflows = [streaming_pai.PaiStreamTurn, streaming_pai.PaiPlainTurn]
        await _serve(Worker(client, task_queue=task_queue, workflows=workflows))
        return

    from agentwolf.payloads import data_converter
    from agentwolf.worker import bootstrap as worker_main

    if throttle := os.environ.get("BENCH_THROTTLE_MS"):  # --throttle-ms: a what-if, this process only
        worker_main.HEARTBEAT_THROTTLE_MS = int(throttle)
    if kind == "ws":  # this process only: design A instead of heartbeat details
        live.LiveResponse = PublishingResponse  # type: ignore[misc]
        worker_main.SessionActivities = PublishingActivities  # type: ignore[misc]
    client = await Client.connect(address, namespace=namespace, data_converter=data_converter())
    worker, hosts = worker_main.create_worker(client, task_queue=task_queue)
    try:
        await _serve(worker)
    finally:
        await hosts.close()


class Child(WorkerProcess):
    """This script in a child process (`args` after the script name); answers start with MARK."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.asking = asyncio.Lock()

    async def ask(self, line: str) -> str:
        """One question, one answer (concurrent turns ask one at a time)."""
        async with self.asking:
            self.proc.stdin.write(line + "\n")  # type: ignore[union-attr]
            self.proc.stdin.flush()  # type: ignore[union-attr]
            return await self._line()


# -- measuring -----------------------------------------------------------------------------------------

Received = list[tuple[float, int]]
"""(receive time, cumulative text length after the delta), as the follower saw it."""


@dataclass
class Turn:
    wid: str
    sent: list[tuple[float, int]] = field(default_factory=list)
    received: Received = field(default_factory=list)
    history: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def first_ms(self) -> float:
        return (self.received[0][0] - self.sent[0][0]) * 1000

    def lags_ms(self) -> list[float]:
        lags, j = [], 0
        for sent_at, end in self.sent:
            while j < len(self.received) and self.received[j][1] < end:
                j += 1
            if j == len(self.received):
                break
            lags.append((self.received[j][0] - sent_at) * 1000)
        return lags


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


@dataclass
class Figures:
    runtime: str
    answer_bytes: int
    single: list[Turn] = field(default_factory=list)
    concurrent: list[Turn] = field(default_factory=list)
    plain_history: list[int] = field(default_factory=list)
    plain_followed_history: list[int] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds per wall second by role while the sessions ran at once."""

    @staticmethod
    def first_p50(turns: list[Turn]) -> float:
        return statistics.median(t.first_ms for t in turns) if turns else float("nan")

    @staticmethod
    def lag(turns: list[Turn], q: float) -> float:
        return percentile([lag for t in turns for lag in t.lags_ms()[1:]], q)

    @property
    def added(self) -> float:
        return statistics.median(t.history for t in self.single) - statistics.median(self.plain_history)


async def history_bytes(client: Client, wid: str) -> int:
    """Protobuf bytes of a workflow's history, walking back through continue-as-new."""
    total, run_id = 0, None
    while True:
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        total += sum(e.ByteSize() for e in history.events)
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            return total


TurnFn = Callable[[str, bool, bool], Awaitable[Turn]]
"""(tag, stream, follow) -> a finished turn (its received deltas, when followed)."""


def wolf_turns(client: Client, task_queue: str, url: str, api: str, follower: str, answer_len: int) -> TurnFn:
    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.config.manifest import Manifest
    from agentwolf.workflows.types import workflow_id

    wolf = WolfClient(client, task_queue=task_queue)
    spec = "openai-chat:gpt-4o-mini" if api == "chat" else "openai:gpt-4o-mini"

    def manifest(stream: bool) -> Manifest:
        providers = {"openai": {"api_key": "k", "base_url": url}}
        agents = {"a": {"model": spec, "stream": stream}}
        return Manifest.model_validate({"host": {"models": {"providers": providers}}, "agents": agents})

    manifests = {True: manifest(True), False: manifest(False)}

    async def turn(tag: str, stream: bool, follow: bool) -> Turn:
        sid = await wolf.submit(f"tag={tag}: write the answer", "a", manifests[stream])
        out = Turn(workflow_id(wolf.tenant, sid))
        if follow and follower == "events":
            async for _, event in wolf.events(sid):
                if event.kind == "text_delta" and event.text:
                    out.received.append((time.time(), (event.index or 0) + len(event.text)))
                elif event.kind == "attempt_superseded":
                    out.notes.append(f"attempt {event.attempt} superseded")
                elif event.kind == "turn_finished":
                    break
        elif follow:  # design A: the deltas topic
            subscription = WorkflowStreamClient.create(client, out.wid).subscribe(
                DELTAS_TOPIC, result_type=dict
            )
            async for item in subscription:
                out.received.append((time.time(), item.data["index"] + len(item.data["text"])))
                if out.received[-1][1] >= answer_len:
                    break
            await subscription.aclose()  # type: ignore[attr-defined]
        result = await wolf.result(sid)
        if result.output is None or len(result.output) != answer_len:
            out.notes.append(f"output of {len(result.output or '')} chars, not {answer_len}")
        return out

    return turn


def pai_turns(client: Client, task_queue: str, answer_len: int) -> TurnFn:
    from pydantic_ai.durable_exec.temporal import stream_agent_events
    from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta
    from streaming_pai import TOPIC

    async def turn(tag: str, stream: bool, follow: bool) -> Turn:
        wid = f"bench-pai-{tag}"
        prompt = f"tag={tag}: write the answer"
        out = Turn(wid)
        if not stream:
            output = await client.execute_workflow("PaiPlainTurn", prompt, id=wid, task_queue=task_queue)
        else:
            handle = await client.start_workflow("PaiStreamTurn", prompt, id=wid, task_queue=task_queue)
            length = 0
            async for event in stream_agent_events(client, handle, TOPIC):
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    length += len(event.part.content)
                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    length += len(event.delta.content_delta)
                else:
                    continue
                if not out.received or length > out.received[-1][1]:
                    out.received.append((time.time(), length))
            output = await handle.result()
        if len(output) != answer_len:
            out.notes.append(f"output of {len(output)} chars, not {answer_len}")
        return out

    return turn


async def measure(
    name: str,
    turn: TurnFn,
    history_client: Client,
    server: Child,
    runs: int,
    sessions: int,
    answer_bytes: int,
    followed_plain: bool,
) -> Figures:
    figures = Figures(name, answer_bytes)

    async def one(stream: bool, follow: bool) -> Turn:
        tag = uuid.uuid4().hex[:12]
        t = await turn(tag, stream, follow)
        t.sent = [tuple(x) for x in json.loads(await server.ask(f"sent {tag}"))]  # type: ignore[misc]
        t.history = await history_bytes(history_client, t.wid)
        for note in t.notes:
            print(f"  [{name}] {tag}: {note}", flush=True)
        return t

    await one(False, False)  # warm-up: worker sandbox, provider client
    for _ in range(2):
        figures.plain_history.append((await one(False, False)).history)
    if followed_plain:
        figures.plain_followed_history.append((await one(False, True)).history)
    for i in range(runs):
        t = await one(True, True)
        figures.single.append(t)
        lags = t.lags_ms()
        print(
            f"  [{name}] run {i + 1}/{runs}: first delta {t.first_ms:.0f} ms, lag p95 "
            f"{percentile(lags[1:], 0.95):.0f} ms,"
            f" {len(t.received)} deltas for {len(t.sent)} chunks, history {t.history} B",
            flush=True,
        )
    if sessions > 1:
        start, cpu = time.perf_counter(), cpu_seconds()
        figures.concurrent = list(await asyncio.gather(*(one(True, True) for _ in range(sessions))))
        wall, used = time.perf_counter() - start, cpu_seconds()
        figures.cpu = {role: (used[role] - cpu.get(role, 0.0)) / wall for role in used}
        print(
            f"  [{name}] {sessions} at once in {wall:.1f} s: first delta p50"
            f" {Figures.first_p50(figures.concurrent):.0f} ms, lag p95 "
            f"{Figures.lag(figures.concurrent, 0.95):.0f} ms;"
            f" CPU s per s: " + ", ".join(f"{role} {v:.2f}" for role, v in sorted(figures.cpu.items())),
            flush=True,
        )
    return figures


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process (the followers) and of its children by
    role: `worker`, `dev server` and `model server` (the scripted OpenAI server)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {"followers": sum(os.times()[:2])}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != os.getpid():
                continue
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        role = (
            "worker" if b"--worker" in cmdline else "model server" if b"--serve" in cmdline else "dev server"
        )
        out[role] = out.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def report(args: argparse.Namespace, figures: dict[str, Figures], answer_bytes: int) -> None:
    from agentwolf.client.feed import POLL_EVERY
    from agentwolf.worker.bootstrap import HEARTBEAT_THROTTLE_MS

    throttle = HEARTBEAT_THROTTLE_MS if args.throttle_ms is None else args.throttle_ms
    print()
    print(
        f"{args.tokens} tokens at {args.rate:g}/s ({1000 / args.rate:.0f} ms apart), answer {answer_bytes} B;"
        f" {'openai-chat' if args.api == 'chat' else 'openai (Responses)'}; dev server with "
        "dynamic_config_args();"
        f" HEARTBEAT_THROTTLE_MS={throttle}, POLL_EVERY={POLL_EVERY}; {args.runs} runs one at a time"
    )
    head = (
        f"{'runtime':<24} {'first p50':>9} {'lag p50':>8} {'lag p95':>8} {'hist added':>10} {'x answer':>8}"
        f" {'streamed B':>10} {'plain B':>8}"
    )
    print(head)
    for key, f in figures.items():
        streamed = statistics.median(t.history for t in f.single)
        print(
            f"{NAMES[key]:<24} {f.first_p50(f.single):>7.0f}ms {f.lag(f.single, 0.5):>6.0f}ms "
            f"{f.lag(f.single, 0.95):>6.0f}ms"
            f" {f.added:>10.0f} {f.added / answer_bytes:>8.2f} {streamed:>10.0f} "
            f"{statistics.median(f.plain_history):>8.0f}"
        )
    if "hb" in figures and figures["hb"].plain_followed_history:
        hb = figures["hb"]
        followed = statistics.median(hb.plain_followed_history)
        added = statistics.median(t.history for t in hb.single) - followed
        print(f"  agentwolf vs the same turn unstreamed but followed ({followed:.0f} B): {added:+.0f} B")
    if args.sessions > 1:
        print(f"{args.sessions} sessions at once (one worker):")
        print(
            f"{'runtime':<24} {'first p50':>9} {'first p95':>9} {'lag p50':>8} {'lag p95':>8}"
            "   CPU s/s: worker followers dev-server"
        )
        for key, f in figures.items():
            firsts = [t.first_ms for t in f.concurrent]
            print(
                f"{NAMES[key]:<24} {f.first_p50(f.concurrent):>7.0f}ms {percentile(firsts, 0.95):>7.0f}ms"
                f" {f.lag(f.concurrent, 0.5):>6.0f}ms {f.lag(f.concurrent, 0.95):>6.0f}ms"
                f"   {f.cpu.get('worker', 0):>15.2f} {f.cpu.get('followers', 0):>9.2f} "
                f"{f.cpu.get('dev server', 0):>10.2f}"
            )

    print("goals:")
    hb, pai = figures.get("hb"), figures.get("pai")
    if hb is None:
        return
    parts = [("one at a time", hb.single, pai.single if pai else [])]
    if args.sessions > 1:
        parts.append((f"{args.sessions} at once", hb.concurrent, pai.concurrent if pai else []))
    for label, wolf, base in parts:
        first, lag = Figures.first_p50(wolf), Figures.lag(wolf, 0.95)
        print(
            f"  [{label}] agentwolf first-delta p50 {first:.0f} ms <= {GOAL_FIRST_MS} ms: "
            f"{verdict(first <= GOAL_FIRST_MS)}"
        )
        if base:
            theirs = Figures.first_p50(base)
            print(
                f"  [{label}] ... and <= pydantic-ai's {theirs:.0f} ms (ratio {first / theirs:.2f}): "
                f"{verdict(first <= theirs)}"
            )
        print(
            f"  [{label}] agentwolf lag p95 {lag:.0f} ms <= {GOAL_LAG_MS} ms: {verdict(lag <= GOAL_LAG_MS)}"
        )
    if pai is not None:
        ratio = hb.added / pai.added
        print(
            f"  history added {hb.added:.0f} B = {ratio:.3f}x pydantic-ai's {pai.added:.0f} B (<= "
            f"{GOAL_VS_PAI}x): {verdict(ratio <= GOAL_VS_PAI)}"
        )
    rel = hb.added / answer_bytes
    print(
        f"  history added = {rel:.3f}x the answer's {answer_bytes} B (<= {GOAL_VS_ANSWER:g}x): "
        f"{verdict(rel <= GOAL_VS_ANSWER)}"
    )
    if hb.plain_followed_history:
        alone = statistics.median(t.history for t in hb.single) - statistics.median(hb.plain_followed_history)
        print(
            f"  ... of which the deltas alone (vs the same turn unstreamed, same follower): {alone:+.0f} B ="
            f" {alone / answer_bytes:+.3f}x the answer; the rest is the follower's polls of durable events"
        )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2000, help="text chunks (one word each) per answer")
    parser.add_argument("--rate", type=float, default=50, help="chunks per second")
    parser.add_argument("--runs", type=int, default=5, help="streamed turns one at a time per runtime")
    parser.add_argument("--sessions", type=int, default=20, help="streamed turns at once (1: skip)")
    parser.add_argument("--api", choices=("chat", "responses"), default="chat")
    parser.add_argument("--runtimes", default="hb,ws,pai", help="which of hb, ws, pai (in this order)")
    parser.add_argument(
        "--throttle-ms", type=int, help="what-if: the AgentWolf workers' HEARTBEAT_THROTTLE_MS"
    )
    parser.add_argument("--poll-every", type=float, help="what-if: the AgentWolf follower's POLL_EVERY (s)")
    args = parser.parse_args()
    if args.poll_every is not None:
        import agentwolf.client.feed

        agentwolf.client.feed.POLL_EVERY = args.poll_every

    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
    from temporalio.testing import WorkflowEnvironment

    from agentwolf.ops.devserver import dynamic_config_args, temporal_binary
    from agentwolf.payloads import data_converter
    from agentwolf.workflows.types import SEARCH_ATTRIBUTES

    answer = "".join(answer_chunks(args.tokens))
    answer_bytes = len(answer.encode())
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "children.log"
        os.environ["WOLF_PAYLOAD_STORE"] = str(Path(tmp) / "payloads")  # this process and the workers'
        server = Child(["--serve", str(args.tokens), str(args.rate)], log)
        url = await server._line()
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=dynamic_config_args(),
        )
        address, namespace = env.client.service_client.config.target_host, env.client.namespace
        figures: dict[str, Figures] = {}
        try:
            for key in args.runtimes.split(","):
                task_queue = f"bench-stream-{key}"
                worker_env = {"BENCH_OPENAI_URL": url, "BENCH_OPENAI_API": args.api}
                if args.throttle_ms is not None:
                    worker_env["BENCH_THROTTLE_MS"] = str(args.throttle_ms)
                worker = await Child(
                    ["--worker", key, address, namespace, task_queue], log, worker_env
                ).ready()
                try:
                    print(f"{NAMES[key]}:", flush=True)
                    if key == "pai":
                        client = await Client.connect(
                            address, namespace=namespace, plugins=[PydanticAIPlugin()]
                        )
                        turn = pai_turns(client, task_queue, len(answer))
                    else:
                        follower = "events" if key == "hb" else "stream"
                        turn = wolf_turns(env.client, task_queue, url, args.api, follower, len(answer))
                    figures[key] = await measure(
                        key,
                        turn,
                        env.client,
                        server,
                        args.runs,
                        args.sessions,
                        answer_bytes,
                        followed_plain=key == "hb",
                    )
                finally:
                    worker.stop()
        except BaseException:
            print("".join(log.read_text(errors="replace").splitlines(keepends=True)[-60:]), file=sys.stderr)
            raise
        finally:
            await env.shutdown()
            server.stop()
        report(args, figures, answer_bytes)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(int(sys.argv[2]), float(sys.argv[3]))
    elif sys.argv[1:2] == ["--worker"]:
        asyncio.run(run_worker(*sys.argv[2:6]))
    else:
        asyncio.run(main())
