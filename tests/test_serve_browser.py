"""`wolf serve` from a real browser (Playwright driving Debian's Chromium): a page served from another
origin `fetch`es the API with its key. From a listed origin the preflight passes and the page reads
the answer, streamed ones too (a chat completion, an AG-UI run); from any other origin, and from an
opaque (`null`) one even under `*`, the fetch fails as browsers fail it (TypeError) and the real
request never reaches the server."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, async_playwright

from agentwolf.protocols.capacity import Capacity
from tests.conftest import make_manifest
from tests.support.models import Script, sequence, text
from tests.support.serving import serving

CHROMIUM = "/usr/bin/chromium"
ANSWER = "Pages of a listed origin read this answer as it streams."

pytestmark = pytest.mark.needs(
    Path(CHROMIUM).exists(), f"Debian's Chromium at {CHROMIUM} (apt-get install chromium)"
)

FETCH = """async ([url, key, body]) => {
    try {
        const answer = await fetch(url, {
            method: body ? "POST" : "GET",
            headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json"},
            body: body ? JSON.stringify(body) : undefined,
        });
        const reader = answer.body.getReader();
        const decoder = new TextDecoder();
        let text = "";
        for (let part = await reader.read(); !part.done; part = await reader.read()) {
            text += decoder.decode(part.value, {stream: true});
        }
        return {status: answer.status, session: answer.headers.get("x-wolf-session"), text};
    } catch (error) {
        return {error: error.name + ": " + error.message};
    }
}"""
"""What a web app's script does: fetch with the key, read the body as it arrives, read a header."""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>a web app</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def web_app() -> Iterator[str]:
    """A static HTTP server on 127.0.0.1 serving one page: a web app's origin."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@asynccontextmanager
async def browser_page() -> AsyncIterator[Page]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield await browser.new_page()
        finally:
            await browser.close()


def _requests(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, int]]:
    return [
        (r.http["method"], r.http["path"], r.http["status"])  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "agentwolf.protocols.http"
    ]


async def test_a_listed_origin_s_page_reads_answers_and_streams(client, task_queue, run_worker, caplog):
    caplog.set_level(logging.INFO, logger="agentwolf.protocols.http")
    script = Script(sequence(text(ANSWER), text(ANSWER)), chunk_delay=0.05)
    with web_app() as origin:
        async with (
            run_worker(local_models={"m": script.model}),
            serving(client, task_queue, make_manifest(), cors_origins=(origin,), limits=Capacity()) as api,
            browser_page() as page,
        ):
            await page.goto(origin)
            models = await page.evaluate(FETCH, [f"{api}/v1/models", "key-a", None])
            wrong_key = await page.evaluate(FETCH, [f"{api}/v1/models", "key-zzz", None])
            body = {"model": "a", "stream": True, "messages": [{"role": "user", "content": "go"}]}
            streamed = await page.evaluate(FETCH, [f"{api}/v1/chat/completions", "key-a", body])
            run = {
                "threadId": f"t-{uuid.uuid4().hex[:8]}",
                "runId": uuid.uuid4().hex,
                "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": "go"}],
                "tools": [],
                "context": [],
                "state": {},
                "forwardedProps": {},
            }
            agui = await page.evaluate(FETCH, [f"{api}/agui/a", "key-a", run])
    assert models["status"] == 200, models
    assert '"id":"a"' in models["text"].replace(" ", "")
    # Auth still applies to a listed page, and the page can read why it was refused.
    assert wrong_key["status"] == 401 and "invalid_api_key" in wrong_key["text"]
    assert streamed["status"] == 200, streamed
    assert streamed["session"]  # an exposed header: the page can continue the session
    chunks = _data(streamed["text"])
    assert chunks[-1] == "[DONE]"
    said = [
        c["choices"][0]["delta"].get("content") or "" for c in map(json.loads, chunks[:-1]) if c["choices"]
    ]
    assert "".join(said) == ANSWER
    # An AG-UI run, as CopilotKit's HttpAgent starts one from a page.
    assert agui["status"] == 200, agui
    events = [json.loads(data) for data in _data(agui["text"])]
    types = [e["type"] for e in events]
    assert types[0] == "RUN_STARTED" and types[-1] == "RUN_FINISHED", types
    assert "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT") == ANSWER
    paths = {("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("POST", "/agui/a")}
    preflights = {("OPTIONS", path, 200) for _, path in paths}
    assert preflights | {(method, path, 200) for method, path in paths} <= set(_requests(caplog))


def _data(sse: str) -> list[str]:
    return [line.removeprefix("data: ") for line in sse.splitlines() if line.startswith("data: ")]


async def test_another_origin_s_page_cannot_fetch(client, task_queue, caplog):
    caplog.set_level(logging.INFO, logger="agentwolf.protocols.http")
    with web_app() as listed, web_app() as other:
        async with (
            serving(client, task_queue, make_manifest(), cors_origins=(listed,), limits=Capacity()) as api,
            browser_page() as page,
        ):
            await page.goto(other)
            refused = await page.evaluate(FETCH, [f"{api}/v1/models", "key-a", None])
    assert refused == {"error": "TypeError: Failed to fetch"}
    # The preflight met Guard like any keyless request (401, no Access-Control-* header: see
    # test_serve_cors.py), so the browser never sent the real request with the key.
    assert _requests(caplog) == [("OPTIONS", "/v1/models", 401)]


async def test_any_origin_still_refuses_an_opaque_one(client, task_queue):
    with web_app() as origin:
        async with (
            serving(client, task_queue, make_manifest(), cors_origins=("*",)) as api,
            browser_page() as page,
        ):
            await page.goto(origin)
            allowed = await page.evaluate(FETCH, [f"{api}/v1/models", "key-a", None])
            # A sandboxed frame's scripts run in an opaque origin: its requests say `Origin: null`.
            await page.set_content('<iframe sandbox="allow-scripts" srcdoc="<p>sandboxed</p>"></iframe>')
            frame = page.frames[1]
            assert await frame.evaluate("self.origin") == "null"
            opaque = await frame.evaluate(FETCH, [f"{api}/v1/models", "key-a", None])
    assert allowed["status"] == 200, allowed
    assert opaque == {"error": "TypeError: Failed to fetch"}
