"""An MCP server for bench/chaos.py's `local_activity` scenario: `lookup(tag, seconds)`, annotated
read-only, so AgentWolf may repeat it and, once it is known fast, calls it as a local activity.

Each call appends its tag to $WOLF_LOOKUPS as it starts (a counter the chaos script reads, not an
effect the model relies on), then sleeps `seconds`: a worker killed meanwhile dies during the call.
"""

import os

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("wolf-chaos-lookups")


def _count(tag: str) -> None:
    with open(os.environ["WOLF_LOOKUPS"], "a") as f:
        f.write(tag + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def lookup(tag: str, seconds: float) -> str:
    """Look a tag up (slowly)."""
    _count(tag)  # a few microseconds: blocking is fine
    await anyio.sleep(seconds)
    return f"looked up {tag}"


if __name__ == "__main__":
    server.run("stdio")
