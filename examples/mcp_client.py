"""AgentWolf as an MCP server: the official MCP client starts `wolf mcp` over stdio (as Claude Code
would), lists the agents as tools and asks one; a second call continues the same durable session.
With the bundled example and the local stack (`wolf up`):

    python examples/mcp_client.py [WOLF_MCP_ARGS...]   # e.g. --config wolf.yaml, --address HOST:PORT
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from mcp import Client, StdioServerParameters


async def progress(done: float, total: float | None, message: str | None) -> None:
    """Progress of a turn: its tool calls, and the answer so far (not printed here)."""
    if message and message.startswith("calling "):
        print(f"  {message}")


async def ask(client: Client, task: str, session_id: str | None = None) -> dict[str, Any]:
    """One durable turn of the `assistant` agent: {text, session_id, turn_id, status}."""
    arguments = {"task": task} | ({"session_id": session_id} if session_id else {})
    result = await client.call_tool("ask_assistant", arguments, progress_callback=progress)
    return result.structured_content or {}


async def main(wolf_mcp_args: list[str]) -> None:
    async with Client(StdioServerParameters(command="wolf", args=["mcp", *wolf_mcp_args])) as client:
        print("tools:", [tool.name for tool in (await client.list_tools()).tools])
        first = await ask(client, "What time is it in Tokyo?")
        print(first["turn_id"], first["status"], first["text"].splitlines()[0])
        more = await ask(client, "And in London?", first["session_id"])
        print(more["turn_id"], more["status"], more["text"].splitlines()[0])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
