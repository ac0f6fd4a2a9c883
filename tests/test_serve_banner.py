"""`wolf serve` says "serving" only once it listens, names every front end it mounts, and a port
that is taken is one sentence, exit 2, with no banner (issue 24)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess

import httpx

from tests.support.serving import free_port
from tests.test_cli import WOLF, _wolf


async def test_the_banner_comes_once_the_port_listens_and_names_every_front_end(client, tmp_path):
    address = client.service_client.config.target_host
    port = free_port()
    proc = subprocess.Popen(  # noqa: ASYNC220 - one process, stopped below
        [WOLF, "serve", "--no-auth", "--port", str(port), "--address", address],
        env={**os.environ, "NO_COLOR": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        banner = await asyncio.wait_for(asyncio.to_thread(proc.stderr.readline), timeout=120)
        async with httpx.AsyncClient() as http:  # at once: the banner came after the bind
            health = await http.get(f"http://127.0.0.1:{port}/health")
    finally:
        proc.terminate()
        proc.wait(20)
    assert banner.startswith(f"serving on http://127.0.0.1:{port} (")
    for front_end in (
        "OpenAI /v1",
        "AG-UI /agui/AGENT",
        "MCP /mcp",
        "A2A /a2a/AGENT",
        "webhooks /hooks/NAME",
        "web console /console",
    ):
        assert front_end in banner
    assert health.status_code == 200


async def test_a_taken_port_is_one_sentence_and_no_banner(client):
    address = client.service_client.config.target_host
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = await _wolf(address, "serve", "--no-auth", "--port", str(port))
    assert run.returncode == 2, run.stderr
    assert "serving on" not in run.stderr
    assert f"error: cannot listen on 127.0.0.1:{port}: Address already in use" in run.stderr
    assert "Pick another --port" in run.stderr
