"""`wolf serve`'s app on 127.0.0.1 inside the test's event loop (uvicorn), for real HTTP clients."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
import uvicorn
from temporalio.client import Client

from agentwolf.config.manifest import Manifest
from agentwolf.protocols.app import create_app
from agentwolf.protocols.auth import ApiKeys
from agentwolf.protocols.capacity import Capacity
from agentwolf.protocols.served import IDLE_CLOSE_AFTER, Served
from agentwolf.protocols.server import server_config

KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}
"""API keys the served app accepts in tests: key -> tenant."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def serving(
    client: Client,
    task_queue: str,
    manifest: Manifest | None = None,
    *,
    config_name: str | None = None,
    open_tenant: str | None = None,
    keys: ApiKeys | None = None,
    cors_origins: tuple[str, ...] = (),
    limits: Capacity | None = None,
    idle_close_after: timedelta | None = IDLE_CLOSE_AFTER,
    **app: object,
) -> AsyncIterator[str]:
    """Serve `manifest` (or a registry config) with the test keys (or, with `open_tenant`, without
    keys: `wolf serve --no-auth`) to pages of `cors_origins` too; yields the base URL. With `limits`,
    the app runs wrapped as `wolf serve` runs it (protocols/server.py `server_config`)."""
    keys = keys or ApiKeys.load([], {"WOLF_API_KEYS": ",".join(f"{k}={t}" for k, t in KEYS.items())})
    served = Served(
        client=client,
        task_queue=task_queue,
        keys=keys,
        manifest=manifest,
        config_name=config_name,
        open_tenant=open_tenant,
        cors_origins=cors_origins,
        idle_close_after=idle_close_after,
    )
    port = free_port()
    asgi = create_app(served, **app)
    config = (
        server_config(asgi, host="127.0.0.1", port=port, limits=limits, cors_origins=cors_origins)
        if limits is not None
        else uvicorn.Config(asgi, host="127.0.0.1", port=port, log_level="warning")
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def console_cookie(http: httpx.AsyncClient, key: str) -> dict[str, str]:
    """Sign in to the console with `key` as its login form does: the cookie it sets, as {name: value}
    (for `cookies=`: httpx sends no Secure cookie over plain HTTP, where a browser on loopback does)."""
    origin = str(http.base_url).rstrip("/")
    answer = await http.post("/console/login", data={"key": key}, headers={"Origin": origin})
    assert answer.status_code == 303, answer.text
    name, _, value = answer.headers["set-cookie"].split(";")[0].partition("=")
    http.cookies.clear()  # only what the caller passes is sent
    return {name: value}


@asynccontextmanager
async def serve_process(
    command: list[str], port: int, env: dict[str, str]
) -> AsyncIterator[httpx.AsyncClient]:
    """`wolf serve` as its own process (`command`, listening on `port`), once /health answers; a
    client for it. Stopped with SIGTERM, as a supervisor stops it."""
    from tests.conftest import wait_for

    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def up() -> bool:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                try:
                    return (await http.get("/health")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_for(up)
            yield http
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)
