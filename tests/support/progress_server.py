"""An MCP server whose one tool reports progress (`notifications/progress`) while it runs:
`python progress_server.py`. `steps(count, seconds)` reports count/count after each of `count` pauses;
with $WOLF_PROGRESS_GATE set, its last step lasts until that file exists (a test decides, not the clock)."""

import os

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("wolf-test-progress")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def steps(count: int, seconds: float, ctx: Context) -> str:
    """Work in `count` steps of `seconds` each, reporting progress after each."""
    gate = os.environ.get("WOLF_PROGRESS_GATE")
    for done in range(count):
        await ctx.report_progress(done, count, f"step {done + 1} of {count}")
        await anyio.sleep(seconds)
    while gate and not os.path.exists(gate):
        await anyio.sleep(0.05)
    await ctx.report_progress(count, count, "finished")
    return f"{count} steps done"


if __name__ == "__main__":
    server.run("stdio")
