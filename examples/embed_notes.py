"""Embed AgentWolf: a worker with the notes plugin, and a client that submits a prompt and reads the
result. Needs a Temporal server: `python examples/embed_notes.py [ADDRESS]` (default localhost:7233)."""

from __future__ import annotations

import asyncio
import sys

from agentwolf.client.wolf_client import WolfClient, connect
from agentwolf.config import parse_manifest
from agentwolf.plugins import load_plugins
from agentwolf.worker.main import create_worker

MANIFEST = parse_manifest("""
host:
  mcp_servers:
    notes: {plugin: notes_plugin}   # the plugin's tools, served as the tool source `notes`
  permissions:
    rules:
      - {tool: "notes:delete_.*", action: deny}
agents:
  scribe:
    model: local:notes-demo         # registered by the plugin
    capabilities: [{mcp: notes}]
""")
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
