"""An MCP server for extension tests: serves skills (SEP-2640, or plain `resources/list` with
`--plain`), prompts, and a tool that adds tools and announces `list_changed` (`--storm N` sends N).

Skills come from the folder named by WOLF_SKILLS_DIR (each subfolder with a SKILL.md).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resources import TextResource
from mcp_types import PaginatedRequestParams, RequestParams

ROOT = Path(os.environ.get("WOLF_SKILLS_DIR", "."))
PLAIN = "--plain" in sys.argv


def _files() -> dict[str, Path]:
    """skill:// URI -> file, for every file of every skill folder."""
    out = {}
    for skill_md in sorted(ROOT.glob("*/SKILL.md")):
        for path in sorted(skill_md.parent.rglob("*")):
            if path.is_file():
                out[f"skill://{path.relative_to(ROOT).as_posix()}"] = path
    return out


def _entry(skill_md: Path) -> dict[str, Any]:
    import yaml

    text = skill_md.read_text()
    frontmatter = yaml.safe_load(text.split("---")[1])
    folder = skill_md.parent
    return {
        "uri": f"skill://{folder.name}/SKILL.md",
        "frontmatter": frontmatter,
        "resources": [
            {
                "uri": f"skill://{p.relative_to(ROOT).as_posix()}",
                "digest": "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest(),
            }
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        ],
    }


class GetParams(RequestParams):
    uri: str


class Skills(Extension):
    identifier = "io.modelcontextprotocol/skills"

    def methods(self) -> list[MethodBinding]:
        async def list_skills(
            ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
        ) -> dict[str, Any]:
            return {"skills": [_entry(p) for p in sorted(ROOT.glob("*/SKILL.md"))]}

        async def get_skill(ctx: ServerRequestContext[Any, Any], params: GetParams) -> dict[str, Any]:
            path = _files().get(params.uri)
            if path is None or path.name != "SKILL.md":
                raise ValueError(f"no skill {params.uri}")
            return {"skill": _entry(path)}

        return [
            MethodBinding("skills/list", PaginatedRequestParams, list_skills),
            MethodBinding("skills/get", GetParams, get_skill),
        ]


server = MCPServer("skills-server", extensions=[] if PLAIN else [Skills()])

for _uri, _path in _files().items():
    server.add_resource(TextResource(uri=_uri, name=_uri, text=_path.read_text(errors="replace")))
server.add_resource(TextResource(uri="notes://readme", name="readme", text="not a skill"))


@server.prompt()
def review(topic: str) -> str:
    """Review something carefully."""
    return f"Please review {topic} carefully."


@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


@server.tool()
async def grow(name: str, ctx: Context, storm: int = 1, via: str = "both") -> str:
    """Add a tool called `name` and announce the new tool list (`storm` times), on the 2026
    `subscriptions/listen` stream (`listen`), as a 2025 notification (`notification`), or both."""

    def added() -> str:
        return f"{name} here"

    server.add_tool(added, name=name, description=f"added at run time: {name}")
    for _ in range(storm):
        if via in ("both", "listen"):
            await ctx.notify_tools_changed()
        if via in ("both", "notification"):
            await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run("stdio")
