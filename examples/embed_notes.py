"""Embed AgentWolf: a worker with the notes plugin, and a client that submits a prompt and reads the
result. Needs a Temporal server: `python examples/embed_notes.py [ADDRESS]` (default localhost:7233)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from agentwolf.client.wolf_client import WolfClient, connect
from agentwolf.config.loading import load_manifest
from agentwolf.plugins import load_plugins
from agentwolf.worker.bootstrap import create_worker

MANIFEST = load_manifest(Path(__file__).with_name("notes.yaml"))
QUEUE = "notes-example"


async def main(address: str) -> None:
    client = await connect(address)
    worker, hosts = create_worker(client, task_queue=QUEUE, plugins=load_plugins(["notes_plugin"]))
    async with worker:
        wolf = WolfClient(client, task_queue=QUEUE)
        session = await wolf.submit("buy oat milk", "scribe", MANIFEST)
        result = await wolf.result(session)
        print(result.output)
    await hosts.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "localhost:7233"))
    # temporalio's core threads can still call into Python while the interpreter finalizes, which
    # aborts a short client program now and then (temporalio/sdk-python#300): leave without it.
    sys.stdout.flush()
    os._exit(0)
