"""`wolf serve`: what the OpenAI-compatible front end adds to first-token latency, and what a streaming
client costs it.

One Temporal dev server (AgentWolf's `dynamic_config_args()`), three processes besides this one: a
worker (`create_worker`, agent `a` on a local streaming FunctionModel: `--tokens` word-sized chunks,
the first at once, then one every `--chunk-ms`), the app (`create_app` on uvicorn, keys
`WOLF_API_KEYS=bench=bench`), and this process, which drives the clients.

1. First token, `--runs` times each, alternating: a fresh durable session (`WolfClient.start_session`,
   no prompt) per run, then, timed from just before the request,
   - direct: what the app does itself, with `WolfClient`: `event_offset`, `prompt`, `events` until
     the first `text_delta`;
   - api: the official `openai` client, `chat.completions.create(stream=True)` with
     `X-Wolf-Session: <id>`, until the first chunk with content.
   Added latency = p50(api) - p50(direct) (goal <= 20 ms).
2. `--clients` streaming clients at once on the one app, each a stateless streaming chat completion
   (a new background session each) with a key of its own (one key may hold only
   Capacity.max_requests_per_key streams): how many complete with the whole answer, wall time,
   the app's RSS before, at its peak (sampled every 100 ms from /proc), growth per client.
3. Hostile clients, as `wolf serve` is configured (protocols/server.py `server_config`):
   - `--stalled` streaming chat completions opened by ONE key (each a long answer) whose client
     reads the status line and nothing more: how many are admitted and refused (429), the app's RSS
     and the Temporal dev server's RPC rate (its `service_requests` counters, /metrics) over
     `--stall-s` seconds, against the rate before they were opened;
   - `--half-sent` connections that send a partial request line and headers and never finish: how
     many the app has closed within 30 s, and when the last one closed.

Run:   python bench/serve.py                 (30 runs, 200 clients, 40 tokens every 50 ms)
Quick: python bench/serve.py --runs 10 --clients 20 --stall-s 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent)]

WORD = "token "
GOAL_ADDED_MS = 20
GOAL_HALF_SENT_S = 30
KEY = "bench"
KEYS = 256
"""Keys bench, bench0 ... bench255, all of tenant `bench`: one per concurrent client in part 2."""
MANIFEST = {"agents": {"a": {"model": "local:m"}}}
LONG = "long"
"""A prompt the bench model answers at length (part 3: streams that outlive the measurement)."""
LONG_TOKENS = 10_000


def _model(tokens: int, chunk_s: float) -> Any:
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    def length(messages: Any) -> int:
        return LONG_TOKENS if LONG in str(messages[-1].parts[-1].content) else tokens

    async def answer(messages: Any, info: Any) -> ModelResponse:
        return ModelResponse(parts=[TextPart(WORD * length(messages))])

    async def stream(messages: Any, info: Any) -> AsyncIterator[str]:
        for i in range(length(messages)):
            if i:
                await asyncio.sleep(chunk_s)
            yield WORD

    return FunctionModel(answer, stream_function=stream)


async def _connect(address: str) -> Any:
    from temporalio.client import Client

    from agentwolf.payloads import data_converter

    return await Client.connect(address, data_converter=data_converter())


async def run_worker(address: str, task_queue: str, tokens: int, chunk_s: float) -> None:
    from agentwolf.worker.bootstrap import create_worker

    worker, hosts = create_worker(
        await _connect(address), task_queue=task_queue, local_models={"m": _model(tokens, chunk_s)}
    )
    async with worker:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await hosts.close()


async def run_app(address: str, task_queue: str, port: int) -> None:
    """The app as `wolf serve` runs it (its uvicorn configuration and limits)."""
    import uvicorn

    from agentwolf.config.manifest import Manifest
    from agentwolf.protocols.app import create_app
    from agentwolf.protocols.auth import ApiKeys
    from agentwolf.protocols.served import Served
    from agentwolf.protocols.server import server_config

    served = Served(
        client=await _connect(address),
        task_queue=task_queue,
        keys=ApiKeys.load([]),
        manifest=Manifest.model_validate(MANIFEST),
    )
    config = server_config(create_app(served), host="127.0.0.1", port=port, backlog=2048)
    await uvicorn.Server(config).serve()


def _child(log: Path, *args: str) -> subprocess.Popen[str]:
    """A process of this script; its stderr (the worker logs every cancelled model request) goes to `log`."""
    keys = [KEY, *(f"{KEY}{i}" for i in range(KEYS))]
    env = {**os.environ, "WOLF_API_KEYS": ",".join(f"{k}=bench" for k in keys)}
    with log.open("a") as err:
        return subprocess.Popen(
            [sys.executable, __file__, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
        )


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def first_tokens(wolf: Any, api: Any, manifest: Any, runs: int) -> tuple[list[float], list[float]]:
    direct, through_api = [], []
    for i in range(runs * 2):
        sid = await wolf.start_session("a", manifest)
        start = time.perf_counter()
        if i % 2 == 0:
            base = await wolf.event_offset(sid)
            await wolf.prompt(sid, "go")
            async for _, event in wolf.events(sid, base):
                if event.kind == "text_delta" and event.text:
                    direct.append((time.perf_counter() - start) * 1000)
                    break
        else:
            stream = await api.chat.completions.create(
                model="a",
                messages=[{"role": "user", "content": "go"}],
                stream=True,
                extra_headers={"X-Wolf-Session": sid},
            )
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    through_api.append((time.perf_counter() - start) * 1000)
                    break
            await stream.close()
        await wolf.close(sid)
    return direct, through_api


async def concurrent(api: Any, clients: int, answer: str, app_pid: int) -> dict[str, Any]:
    peak = before = rss_kb(app_pid)
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_kb(app_pid))
            await asyncio.sleep(0.1)

    async def one(i: int) -> str:
        stream = await api.chat.completions.create(
            model="a",
            messages=[{"role": "user", "content": "go"}],
            stream=True,
            extra_headers={"Authorization": f"Bearer {KEY}{i % KEYS}"},
        )
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    sampler = asyncio.create_task(sample())
    start = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(clients)), return_exceptions=True)
    wall = time.perf_counter() - start
    done.set()
    await sampler
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        import traceback

        print("".join(traceback.format_exception(errors[0])), file=sys.stderr)
    whole = sum(r == answer for r in results)
    return {
        "clients": clients,
        "whole": whole,
        "errors": errors,
        "wall": wall,
        "before": before,
        "peak": peak,
    }


async def rpc_total(http: Any, metrics: str) -> float:
    """Requests the dev server's frontend has answered so far (its `service_requests` counters)."""
    total = 0.0
    for line in (await http.get(metrics)).text.splitlines():
        if line.startswith("service_requests{") and 'service_name="frontend"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


async def rpc_rate(http: Any, metrics: str, seconds: float) -> float:
    before = await rpc_total(http, metrics)
    await asyncio.sleep(seconds)
    return (await rpc_total(http, metrics) - before) / seconds


async def stalled(port: int, streams: int, seconds: float, app_pid: int, metrics: str) -> dict[str, Any]:
    """`streams` streaming chat completions of one key whose clients read their status line only."""
    import httpx2 as httpx

    body = json.dumps({"model": "a", "messages": [{"role": "user", "content": LONG}], "stream": True})
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}"
    ).encode()
    async with httpx.AsyncClient() as http:
        idle = await rpc_rate(http, metrics, 3)
        rss = [rss_kb(app_pid)]
        conns, statuses = [], []
        for _ in range(streams):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1024)
            writer.write(head)
            conns.append((reader, writer))
        for reader, _ in conns:  # the status line, then nothing more
            line = await asyncio.wait_for(reader.readline(), 60)
            statuses.append(int(line.split()[1]) if line else 0)
        rates = []
        for _ in range(2):
            rates.append(await rpc_rate(http, metrics, seconds / 2))
            rss.append(rss_kb(app_pid))
        for _, writer in conns:
            writer.close()
    return {"statuses": statuses, "idle": idle, "rates": rates, "rss": rss}


def hostile_report(streams: int, seconds: float, hostile: dict[str, Any]) -> str:
    codes, rates, idle = hostile["statuses"], hostile["rates"], hostile["idle"]
    admitted, refused = codes.count(200), codes.count(429)
    mb = [kb / 1024 for kb in hostile["rss"]]
    per_stream = (rates[-1] - idle) / max(1, admitted)
    return (
        f"{streams} streams opened by one key and never read (answers of {LONG_TOKENS} tokens):\n"
        f"  admitted {admitted}, refused 429 {refused}, other {len(codes) - admitted - refused}\n"
        f"  app RSS {mb[0]:.1f} MB before, {mb[1]:.1f} MB after {seconds / 2:g} s, {mb[2]:.1f} MB after"
        f" {seconds:g} s ({mb[2] - mb[1]:+.1f} MB in the second half)\n"
        f"  Temporal RPC/s: {idle:.0f} before, {', '.join(f'{r:.0f}' for r in rates)} while they stall"
        f" ({per_stream:.1f} per admitted stream)"
    )


async def half_sent(port: int, count: int) -> list[float | None]:
    """Seconds until the app closed each of `count` connections that never finish their headers
    (None: still open after GOAL_HALF_SENT_S)."""
    start = time.perf_counter()

    async def one() -> float | None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            await writer.drain()
            await asyncio.wait_for(reader.read(), GOAL_HALF_SENT_S - (time.perf_counter() - start))
            return time.perf_counter() - start
        except TimeoutError:
            return None
        finally:
            writer.close()

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--chunk-ms", type=float, default=50)
    parser.add_argument("--stalled", type=int, default=200)
    parser.add_argument("--stall-s", type=float, default=20)
    parser.add_argument("--half-sent", type=int, default=100)
    args = parser.parse_args()

    import httpx2 as httpx
    from openai import AsyncOpenAI
    from temporalio.testing import WorkflowEnvironment

    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.config.manifest import Manifest
    from agentwolf.ops.devserver import dynamic_config_args, temporal_binary
    from agentwolf.payloads import data_converter
    from agentwolf.workflows.types import SEARCH_ATTRIBUTES
    from tests.support.serving import free_port

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WOLF_PAYLOAD_STORE"] = str(Path(tmp) / "payloads")
        metrics_port = free_port()
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=[*dynamic_config_args(), "--metrics-port", str(metrics_port)],
        )
        address, task_queue, port = env.client.service_client.config.target_host, "bench-serve", free_port()
        log = Path(tmp) / "children.log"
        worker = _child(log, "--worker", address, task_queue, str(args.tokens), str(args.chunk_ms / 1000))
        app = _child(log, "--app", address, task_queue, str(port))
        try:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient() as http:
                while True:
                    try:
                        if (await http.get(base + "/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
            # The bench tenant is the key's: the direct path runs as the same tenant.
            wolf = WolfClient(env.client, tenant="bench", task_queue=task_queue)
            limits = httpx.Limits(
                max_connections=args.clients + 10, max_keepalive_connections=args.clients + 10
            )
            api = AsyncOpenAI(
                base_url=base + "/v1",
                api_key=KEY,
                max_retries=0,
                timeout=300,
                http_client=httpx.AsyncClient(limits=limits, timeout=300),
            )
            manifest = Manifest.model_validate(MANIFEST)
            await first_tokens(wolf, api, manifest, 2)  # warm-up: sandbox, connections
            direct, through_api = await first_tokens(wolf, api, manifest, args.runs)
            d50, a50 = statistics.median(direct), statistics.median(through_api)
            print(
                f"first token, {args.runs} runs each (fresh durable session, prompt -> first text):\n"
                f"  WolfClient.events directly        p50 {d50:6.1f} ms  (min {min(direct):.1f}, max "
                f"{max(direct):.1f})\n"
                f"  /v1/chat/completions (openai SDK)  p50 {a50:6.1f} ms  (min {min(through_api):.1f}, max "
                f"{max(through_api):.1f})\n"
                f"  added latency p50 {a50 - d50:+.1f} ms (goal <= {GOAL_ADDED_MS} ms): "
                f"{'met' if a50 - d50 <= GOAL_ADDED_MS else 'NOT met'}",
                flush=True,
            )
            fig = await concurrent(api, args.clients, WORD * args.tokens, app.pid)
            growth = (fig["peak"] - fig["before"]) / args.clients
            print(
                f"{args.clients} concurrent streaming chat completions on one app ({args.tokens} tokens "
                f"every {args.chunk_ms:g} ms):\n"
                f"  complete with the whole answer: {fig['whole']}/{args.clients}, errors: "
                f"{len(fig['errors'])}"
                f"{' (' + repr(fig['errors'][0])[:200] + ')' if fig['errors'] else ''}, wall "
                f"{fig['wall']:.1f} s\n"
                f"  app RSS {fig['before'] / 1024:.1f} MB before, {fig['peak'] / 1024:.1f} MB at peak: "
                f"{growth:.0f} KB per streaming client",
                flush=True,
            )
            metrics = f"http://127.0.0.1:{metrics_port}/metrics"
            hostile = await stalled(port, args.stalled, args.stall_s, app.pid, metrics)
            print(hostile_report(args.stalled, args.stall_s, hostile), flush=True)
            closed = await half_sent(port, args.half_sent)
            done = [t for t in closed if t is not None]
            print(
                f"{args.half_sent} half-sent connections: {len(done)} closed within {GOAL_HALF_SENT_S} s"
                f" (last after {max(done, default=float('nan')):.1f} s): "
                f"{'met' if len(done) == args.half_sent else 'NOT met'}",
                flush=True,
            )
        finally:
            for child in (app, worker):
                if child is app:
                    child.terminate()
                else:
                    assert child.stdin is not None
                    child.stdin.close()
                try:
                    child.wait(15)
                except subprocess.TimeoutExpired:
                    child.kill()
            await env.shutdown()
            if os.environ.get("BENCH_KEEP_LOG"):
                print(log.read_text()[-20000:], file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        asyncio.run(run_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])))
    elif sys.argv[1:2] == ["--app"]:
        asyncio.run(run_app(sys.argv[2], sys.argv[3], int(sys.argv[4])))
    else:
        asyncio.run(main())
