"""`wolf serve` takes on only what it can hold: half-sent requests are cut, one key's streams are
capped (429 with Retry-After), a client that stops reading is let go. The real app under uvicorn
as `wolf serve` configures it (protocols/server.py `server_config`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import uvicorn
from pydantic_ai.messages import ModelResponse, TextPart
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from temporalio.client import Client

from agentwolf.config.manifest import Manifest
from agentwolf.protocols.app import create_app
from agentwolf.protocols.auth import ApiKeys
from agentwolf.protocols.capacity import Capacity
from agentwolf.protocols.openai_api.turn_view import sse
from agentwolf.protocols.served import Served
from agentwolf.protocols.server import server_config
from tests.conftest import make_manifest, wait_for
from tests.support.models import Script, sequence
from tests.support.serving import KEYS, free_port

KEYS_ENV = {"WOLF_API_KEYS": ",".join(f"{k}={t}" for k, t in KEYS.items())}


@asynccontextmanager
async def limited(
    limits: Capacity, client: Client | None = None, task_queue: str = "q", **app: Any
) -> AsyncIterator[tuple[str, int]]:
    """The app served as `wolf serve` serves it, within `limits`: (base URL, port)."""
    served = Served(
        client=client,  # type: ignore[arg-type]  # routes without Temporal need none
        task_queue=task_queue,
        keys=ApiKeys.load([], KEYS_ENV),
        manifest=app.pop("manifest", None),
    )
    port = free_port()
    server = uvicorn.Server(
        server_config(create_app(served, **app), host="127.0.0.1", port=port, limits=limits)
    )
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}", port
    finally:
        server.should_exit = True
        await task


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (it answers nothing to a half-sent request)."""
    with_data = await reader.read(1024)
    return not with_data or reader.at_eof()


async def test_half_sent_requests_are_closed_and_whole_ones_answered():
    async with limited(Capacity(header_timeout=1.0), routes=[]) as (base, port):
        half = []
        try:
            for _ in range(20):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                await writer.drain()
                half.append((reader, writer))
            async with httpx.AsyncClient() as http:
                assert (await http.get(base + "/healthz")).status_code == 200
            closed = await asyncio.wait_for(asyncio.gather(*(_closed(r) for r, _ in half)), 60)
        finally:
            for _, writer in half:
                writer.close()
    assert all(closed)


async def test_a_slow_second_request_on_a_kept_alive_connection_is_closed_too():
    async with limited(Capacity(header_timeout=1.0), routes=[]) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            first = await asyncio.wait_for(reader.readuntil(b'{"ok":true}'), 30)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
            await writer.drain()
            rest = await asyncio.wait_for(reader.read(), 60)
        finally:
            writer.close()
    assert first.startswith(b"HTTP/1.1 200") and rest == b""


async def test_past_the_connection_cap_a_connection_is_answered_503_with_retry_after():
    async with limited(Capacity(max_connections=3), routes=[]) as (_, port):
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            answer = await asyncio.wait_for(reader.read(), 30)
            writer.close()
        finally:
            for _, w in held:
                w.close()
    assert answer.startswith(b"HTTP/1.1 503") and b"Retry-After: 2" in answer


async def test_past_the_per_key_stream_limit_the_answer_is_429_with_retry_after(
    client, task_queue, run_worker
):
    """Streams that are open and never read hold their key's places; another key is not affected."""
    words = [f"w{i} " for i in range(400)]
    script = Script(sequence(ModelResponse(parts=[TextPart("".join(words))])), chunk_delay=0.1)
    manifest: Manifest = make_manifest()
    body = {"model": "a", "messages": [{"role": "user", "content": "go"}], "stream": True}
    limits = Capacity(max_requests_per_key=2)
    async with (
        run_worker(local_models={"m": script.model}),
        limited(limits, client, task_queue, manifest=manifest) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        a = {"Authorization": "Bearer key-a"}
        async with (
            http.stream("POST", "/v1/chat/completions", json=body, headers=a) as first,
            http.stream("POST", "/v1/chat/completions", json=body, headers=a) as second,
        ):
            refused = await http.post("/v1/chat/completions", json=body, headers=a)
            other = await http.get("/v1/models", headers={"Authorization": "Bearer key-b"})
            statuses = [first.status_code, second.status_code]
        # Both streams ended: key-a has its places back.
        again = await wait_for(lambda: _models(http, a), timeout=60)
    assert statuses == [200, 200]
    assert refused.status_code == 429 and refused.headers["retry-after"] == "2"
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert other.status_code == 200 and again


async def _models(http: httpx.AsyncClient, headers: dict[str, str]) -> bool:
    return (await http.get("/v1/models", headers=headers)).status_code == 200


async def test_a_client_that_stops_reading_is_let_go():
    """A response whose client takes no bytes within the send timeout ends (its generator, and what
    it holds, is released) instead of waiting as long as the TCP connection lives."""
    ended = asyncio.Event()

    async def endless(request: Request) -> Response:
        async def events() -> AsyncIterator[dict[str, Any]]:
            try:
                while True:
                    yield {"data": "x" * 65536}
            finally:
                ended.set()

        return sse(events(), {})

    async with limited(Capacity(send_timeout=1.0), routes=[Route("/endless", endless)]) as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1024)
        try:
            writer.write(b"GET /endless HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer key-a\r\n\r\n")
            await writer.drain()
            await reader.readexactly(1)  # it answers; then this client reads nothing more
            await asyncio.wait_for(ended.wait(), 60)
        finally:
            writer.close()
