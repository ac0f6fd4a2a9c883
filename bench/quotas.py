"""Provider quotas under load: one scripted provider enforcing request and input-token limits
per window (429 with `Retry-After` and `x-ratelimit-*` headers), worker processes sharing it, and
sessions of three tenants (weights 1:1:2), interactive and jobs mixed.

    python bench/quotas.py [--workers 4] [--sessions 150] [--modes off,queue,quotas] [--logs DIR]

Modes, each on a fresh dev server:
- `off`: no limits configured (the behaviour before quotas: the SDK's own retries, then the
  activity's retry policy);
- `queue`: Temporal's task-queue rate limit (`max_task_queue_activities_per_second`, enforced by the
  matching service for every worker of the queue) set to the provider's request rate, doubled as
  every session also runs one compile activity on the queue; it knows nothing of tokens or 429s;
- `quotas`: AgentWolf's quota workflow (the worker policy's `quotas.models` and tenant weights).

The provider's window is `--window` seconds (10 by default: 60 RPM and 40k input TPM scaled to 10 s,
six times faster than a real minute, same shape). Each session's prompt carries ~950 tokens so
the token budget binds before the request budget. The jobs start at once; people's prompts come at
random over 5-90 s from when the jobs saturate the endpoint (`--people-from start`: from the
bench's start, as before 2026-12-02). Printed per mode: requests, 429 ratio, requests
sent inside an announced cooldown, failed turns, input-token budget used while work waited,
each tenant's share of requests while every tenant had work (sessions start in tenant order, and a
tenant with nothing waiting yet keeps no share; in brackets the shares from the first request),
interactive turns' p95 time from prompt to answer and the quota workflow's p95 wait for their leases, and
the ratios of failed turns and of 429s against `off`. `--logs` keeps the workers' output and the
quota workflow's histories; progress goes to stderr every 15 s. Measured figures: docs/features/quotas.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from temporalio.service import RPCError

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

from agentwolf.client.quotas import endpoints  # noqa: E402
from agentwolf.client.wolf_client import WolfClient  # noqa: E402
from agentwolf.config.manifest import Manifest  # noqa: E402
from agentwolf.ops.devserver import dynamic_config_args, temporal_binary  # noqa: E402
from agentwolf.payloads import data_converter  # noqa: E402
from agentwolf.workflows.types import SEARCH_ATTRIBUTES  # noqa: E402
from tests.support.openai_server import Reply, ScriptedOpenAI  # noqa: E402
from tests.support.rate_limit import RateLimit  # noqa: E402

TENANTS = {"t1": 1.0, "t2": 1.0, "t3": 2.0}
PADDING = "lorem ipsum dolor sit amet " * 135  # ~3,600 characters: ~950 tokens a request (tokens bind)


def _manifest(base_url: str) -> Manifest:
    return Manifest.model_validate(
        {
            "host": {"models": {"providers": {"openai": {"api_key": "k", "base_url": base_url}}}},
            "agents": {"a": {"model": "openai:gpt-4o-mini", "stream": False}},
        }
    )


def _policy(args: argparse.Namespace, folder: Path) -> Path:
    limits = {
        "match": "openai:*",
        "rpm": args.rpm,
        "input_tpm": args.input_tpm,
        "window": args.window,
        "output_reserve": 20,
    }
    policy = {"quotas": {"models": [limits], "tenants": TENANTS}}
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def _workers(mode: str, args: argparse.Namespace, address: str, queue: str, folder: Path) -> list[Any]:
    base = [sys.executable, str(Path(__file__)), "worker", address, queue, mode]
    extra = [str(_policy(args, folder))] if mode == "quotas" else [str(2 * args.rpm / args.window * 0.9)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for i in range(args.workers):
        log = open(Path(args.logs) / f"{mode}-worker-{i}.log", "wb") if args.logs else subprocess.DEVNULL  # noqa: SIM115
        procs.append(subprocess.Popen([*base, *extra], env=env, stdout=log, stderr=log))
    return procs


async def _progress(client: Any) -> None:
    """Every 15 s on stderr: the quota workflow's grants, use and waiting requests (a stalled run shows)."""
    began = time.monotonic()
    while True:
        await asyncio.sleep(15)
        for found in await endpoints(client, None):
            print(
                f"  {time.monotonic() - began:5.0f}s: {found.requests} granted, {found.use.requests} in the "
                f"window ({found.use.input_tokens} tokens), {len(found.waiting)} waiting",
                file=sys.stderr,
            )


async def _session(
    client: Any,
    queue: str,
    manifest: Manifest,
    tenant: str,
    interactive: bool,
    delay: float,
    starting: asyncio.Semaphore,
    saturated: asyncio.Event,
    jobs_started: list[str],
) -> tuple[str, bool, float, str]:
    """One session's first turn: (tenant, interactive, seconds from prompt to answer, why it failed
    or ''). A person's prompt comes `delay` seconds after the jobs saturate the endpoint."""
    if interactive:
        await saturated.wait()
    await asyncio.sleep(delay)
    wolf = WolfClient(client, tenant=tenant, task_queue=queue)
    text = f"tenant={tenant} {'interactive' if interactive else 'job'} {PADDING}"
    async with starting:
        started = time.monotonic()
        if interactive:  # a person's session: priority 1
            sid = await wolf.start_session("a", manifest, prompt=text)
        else:  # a job
            sid = await wolf.start_session("a", manifest, prompt=text, background=True, trigger="bench")
            jobs_started.append(sid)
    if interactive:
        error = "the session ended without finishing its turn"
        async for _, event in wolf.events(sid, live=False):
            if event.kind == "error":
                error = f"{sid}: {event.kind}: {event.text}"
            if event.kind == "turn_finished":
                await wolf.close(sid)
                ok = event.outcome == "completed"
                return tenant, True, time.monotonic() - started, "" if ok else f"{event.outcome}: {error}"
        return tenant, True, time.monotonic() - started, error
    for attempt in range(30):
        try:
            result = await wolf.result(sid)
        except RPCError as exc:  # the loaded server's deadline, not the session's failure: ask again
            print(f"  {sid}: asking for its result again: {exc}", file=sys.stderr)
            await asyncio.sleep(min(2**attempt, 10))
            continue
        except Exception as exc:  # noqa: BLE001 - a failed workflow is a failed turn
            why = f"{sid}: {type(exc).__name__}: {exc} ({exc.__cause__})"
            return tenant, False, time.monotonic() - started, why
        failed = "" if result.outcome == "completed" else f"{sid}: {result.outcome}: {result.output}"
        return tenant, False, time.monotonic() - started, failed
    return tenant, False, time.monotonic() - started, f"{sid}: its result could not be read"


async def run_mode(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    from temporalio.testing import WorkflowEnvironment

    limit = RateLimit(rpm=args.rpm, input_tpm=args.input_tpm, window=args.window, tag=_tenant_of)
    rng = random.Random(args.seed)
    with (
        tempfile.TemporaryDirectory(prefix="wolf-quotas-") as tmp,
        ScriptedOpenAI(lambda r: Reply(text="ok"), limit=limit) as server,
    ):
        folder = Path(tmp)
        os.environ["WOLF_PAYLOAD_STORE"] = str(folder / "payloads")
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=dynamic_config_args(),
        )
        queue = f"quotas-{mode}"
        procs = _workers(mode, args, env.client.service_client.config.target_host, queue, folder)
        try:
            await _polling(env.client, queue, len(procs))
            manifest = _manifest(server.base_url)
            tenants = [t for t in TENANTS for _ in range(args.sessions // len(TENANTS))]
            # jobs start 10 at a time (a dev server on a loaded machine times out 150 starts sent at
            # once); people's prompts do not queue behind the job script's starts, else they arrive
            # bunched when the jobs' starts are slow
            plan, starting = [], {True: asyncio.Semaphore(10), False: asyncio.Semaphore(10)}
            saturated, jobs_started = asyncio.Event(), list[str]()
            for i, tenant in enumerate(tenants):
                interactive = i % 5 == 0  # 20 %
                # jobs all at once (a saturated queue), interactive prompts spread over the run
                delay = rng.uniform(5, args.sessions / args.rpm * args.window * 0.6) if interactive else 0.0
                gates = (starting[interactive], saturated, jobs_started)
                plan.append(_session(env.client, queue, manifest, tenant, interactive, delay, *gates))
            jobs = sum(1 for i in range(len(tenants)) if i % 5)
            watch = asyncio.create_task(_saturation(limit, jobs_started, jobs, args.people_from, saturated))
            progress = asyncio.create_task(_progress(env.client))
            try:
                outcomes = await asyncio.wait_for(asyncio.gather(*plan), timeout=args.timeout)
            finally:
                progress.cancel()
                watch.cancel()
            found = await endpoints(env.client, None)
            lease_p95 = found[0].wait_p95.get(1) if found else None
            if args.logs:
                await _save_limiter(env.client, Path(args.logs), mode)
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
            await env.shutdown()
    return {**_figures(limit, outcomes, args), "mode": mode, "lease_p95_s": lease_p95}


async def _saturation(
    limit: RateLimit, started: list[str], jobs: int, people_from: str, saturated: asyncio.Event
) -> None:
    """People's prompts start counting their delays from the bench's start (`--people-from start`),
    or once every job has started and the provider has seen a request (`saturated`): else the
    prompts due while 120 sessions start on a loaded machine reach the quota workflow bunched, several
    in the same second, and wait on each other, which no scheduler can help."""
    while people_from == "saturated" and (len(started) < jobs or not limit.log):
        await asyncio.sleep(0.1)
    saturated.set()


async def _save_limiter(client: Any, folder: Path, mode: str) -> None:
    """Every run of the quota workflow's history, for a look at when requests asked and were granted."""
    async for run in client.list_workflows("WorkflowType = 'Limiter'"):
        history = await client.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
        (folder / f"{mode}-limiter-{run.run_id}.json").write_text(history.to_json())


async def _polling(client: Any, queue: str, workers: int) -> None:
    """Until every worker process polls the queue (their imports take seconds on a loaded machine)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    )
    for _ in range(600):
        described = await client.workflow_service.describe_task_queue(request)
        if len({p.identity for p in described.pollers}) >= workers:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"{workers} workers did not poll {queue} within 5 minutes")


def _figures(limit: RateLimit, outcomes: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    log = limit.log
    accepted = limit.accepted()
    failed = sum(1 for o in outcomes if o[3])
    for o in outcomes:
        if o[3]:
            print(f"  failed turn ({'interactive' if o[1] else 'job'}): {o[3]}", file=sys.stderr)
    interactive = sorted(o[2] for o in outcomes if o[1] and not o[3])
    # Budget use from the first accepted request, and tenant shares from the first request of the
    # tenant that came last (sessions start in tenant order: a tenant with nothing waiting yet
    # reserves no share), both to the first tenant's last request: the span every tenant had work.
    first = {t: min((e.at for e in accepted if e.tag == t), default=0.0) for t in TENANTS}
    last = {t: max((e.at for e in accepted if e.tag == t), default=0.0) for t in TENANTS}
    start, end = (accepted[0].at, min(last.values())) if accepted else (0.0, 0.0)
    windows = max((end - start) / args.window, 1e-9)
    inside = [e for e in accepted if e.at < end]
    used = sum(e.input_tokens for e in inside) / (args.input_tpm * windows) if accepted else 0.0
    shares = Counter(e.tag for e in accepted if max(first.values()) <= e.at <= end)
    counted = max(1, sum(shares.values()))
    whole = Counter(e.tag for e in accepted if e.at <= end)
    return {
        "requests": len(log),
        "refused_429": len(limit.refusals()),
        "ratio_429": len(limit.refusals()) / max(1, len(log)),
        "in_cooldown": len(limit.sent_in_cooldowns()),
        "failed_turns": failed,
        "turns": len(outcomes),
        "budget_used": min(used, 9.99),
        "shares": {t: shares[t] / counted for t in TENANTS},
        "shares_from_start": {t: whole[t] / max(1, sum(whole.values())) for t in TENANTS},
        "interactive_p95_s": statistics.quantiles(interactive, n=20)[-1] if len(interactive) >= 2 else None,
    }


def _tenant_of(body: dict[str, Any]) -> str:
    found = re.search(r"tenant=(\w+)", json.dumps(body))
    return found.group(1) if found else ""


def _print(figures: dict[str, Any], off: dict[str, Any] | None) -> None:
    want = {t: w / sum(TENANTS.values()) for t, w in TENANTS.items()}
    shares = ", ".join(f"{t} {s:.1%} (want {want[t]:.0%})" for t, s in figures["shares"].items())
    p95 = figures["interactive_p95_s"]
    print(
        f"{figures['mode']:>8}: {figures['requests']} requests, 429s {figures['refused_429']} "
        f"({figures['ratio_429']:.1%}), sent in a cooldown {figures['in_cooldown']}, failed turns "
        f"{figures['failed_turns']}/{figures['turns']}, input budget used {figures['budget_used']:.0%}, "
        f"shares {shares} (from the first request: {_percents(figures['shares_from_start'])}), "
        f"interactive p95 prompt->answer {_seconds(p95)}, lease wait {_seconds(figures['lease_p95_s'])}"
    )
    if off is not None and figures is not off:
        ratio_failed = figures["failed_turns"] / off["failed_turns"] if off["failed_turns"] else float("nan")
        ratio_429 = figures["refused_429"] / off["refused_429"] if off["refused_429"] else float("nan")
        print(f"{'':>10}against off: failed turns x{ratio_failed:.2f}, 429s x{ratio_429:.2f}")


def _percents(shares: dict[str, float]) -> str:
    return " / ".join(f"{v:.0%}" for v in shares.values())


def _seconds(value: float | None) -> str:
    return f"{value:.2f}s" if value is not None else "-"


def worker(address: str, queue: str, mode: str, extra: str) -> None:
    """A worker process: `quotas` with a policy file, `off` plain, `queue` with Temporal's
    task-queue activity rate limit."""
    from temporalio.client import Client
    from temporalio.worker import Worker

    from agentwolf.config.policy import WorkerPolicy, load_policy
    from agentwolf.worker import bootstrap as main

    if mode == "queue":
        main.Worker = functools.partial(Worker, max_task_queue_activities_per_second=float(extra))  # type: ignore[misc]
    policy = load_policy(extra) if mode == "quotas" else WorkerPolicy()

    async def run() -> None:
        client = await Client.connect(address, data_converter=data_converter())
        built, hosts = main.create_worker(client, task_queue=queue, policy=policy)
        await main.run_worker(built, hosts, asyncio.Event())

    asyncio.run(run())


async def main_async() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=150)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--rpm", type=int, default=10, help="requests per window")
    parser.add_argument("--input-tpm", type=int, default=6667, help="input tokens per window")
    parser.add_argument("--modes", default="off,queue,quotas")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--people-from",
        choices=["saturated", "start"],
        default="saturated",
        help="people's prompts come at random over 5-90 s from when the jobs saturate the endpoint "
        "(every job started and one request sent) or from the bench's start",
    )
    parser.add_argument("--logs", help="a folder for the worker processes' output (default: discarded)")
    args = parser.parse_args()
    results = {}
    for mode in args.modes.split(","):
        results[mode] = await run_mode(mode, args)
        _print(results[mode], results.get("off"))
    print(
        f"{args.workers} workers, {args.sessions} sessions, window {args.window:g}s, {args.rpm} requests and "
        f"{args.input_tpm} input tokens per window"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(*sys.argv[2:6])
    else:
        asyncio.run(main_async())
