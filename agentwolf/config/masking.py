"""A manifest as an operator may see it: placeholders as written, literal secrets masked."""

from __future__ import annotations

from typing import Any

from agentwolf.config.manifest import Manifest

MASK = "****"


def masked(manifest: Manifest) -> dict[str, Any]:
    """Provider API keys, MCP server env values and headers are masked; everything else is shown as
    written. Placeholders are never resolved here: a `${VAR}` can sit in any field (a URL's query, an
    argument, a model spec), and what it stands for is the worker's to know, not the viewer's."""
    data = manifest.model_dump(mode="json")
    host = data["host"]
    for provider in host["models"]["providers"].values():
        if provider.get("api_key"):
            provider["api_key"] = MASK
    for server in host["mcp_servers"].values():
        server["env"] = dict.fromkeys(server["env"], MASK)
        server["headers"] = dict.fromkeys(server["headers"], MASK)
    return data
