"""The web console (/console on `wolf serve`) in Debian's Chromium: how soon streamed text shows on a
session page, and how soon the session list's first page shows with 10,000 sessions.

One Temporal dev server (AgentWolf's `dynamic_config_args()`, in memory), the app in a process of
its own as `wolf serve` runs it (bench/serve.py `run_app`, key `bench`), a worker in this process
(agent `a` on a local streaming FunctionModel: `--tokens` word-sized chunks, the first at once, then
one every `--chunk-ms`), and Playwright driving /usr/bin/chromium, signed in with the key.

1. First text visible, `--runs` times: a fresh session (WolfClient.start_session, no prompt), its
   page opened and its event stream connected; then a prompt. Measured from the moment the model
   function in the worker hands over its first chunk (`time.time()` there) to the moment the page's
   MutationObserver sees the assistant's text appear (`performance.timeOrigin + performance.now()`
   in Chromium; same machine, same wall clock). Goal: p50 <= 300 ms.
2. An approval in the inbox, `--runs` times: the approvals page open, a session of a registry config
   whose agent asks for approval of a tool at once; measured from the session's `asked_at` (the
   workflow's clock when it asked) until the page lists it. Goal: p50 <= 1000 ms.
3. The session list with `--sessions` sessions of one tenant: sessions started with a day's start
   delay on a task queue no worker polls (visibility lists them, idle, as it lists any idle session;
   nothing runs, and the dev server has no task to dispatch for them), then
   `--runs` times: GET /console/sessions by HTTP (the server's answer, whole), and the page in
   Chromium from navigation until its 25 rows are in the DOM. Goal: p50 <= 500 ms. The rows' figures
   (turns, tokens, USD) come afterwards by their own request; for these sessions, which no worker
   answers, they show as unknown after FIGURES_WAIT (each run waits for them before the next).

Run:   python bench/console.py                  (20 runs, 10,000 sessions)
Quick: python bench/console.py --runs 5 --sessions 1000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH.parent)]

CHROMIUM = "/usr/bin/chromium"
GOAL_FIRST_TEXT_MS = 300
GOAL_FIRST_PAGE_MS = 500
GOAL_INBOX_MS = 1000
WORD = "token "
IDLE_QUEUE = "bench-console-nobody"
"""The task queue of the list's sessions: no worker polls it, so they cost nothing but their start."""
STARTS_AT_ONCE = 64

FIRST_TEXT = """() => new Promise((resolve) => {
    const log = document.querySelector("#conversation");
    const seen = () => [...log.querySelectorAll(".msg.assistant .text")].some((n) => n.textContent);
    new MutationObserver((changes, observer) => {
        if (seen()) { observer.disconnect(); resolve(performance.timeOrigin + performance.now()); }
    }).observe(log, {childList: true, subtree: true, characterData: true});
})"""
"""When the page first shows the assistant's text (ms since the epoch, sub-ms precision)."""


FIGURES_SHOWN = "!document.querySelector('[data-fig=\"turns\"]').textContent.includes('…')"
"""The list's figures arrived (or were given up on: unknown)."""


def _model(tokens: int, chunk_s: float, handed: list[float]) -> Any:
    """Streams `tokens` words; `handed` gets the wall-clock time of each request's first chunk."""
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    async def answer(messages: Any, info: Any) -> ModelResponse:
        return ModelResponse(parts=[TextPart(WORD * tokens)])

    async def stream(messages: Any, info: Any) -> AsyncIterator[str]:
        for i in range(tokens):
            if i:
                await asyncio.sleep(chunk_s)
            else:
                handed.append(time.time() * 1000)
            yield WORD

    return FunctionModel(answer, stream_function=stream)


async def _started(client: Any, manifest: Any, count: int) -> None:
    """`count` sessions of tenant `bench` as visibility lists an idle session (WolfClient.start_session's
    input and search attributes), started with a day's delay: their first workflow task is not due, so
    the dev server neither dispatches nor retries one per session (no worker would take it)."""
    from temporalio.common import SearchAttributePair, TypedSearchAttributes

    from agentwolf.workflows.session_input import SessionInput
    from agentwolf.workflows.types import (
        ACTIVE_ATTR,
        AGENT_ATTR,
        SESSION_WORKFLOW,
        STATE_ATTR,
        TENANT_ATTR,
        workflow_id,
    )

    attributes = TypedSearchAttributes(
        [
            SearchAttributePair(TENANT_ATTR, "bench"),
            SearchAttributePair(AGENT_ATTR, "a"),
            SearchAttributePair(STATE_ATTR, "idle"),
            SearchAttributePair(ACTIVE_ATTR, datetime.now(UTC)),  # as WolfClient starts a session
        ]
    )
    gate = asyncio.Semaphore(STARTS_AT_ONCE)

    async def one(i: int) -> None:
        sid = f"idle-{i:05d}"
        async with gate:
            await client.start_workflow(
                SESSION_WORKFLOW,
                SessionInput(session_id=sid, tenant="bench", agent="a", manifest=manifest),
                id=workflow_id("bench", sid),
                task_queue=IDLE_QUEUE,
                search_attributes=attributes,
                start_delay=timedelta(days=1),
            )

    await asyncio.gather(*(one(i) for i in range(count)))


async def _listed(client: Any, count: int) -> Any:
    """The tenant's session count once visibility lists the `count` started ones (or after 2 minutes)."""
    deadline = time.perf_counter() + 120
    while True:
        found = await client.count_workflows(f"WolfTenant = 'bench' AND TaskQueue = '{IDLE_QUEUE}'")
        if found.count >= count or time.perf_counter() > deadline:
            return await client.count_workflows("WolfTenant = 'bench'")
        await asyncio.sleep(1)


async def first_texts(
    page: Any, base: str, wolf: Any, manifest: Any, handed: list[float], runs: int
) -> list[float]:
    lags = []
    for _ in range(runs):
        sid = await wolf.start_session("a", manifest)
        await page.goto(f"{base}/console/sessions/{sid}")
        await page.wait_for_function("window.wolfSession && window.wolfSession.open")
        shown = asyncio.create_task(page.evaluate(FIRST_TEXT))
        before = len(handed)
        await wolf.prompt(sid, "go")
        visible = await shown
        lags.append(visible - handed[before])
        await wolf.close(sid)
    return lags


INBOX_SHOWS = """(sid) => new Promise((resolve) => {
    const inbox = document.querySelector("#inbox");
    const seen = () => inbox.querySelector(`.approval a[href$="/${sid}"]`);
    if (seen()) resolve(performance.timeOrigin + performance.now());
    new MutationObserver((changes, observer) => {
        if (seen()) { observer.disconnect(); resolve(performance.timeOrigin + performance.now()); }
    }).observe(inbox, {childList: true, subtree: true});
})"""
"""When the inbox first lists the session's approval (ms since the epoch)."""


def _asking_model() -> Any:
    """Asks for `echo` first, then answers: every session waits for an approval once."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    async def answer(messages: Any, info: Any) -> ModelResponse:
        answered = any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)
        return ModelResponse(parts=[TextPart("done") if answered else ToolCallPart("echo", {"text": "hi"})])

    return FunctionModel(answer)


INBOX_CONFIG = "inbox"
INBOX_MANIFEST = {
    "host": {
        "mcp_servers": {
            "tools": {
                "command": sys.executable,
                "args": [str(BENCH.parent / "tests/support/tools_server.py")],
            }
        }
    },
    "agents": {
        "a": {
            "model": "local:ask",
            "capabilities": [{"mcp": "tools"}],
            "permissions": {"rules": [{"tool": "echo", "action": "confirm"}]},
        }
    },
}
"""A registry config whose agent asks for approval of `echo` (the console reaches registry sessions)."""


async def inbox_lags(page: Any, base: str, wolf: Any, runs: int) -> list[float]:
    """From the moment a session asks for approval (its `asked_at`, the workflow's clock) until the
    open inbox page lists it."""
    await page.goto(f"{base}/console/approvals")
    lags = []
    for _ in range(runs):
        sid = f"inbox-{len(lags)}-{time.time_ns()}"
        shown = asyncio.create_task(page.evaluate(INBOX_SHOWS, sid))
        await wolf.start_session("a", config_name=INBOX_CONFIG, session_id=sid, prompt="go")
        visible = await shown
        status = await wolf.status(sid)
        (pending,) = status.pending_approvals
        assert pending.asked_at is not None
        lags.append(visible - pending.asked_at.timestamp() * 1000)
        await wolf.approve(sid, pending.call_id)
        await wolf.close(sid)
    return lags


async def first_pages(page: Any, http: Any, base: str, runs: int) -> tuple[list[float], list[float]]:
    served, rendered = [], []
    for _ in range(runs):
        start = time.perf_counter()
        answer = await http.get(f"{base}/console/sessions", headers={"Accept": "text/html"})
        answer.raise_for_status()
        served.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        await page.goto(f"{base}/console/sessions", wait_until="commit")
        await page.wait_for_function("document.querySelectorAll('tr[data-session]').length === 25")
        rendered.append((time.perf_counter() - start) * 1000)
        # The rows' figures come next, by their own request: let them end before the next run.
        await page.wait_for_function(FIGURES_SHOWN)
    return served, rendered


def _line(name: str, values: list[float], goal: float) -> str:
    p50 = statistics.median(values)
    return (
        f"  {name:<44} p50 {p50:7.1f} ms  (min {min(values):.1f}, max {max(values):.1f}; goal <= {goal} ms: "
        f"{'met' if p50 <= goal else 'NOT met'})"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--chunk-ms", type=float, default=50)
    args = parser.parse_args()

    import httpx
    from playwright.async_api import async_playwright
    from temporalio.testing import WorkflowEnvironment

    from agentwolf.client.wolf_client import WolfClient
    from agentwolf.config.manifest import Manifest
    from agentwolf.ops.devserver import dynamic_config_args, temporal_binary
    from agentwolf.payloads import data_converter
    from agentwolf.worker.bootstrap import create_worker
    from agentwolf.workflows.types import SEARCH_ATTRIBUTES
    from bench.serve import KEY, MANIFEST, _child
    from tests.support.serving import free_port

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WOLF_PAYLOAD_STORE"] = str(Path(tmp) / "payloads")
        env = await WorkflowEnvironment.start_local(
            dev_server_existing_path=temporal_binary(),
            data_converter=data_converter(),
            search_attributes=SEARCH_ATTRIBUTES,
            dev_server_extra_args=dynamic_config_args(),
        )
        address, task_queue, port = env.client.service_client.config.target_host, "bench-console", free_port()
        handed: list[float] = []
        worker, hosts = create_worker(
            env.client,
            task_queue=task_queue,
            local_models={"m": _model(args.tokens, args.chunk_ms / 1000, handed), "ask": _asking_model()},
        )
        app = _child(Path(tmp) / "app.log", "--app", address, task_queue, str(port))
        base = f"http://127.0.0.1:{port}"
        try:
            async with worker, httpx.AsyncClient(timeout=60) as http, async_playwright() as playwright:
                while True:
                    try:
                        if (await http.get(base + "/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
                browser = await playwright.chromium.launch(executable_path=CHROMIUM)
                page = await browser.new_page(viewport={"width": 1280, "height": 900}, bypass_csp=True)
                await page.goto(f"{base}/console/login")
                await page.get_by_label("API key").fill(KEY)
                await page.get_by_role("button", name="Sign in").click()
                await page.wait_for_url(f"{base}/console/sessions")
                http.cookies.set("wolf_console", KEY)
                wolf = WolfClient(env.client, tenant="bench", task_queue=task_queue)
                manifest = Manifest.model_validate(MANIFEST)

                await first_texts(page, base, wolf, manifest, handed, 2)  # warm-up: sandbox, connections
                lags = await first_texts(page, base, wolf, manifest, handed, args.runs)
                head = f"first text visible on a session page, {args.runs} runs ({args.tokens} tokens every "
                line = _line("model hands its first chunk -> text in the DOM", lags, GOAL_FIRST_TEXT_MS)
                print(f"{head}{args.chunk_ms:g} ms):\n{line}", flush=True)

                await wolf.config_push(INBOX_CONFIG, Manifest.model_validate(INBOX_MANIFEST))
                await inbox_lags(page, base, wolf, 2)  # warm-up: the MCP server, the registry
                waits = await inbox_lags(page, base, wolf, args.runs)
                line = _line("session asks -> listed in the open inbox", waits, GOAL_INBOX_MS)
                print(
                    f"approval in the inbox (refreshed every 500 ms), {args.runs} runs:\n{line}", flush=True
                )

                start = time.perf_counter()
                await _started(env.client, manifest, args.sessions)
                made = time.perf_counter() - start
                count = await _listed(env.client, args.sessions)
                served, rendered = await first_pages(page, http, base, args.runs)
                print(
                    f"session list, first page of {count.count} sessions ({args.sessions} started in "
                    f"{made:.1f} s), {args.runs} runs:\n"
                    f"{_line('GET /console/sessions (server, whole answer)', served, GOAL_FIRST_PAGE_MS)}\n"
                    f"{_line('navigation -> 25 rows in the DOM (Chromium)', rendered, GOAL_FIRST_PAGE_MS)}",
                    flush=True,
                )
                await browser.close()
        finally:
            app.terminate()
            app.wait(15)
            await hosts.close()
            await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
